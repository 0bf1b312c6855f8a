#pragma once
#include <bpf/libbpf.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gpuscope {

// Owns one attachment; destroying it detaches.
struct LinkDeleter {
  void operator()(bpf_link* l) const { bpf_link__destroy(l); }
};
using Link = std::unique_ptr<bpf_link, LinkDeleter>;

// libbpf's own messages are shown only with -v.
void set_libbpf_verbose(bool verbose);

struct UprobeTarget {
  std::string path;  // openable path of the ELF file
  uint64_t file_offset;
  pid_t pid = -1;    // -1: every process; otherwise the kernel plants the breakpoint in that one only
  uint64_t cookie = 0;
  bool retprobe = false;
};
// Returns null and sets *err on failure.
Link attach_uprobe(bpf_program* prog, const UprobeTarget& t, std::string* err);

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

 private:
  static int trampoline(void* ctx, void* data, size_t size);
  ring_buffer* rb_ = nullptr;
  Callback cb_;
};

}  // namespace gpuscope
