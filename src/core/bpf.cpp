#include "core/bpf.h"

#include <bpf/bpf.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace gpuscope {

static bool g_verbose = false;

static int print_fn(enum libbpf_print_level, const char* fmt, va_list args) {
  return g_verbose ? vfprintf(stderr, fmt, args) : 0;
}

void set_libbpf_verbose(bool verbose) {
  g_verbose = verbose;
  libbpf_set_print(print_fn);
}

Link attach_uprobe(bpf_program* prog, const UprobeTarget& t, std::string* err) {
  LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = t.cookie, .retprobe = t.retprobe);
  bpf_link* l = bpf_program__attach_uprobe_opts(prog, t.pid, t.path.c_str(), t.file_offset, &opts);
  if (!l) {
    if (err) *err = strerror(errno);
    return nullptr;
  }
  return Link(l);
}

uint64_t percpu_sum(int map_fd, uint32_t key) {
  int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return 0;
  std::vector<uint64_t> vals(static_cast<size_t>(ncpu));
  if (bpf_map_lookup_elem(map_fd, &key, vals.data()) != 0) return 0;
  uint64_t sum = 0;
  for (auto v : vals) sum += v;
  return sum;
}

RingBuffer::RingBuffer(int map_fd, Callback cb) : cb_(std::move(cb)) {
  rb_ = ring_buffer__new(map_fd, trampoline, this, nullptr);
  if (!rb_) throw std::runtime_error(std::string("ring buffer: ") + strerror(errno));
}

RingBuffer::~RingBuffer() { ring_buffer__free(rb_); }

int RingBuffer::trampoline(void* ctx, void* data, size_t size) {
  static_cast<RingBuffer*>(ctx)->cb_(data, size);
  return 0;
}

int RingBuffer::poll(int timeout_ms) {
  int n = ring_buffer__poll(rb_, timeout_ms);
  return n == -EINTR ? 0 : n;
}

int RingBuffer::drain() { return ring_buffer__consume(rb_); }

}  // namespace gpuscope
