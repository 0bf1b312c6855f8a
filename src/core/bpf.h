#pragma once
#include <bpf/libbpf.h>
#include <sys/types.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/scope.h"

namespace gpuscope {

// Owns one attachment (a libbpf link or a raw BPF link fd); destroying it detaches.
class Link {
 public:
  Link() = default;
  explicit Link(bpf_link* l) : link_(l) {}
  static Link from_fd(int fd) {
    Link l;
    l.fd_ = fd;
    return l;
  }
  Link(Link&& o) noexcept : link_(o.link_), fd_(o.fd_) {
    o.link_ = nullptr;
    o.fd_ = -1;
  }
  Link& operator=(Link&& o) noexcept {
    if (this != &o) {
      reset();
      std::swap(link_, o.link_);
      std::swap(fd_, o.fd_);
    }
    return *this;
  }
  ~Link() { reset(); }
  void reset();
  explicit operator bool() const { return link_ || fd_ >= 0; }

 private:
  bpf_link* link_ = nullptr;
  int fd_ = -1;
};

// Detaching a uprobe waits for an RCU grace period (about 0.1 s on the hosts measured), so
// hundreds of links are destroyed from many threads at once, letting grace periods overlap.
void destroy_links(std::vector<Link>& links);

// The programs a collector attaches itself beside the session's probes: a process-exit hook
// (without which exits are noticed late, by a sweep) and others (an exec hook); detached together.
class OwnHooks {
 public:
  void attach_exit(bpf_program* prog) { exit_error_ = attach(prog) ? "" : strerror(errno); }
  // False when it could not be attached.
  bool attach(bpf_program* prog);
  bool exits() const { return exit_error_.empty(); }
  const std::string& exit_error() const { return exit_error_; }
  void detach() { destroy_links(links_); }

 private:
  std::vector<Link> links_;
  std::string exit_error_;
};

// libbpf's own messages are shown only with -v.
void set_libbpf_verbose(bool verbose);

struct UprobeTarget {
  std::string path;  // openable path of the ELF file
  uint64_t file_offset;
  pid_t pid = -1;  // -1: every process; otherwise the kernel plants the breakpoint in that one only
  uint64_t cookie = 0;
  bool retprobe = false;
};
// Returns null and sets *err on failure.
Link attach_uprobe(bpf_program* prog, const UprobeTarget& t, std::string* err);

// Many probe sites in one file, one link (kernel 6.6+). The program must have been loaded
// with prepare_uprobe_multi(). Detaching it costs one RCU grace period for all sites
// instead of one per site, which is what keeps shutdown quick with hundreds of probes.
struct UprobeMultiTarget {
  std::string path;
  std::vector<uint64_t> offsets;
  std::vector<uint64_t> cookies;
  pid_t pid = -1;
  bool retprobe = false;
  bool session = false;  // one program at entry and return (BPF_TRACE_UPROBE_SESSION, 6.12+)
};
void prepare_uprobe_multi(bpf_program* prog);
// For a program that runs as a uprobe session: loaded with this, attached with `session`.
void prepare_uprobe_session(bpf_program* prog);
Link attach_uprobe_multi(bpf_program* prog, const UprobeMultiTarget& t, std::string* err);

// BPF programs by their functions' names, with what the kernel counted for them: run counts
// and run time count only while kernel.bpf_stats_enabled is 1.
struct ProgramStats {
  uint64_t runs = 0;
  uint64_t run_time_ns = 0;
};
bool bpf_stats_enabled();
// Every loaded program whose name starts with prefix, summed by name.
std::map<std::string, ProgramStats> loaded_program_stats(const std::string& prefix);
// This process's own programs (those behind its file descriptors), summed by name.
std::map<std::string, ProgramStats> own_program_stats();

// Sum of a per-CPU u64 array slot.
uint64_t percpu_sum(int map_fd, uint32_t key);

// Ring buffer consumer; the callback gets each record. Records it could not take are the
// BPF side's drop counters' business.
class RingBuffer {
 public:
  using Callback = std::function<void(const void* data, size_t size)>;
  RingBuffer(int map_fd, Callback cb);
  ~RingBuffer();
  RingBuffer(const RingBuffer&) = delete;
  RingBuffer& operator=(const RingBuffer&) = delete;
  // Returns records consumed, or a negative errno (EINTR is reported as 0).
  int poll(int timeout_ms);
  int drain();
  int epoll_fd() const { return ring_buffer__epoll_fd(rb_); }

 private:
  static int trampoline(void* ctx, void* data, size_t size);
  ring_buffer* rb_ = nullptr;
  Callback cb_;
};

}  // namespace gpuscope
