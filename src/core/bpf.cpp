#include "core/bpf.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <stdexcept>
#include <thread>

namespace gpuscope {

static bool g_verbose = false;

static int print_fn(enum libbpf_print_level, const char* fmt, va_list args) {
  return g_verbose ? vfprintf(stderr, fmt, args) : 0;
}

void set_libbpf_verbose(bool verbose) {
  g_verbose = verbose;
  libbpf_set_print(print_fn);
}

void Link::reset() {
  if (link_) bpf_link__destroy(link_);
  if (fd_ >= 0) close(fd_);
  link_ = nullptr;
  fd_ = -1;
}

// libbpf 1.1 predates uprobe_multi, so the constants and the link_create layout come from
// the kernel's UAPI (include/uapi/linux/bpf.h, 6.6+).
namespace {
constexpr int kTraceUprobeMulti = 48;    // BPF_TRACE_UPROBE_MULTI
constexpr int kTraceUprobeSession = 57;  // BPF_TRACE_UPROBE_SESSION (6.12+)
constexpr int kUprobeMultiReturn = 1;    // BPF_F_UPROBE_MULTI_RETURN
constexpr int kBpfLinkCreate = 28;       // BPF_LINK_CREATE
struct LinkCreateUprobeMulti {
  uint32_t prog_fd;
  uint32_t target_fd;
  uint32_t attach_type;
  uint32_t flags;
  uint64_t path;
  uint64_t offsets;
  uint64_t ref_ctr_offsets;
  uint64_t cookies;
  uint32_t cnt;
  uint32_t multi_flags;
  uint32_t pid;
  uint32_t pad;
};
static_assert(sizeof(LinkCreateUprobeMulti) == 64);
}  // namespace

void prepare_uprobe_multi(bpf_program* prog) {
  bpf_program__set_expected_attach_type(prog, static_cast<bpf_attach_type>(kTraceUprobeMulti));
}

void prepare_uprobe_session(bpf_program* prog) {
  bpf_program__set_expected_attach_type(prog, static_cast<bpf_attach_type>(kTraceUprobeSession));
}

Link attach_uprobe_multi(bpf_program* prog, const UprobeMultiTarget& t, std::string* err) {
  LinkCreateUprobeMulti attr{};
  attr.prog_fd = static_cast<uint32_t>(bpf_program__fd(prog));
  attr.attach_type = t.session ? kTraceUprobeSession : kTraceUprobeMulti;
  attr.path = reinterpret_cast<uint64_t>(t.path.c_str());
  attr.offsets = reinterpret_cast<uint64_t>(t.offsets.data());
  attr.cookies = reinterpret_cast<uint64_t>(t.cookies.data());
  attr.cnt = static_cast<uint32_t>(t.offsets.size());
  attr.multi_flags = t.retprobe ? kUprobeMultiReturn : 0;
  attr.pid = t.pid > 0 ? static_cast<uint32_t>(t.pid) : 0;
  int fd = static_cast<int>(syscall(__NR_bpf, kBpfLinkCreate, &attr, sizeof(attr)));
  if (fd < 0) {
    if (err) *err = strerror(errno);
    return Link();
  }
  return Link::from_fd(fd);
}

Link attach_uprobe(bpf_program* prog, const UprobeTarget& t, std::string* err) {
  LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = t.cookie, .retprobe = t.retprobe);
  bpf_link* l = bpf_program__attach_uprobe_opts(prog, t.pid, t.path.c_str(), t.file_offset, &opts);
  if (!l) {
    if (err) *err = strerror(errno);
    return Link();
  }
  return Link(l);
}

bool OwnHooks::attach(bpf_program* prog) {
  bpf_link* l = bpf_program__attach(prog);
  if (l) links_.emplace_back(l);
  return l != nullptr;
}

void destroy_links(std::vector<Link>& links) {
  const size_t n = links.size();
  const size_t nthreads = std::min<size_t>(64, n);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < nthreads; t++)
    threads.emplace_back([&, t] {
      for (size_t i = t; i < n; i += nthreads) links[i].reset();
    });
  for (auto& th : threads) th.join();
  links.clear();
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
  if (n < 0 && n != -EINTR) return n;
  // Producers may submit without waking us (see the BPF side); take what is there anyway.
  int m = ring_buffer__consume(rb_);
  return (n > 0 ? n : 0) + (m > 0 ? m : 0);
}

int RingBuffer::drain() { return ring_buffer__consume(rb_); }

bool bpf_stats_enabled() {
  FILE* f = fopen("/proc/sys/kernel/bpf_stats_enabled", "re");
  if (!f) return false;
  int v = 0;
  bool on = fscanf(f, "%d", &v) == 1 && v == 1;
  fclose(f);
  return on;
}

// The kernel keeps 15 characters of a program's name; its BTF has the whole function name.
static std::string full_name(int fd, const bpf_prog_info& info) {
  std::string name = info.name;
  if (name.size() < BPF_OBJ_NAME_LEN - 1 || !info.btf_id || !info.nr_func_info) return name;
  bpf_func_info fi{};
  bpf_prog_info more{};
  more.nr_func_info = 1;
  more.func_info_rec_size = sizeof fi;
  more.func_info = reinterpret_cast<uintptr_t>(&fi);
  __u32 len = sizeof more;
  if (bpf_obj_get_info_by_fd(fd, &more, &len) != 0) return name;
  btf* b = btf__load_from_kernel_by_id(info.btf_id);
  if (!b) return name;
  if (const btf_type* t = btf__type_by_id(b, fi.type_id))
    if (const char* n = btf__name_by_offset(b, t->name_off); n && std::string_view(n).starts_with(name)) name = n;
  btf__free(b);
  return name;
}

static void add_program(int fd, const std::string& prefix, std::map<std::string, ProgramStats>& r) {
  bpf_prog_info info{};
  __u32 len = sizeof info;
  if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0 || !std::string_view(info.name).starts_with(prefix)) return;
  auto& s = r[full_name(fd, info)];
  s.runs += info.run_cnt;
  s.run_time_ns += info.run_time_ns;
}

std::map<std::string, ProgramStats> loaded_program_stats(const std::string& prefix) {
  std::map<std::string, ProgramStats> r;
  __u32 id = 0;
  while (bpf_prog_get_next_id(id, &id) == 0) {
    int fd = bpf_prog_get_fd_by_id(id);
    if (fd < 0) continue;
    add_program(fd, prefix, r);
    close(fd);
  }
  return r;
}

std::map<std::string, ProgramStats> own_program_stats() {
  std::map<std::string, ProgramStats> r;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return r;
  while (dirent* e = readdir(d)) {
    char link[PATH_MAX];
    std::string path = std::string("/proc/self/fd/") + e->d_name;
    ssize_t n = readlink(path.c_str(), link, sizeof link - 1);
    if (n <= 0 || std::string_view(link, static_cast<size_t>(n)) != "anon_inode:bpf-prog") continue;
    add_program(atoi(e->d_name), "", r);
  }
  closedir(d);
  return r;
}

}  // namespace gpuscope
