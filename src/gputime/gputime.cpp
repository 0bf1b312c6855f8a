#include <bpf/bpf.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <random>
#include <thread>

#include "core/demangle.h"
#include "core/elf_symbols.h"
#include "core/system.h"
#include "gputime.skel.h"
#include "gputime/gputime_collector.h"

namespace gpuscope {

namespace {

// Not gone and not a zombie (whose records have all been handed over).
bool process_alive(pid_t pid) {
  auto stat = read_file_opt("/proc/" + std::to_string(pid) + "/stat");
  if (pid <= 0 || !stat) return false;
  auto p = stat->rfind(')');
  return p == std::string::npos || p + 2 >= stat->size() || ((*stat)[p + 2] != 'Z' && (*stat)[p + 2] != 'X');
}

}  // namespace

std::string cupti_lib_beside_self() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string self(buf, static_cast<size_t>(n));
  return self.substr(0, self.rfind('/') + 1) + kCuptiLibName;
}

std::unique_ptr<GpuTimeCollector> optional_gpu_time(UprobeSession& session, const std::vector<std::string>& libs,
                                                    bool verbose) {
  try {
    GpuTimeCollector::Config c{libs};
    // 6 full hand-offs of 2048 records, drained as they come; the 8 MiB default is the
    // timeline's (every API record too) and would be 16 MiB resident beside each process traced.
    c.ring_bytes = 1u << 20;
    return std::make_unique<GpuTimeCollector>(session, c);
  } catch (const UsageError& e) {
    if (!libs.empty()) throw;
    if (verbose) fprintf(stderr, "gpuscope: no GPU time: %s\n", e.what());
  }
  return nullptr;
}

const char* gpu_kind_name(unsigned kind) {
  switch (kind) {
    case GS_GT_KERNEL: return "kernel";
    case GS_GT_MEMCPY: return "memcpy";
    case GS_GT_MEMSET: return "memset";
    case GS_GT_SYNC: return "sync";
    case GS_GT_API: return "api";
  }
  return "?";
}

const char* gpu_copy_kind_name(unsigned kind) {
  // CUpti_ActivityMemcpyKind
  static const char* names[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
  return kind < std::size(names) ? names[kind] : "Unknown";
}

GpuTimeCollector::GpuTimeCollector(UprobeSession& session, Config cfg)
    : cfg_(std::move(cfg)), session_(session), skel_(nullptr, gputime_bpf__destroy) {
  skel_.reset(gputime_bpf__open());
  if (!skel_) throw UsageError(std::string("cannot open BPF object: ") + strerror(errno));
  apply_scope(skel_.get(), session_.scope());
  if (cfg_.ring_bytes) bpf_map__set_max_entries(skel_->maps.gs_gt_events, cfg_.ring_bytes);
  int err = gputime_bpf__load(skel_.get());
  if (err)
    throw UsageError(std::string("cannot load BPF programs: ") + strerror(-err) +
                     " (is the kernel built with BTF and uprobes? try 'gpuscope doctor')");
  rb_ = std::make_unique<RingBuffer>(bpf_map__fd(skel_->maps.gs_gt_events),
                                     [this](const void* d, size_t n) { handle(d, n); });
  std::random_device rd;
  do generation_ = rd();
  while (generation_ == 0);
  lib_ = session_.add_library(
      {kCuptiLibName,
       {{skel_->progs.gs_gt_buffer, "gpuscope_cupti_buffer"}, {skel_->progs.gs_gt_name, "gpuscope_cupti_name"}},
       [](std::string_view s) { return s == "gpuscope_cupti_control"; },
       [this](const LibraryMapping& m) { mapped(m); }});
}

GpuTimeCollector::~GpuTimeCollector() { stop(); }

namespace {

bool read_remote(pid_t pid, uint64_t addr, void* dst, size_t n) {
  iovec local{dst, n}, remote{reinterpret_cast<void*>(addr), n};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n);
}

bool write_remote(pid_t pid, uint64_t addr, const void* src, size_t n) {
  iovec local{const_cast<void*>(src), n}, remote{reinterpret_cast<void*>(addr), n};
  return process_vm_writev(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n);
}

}  // namespace

void GpuTimeCollector::tell(pid_t pid, Told& t, bool attach) {
  gs_gt_control c{};
  // The header first: a version-1 library's control word ends there.
  if (!read_remote(pid, t.addr, &c, offsetof(gs_gt_control, recording)) || c.magic != GS_GT_MAGIC) return;
  t.version = c.version;
  if (c.version < 2 || c.clients == 0) {
    // Version 1: one word. Another gpuscope may hold it: leave it; a stop clears only its own generation.
    if (attach ? c.attached != 0 : c.attached != generation_) return;
    uint32_t v = attach ? generation_ : 0;
    write_remote(pid, t.addr + offsetof(gs_gt_control, attached), &v, sizeof v);
    return;
  }
  size_t n = std::min<size_t>(c.clients, GS_GT_CLIENTS);
  if (!read_remote(pid, t.addr, &c, offsetof(gs_gt_control, client) + n * sizeof(gs_gt_client))) return;
  // Taken by another gpuscope's racing claim, or freed by the library after a long silence.
  if (t.slot >= 0 && (static_cast<size_t>(t.slot) >= n || c.client[t.slot].generation != generation_)) t.slot = -1;
  auto slot_addr = [&](int i) { return t.addr + offsetof(gs_gt_control, client) + i * sizeof(gs_gt_client); };
  if (!attach) {
    uint32_t zero = 0;
    if (t.slot >= 0) write_remote(pid, slot_addr(t.slot) + offsetof(gs_gt_client, generation), &zero, sizeof zero);
    t.slot = -1;
    return;
  }
  bool claim = t.slot < 0;
  // A slot still ours (the process was noticed again, e.g. after a dlopen) before a free one.
  for (size_t i = 0; claim && i < n && t.slot < 0; i++)
    if (c.client[i].generation == generation_) t.slot = static_cast<int>(i);
  for (size_t i = 0; claim && i < n && t.slot < 0; i++)
    if (c.client[i].generation == 0) t.slot = static_cast<int>(i);
  if (t.slot < 0) {
    no_slot_++;
    return;
  }
  gs_gt_client k{};
  k.mode = cfg_.mode;
  k.on_ms = cfg_.duty_on_ms;
  k.period_ms = cfg_.duty_period_ms;
  k.beat = ++t.beat;
  k.generation = generation_;  // last in the slot: the library never sees a generation with stale wishes
  if (!write_remote(pid, slot_addr(t.slot), &k, offsetof(gs_gt_client, reserved))) return;
  uint32_t back = 0;
  if (claim && (!read_remote(pid, slot_addr(t.slot) + offsetof(gs_gt_client, generation), &back, sizeof back) ||
                back != generation_))
    t.slot = -1;  // lost the race for it: another slot on the next write
}

void GpuTimeCollector::start() {
  std::string beside = cupti_lib_beside_self();
  std::vector<std::string> known = cfg_.libs;
  if (access(beside.c_str(), R_OK) == 0) known.push_back(beside);
  for (auto& path : known) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) throw UsageError("--cupti-lib " + path + ": " + strerror(errno));
    std::string err;
    if (!session_.attach_library(lib_, path, &err) && path != beside && session_.scope().pids.empty())
      throw UsageError("--cupti-lib " + path + ": not a libgpuscope-cupti.so that can be probed");
  }
}

void GpuTimeCollector::mapped(const LibraryMapping& m) {
  uint64_t control = 0;
  for (auto& [vaddr, name] : m.symbols.objects())
    if (name == "gpuscope_cupti_control") control = vaddr;
  const uint64_t addr = m.start - m.symbols.first_load_vaddr() + control;
  Told& t = told_[m.pid];
  if (t.addr != addr) t = Told{addr};  // new, or a new image (exec)
  tell(m.pid, t, true);
}

void GpuTimeCollector::forget_exited() {
  // Names of processes never told (they handed over before a rescan found them) go too.
  for (auto n = names_.begin(); n != names_.end();) {
    uint32_t pid = n->first.first;
    if (told_.count(static_cast<pid_t>(pid)) || kept_pids_.count(pid) || pid_exists(static_cast<pid_t>(pid))) {
      n = names_.upper_bound({pid, UINT32_MAX});
      continue;
    }
    while (n != names_.end() && n->first.first == pid) n = names_.erase(n);
  }
  for (auto it = told_.begin(); it != told_.end();) {
    if (pid_exists(it->first)) {
      ++it;
      continue;
    }
    uint32_t pid = static_cast<uint32_t>(it->first);
    if (!kept_pids_.count(pid))
      for (auto n = names_.lower_bound({pid, 0}); n != names_.end() && n->first.first == pid;) n = names_.erase(n);
    for (auto b = busy_end_.lower_bound({pid, 0}); b != busy_end_.end() && b->first.first == pid;)
      b = busy_end_.erase(b);
    it = told_.erase(it);
  }
}

void GpuTimeCollector::watch(EventLoop& loop) {
  loop.watch(*rb_);
  // Each wish is written again: its beat keeps the library's lease (and a v1 flag another
  // gpuscope cleared on its way out is set again). What is kept of exited processes goes every
  // 5 s (with -p every 0.5 s, its pids being few).
  loop.every(0.5, [this] {
    if (++ticks_ % 10 == 0 || !session_.scope().pids.empty()) forget_exited();
    for (auto& [pid, t] : told_) tell(pid, t, true);
  });
}

void GpuTimeCollector::drain() { rb_->drain(); }

void GpuTimeCollector::flush_all(double timeout_s) {
  auto field = [](const Told& t, size_t offset) {
    return t.addr + offsetof(gs_gt_control, client) + t.slot * sizeof(gs_gt_client) + offset;
  };
  std::vector<pid_t> asked;
  for (auto& [pid, t] : told_) {
    uint32_t now = 0;
    if (t.version < 3 || t.slot < 0 || !read_remote(pid, field(t, offsetof(gs_gt_client, flush)), &now, sizeof now))
      continue;
    t.flush = now + 1;
    if (write_remote(pid, field(t, offsetof(gs_gt_client, flush)), &t.flush, sizeof t.flush)) asked.push_back(pid);
  }
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!asked.empty() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    drain();
    std::erase_if(asked, [&](pid_t pid) {
      const Told& t = told_[pid];
      uint32_t done = 0;
      return !read_remote(pid, field(t, offsetof(gs_gt_client, flushed)), &done, sizeof done) || done == t.flush;
    });
  }
  drain();
}

void GpuTimeCollector::stop() {
  // The last records: CUPTI would hold a buffer still being filled until it is full.
  if (probing()) flush_all(1.0);
  for (auto& [pid, t] : told_) tell(pid, t, false);
  told_.clear();
  // The libraries' last flushes (they see the flag within their flush period) still arrive.
  const bool probed = probing();
  if (probed) drain();
  session_.remove_library(lib_);
  if (probed) drain();
}

void GpuTimeCollector::handle(const void* data, size_t size) {
  if (size < sizeof(uint32_t)) return;
  uint32_t type;
  memcpy(&type, data, sizeof type);
  if (type == GS_GT_EV_NAME && size >= offsetof(gs_gt_name, name)) {
    auto* e = static_cast<const gs_gt_name*>(data);
    size_t len = std::min<size_t>(e->len, std::min<size_t>(GS_GT_NAME_MAX, size - offsetof(gs_gt_name, name)));
    names_[{e->pid, e->id}] = demangle(std::string(e->name, strnlen(e->name, len)));
    names_n_++;
  } else if (type == GS_GT_EV_RECORDS && size >= sizeof(gs_gt_chunk)) {
    on_records(*static_cast<const gs_gt_chunk*>(data));
  }
}

std::string GpuTimeCollector::kept_comm(uint32_t pid) const {
  auto it = kept_pids_.find(pid);
  return it == kept_pids_.end() ? "" : it->second;
}

std::string GpuTimeCollector::name(uint32_t pid, uint32_t id) const {
  auto it = names_.find({pid, id});
  return it == names_.end() ? "" : it->second;
}

void GpuTimeCollector::on_records(const gs_gt_chunk& c) {
  dropped_[c.pid] = {c.batch.cupti_dropped, c.batch.lib_dropped};
  uint32_t n = std::min<uint32_t>(c.n, GS_GT_CHUNK);
  for (uint32_t i = 0; i < n; i++) {
    GpuRecord g{c.pid, c.recs[i]};
    g.r.start_ns -= static_cast<uint64_t>(c.batch.clock_offset_ns);
    g.r.end_ns -= static_cast<uint64_t>(c.batch.clock_offset_ns);
    records_++;
    if (g.r.kind == GS_GT_KERNEL && g.r.end_ns >= g.r.start_ns) add_kernel(g, c.batch.share_ppm);
    if (cfg_.keep_records) {
      if (kept_.size() < cfg_.max_records) {
        kept_.push_back(g);
        if (!kept_pids_.count(g.pid)) kept_pids_[g.pid] = proc_comm(static_cast<pid_t>(g.pid));
      } else
        lost_kept_++;
    }
    if (sink_) sink_(g);
  }
}

void KernelGpuTime::add(uint64_t d) {
  count++;
  total_ns += d;
  max_ns = std::max(max_ns, d);
  // The least k with d <= 2^k µs: 2^k >= d/1000 exactly when 2^k >= ceil(d/1000).
  uint64_t us_up = (d + 999) / 1000;
  size_t k = us_up <= 1 ? 0 : static_cast<size_t>(64 - __builtin_clzll(us_up - 1));
  le_log2_us[std::min(k, kBuckets - 1)]++;
}

KernelGpuTime& KernelGpuTime::operator+=(const KernelGpuTime& o) {
  count += o.count;
  total_ns += o.total_ns;
  max_ns = std::max(max_ns, o.max_ns);
  for (size_t k = 0; k < kBuckets; k++) le_log2_us[k] += o.le_log2_us[k];
  return *this;
}

void GpuTimeCollector::add_kernel(const GpuRecord& g, uint32_t share_ppm) {
  uint64_t d = g.r.end_ns - g.r.start_ns;
  std::string nm = name(g.pid, g.r.name_id);
  if (nm.empty()) nm = "[kernel " + std::to_string(g.r.name_id) + "]";
  auto key = std::make_pair(g.pid, std::move(nm));
  auto ti = times_.find(key);
  if (ti == times_.end()) {
    if (times_.size() >= cfg_.max_kernel_rows) {
      rows_full_++;
      return;
    }
    ti = times_.emplace(std::move(key), KernelGpuTime{}).first;
    // Read while the process is likely alive: a view may want it after the process has gone.
    if (!comms_.count(g.pid)) comms_[g.pid] = proc_comm(static_cast<pid_t>(g.pid));
  }
  ti->second.add(d);
  // Busy time: the union of the process's kernels on the device, as records arrive (CUPTI
  // delivers them in completion order per context).
  auto dev = std::make_pair(g.pid, g.r.device);
  uint64_t& last = busy_end_[dev];
  uint64_t from = std::max<uint64_t>(g.r.start_ns, last);
  if (g.r.end_ns > from) {
    uint64_t ns = g.r.end_ns - from;
    busy_[dev] += share_ppm && share_ppm < 1000000
                      ? static_cast<uint64_t>(static_cast<unsigned __int128>(ns) * 1000000 / share_ppm)
                      : ns;
  }
  last = std::max<uint64_t>(last, g.r.end_ns);
}

void report_gpu_losses(const GpuTimeCollector::Stats& s) {
  uint64_t lost = s.lost_ringbuf + s.lost_read + s.lost_too_many + s.lost_kept + s.cupti_dropped;
  if (s.rows_full)
    fprintf(stderr, "gpuscope: %llu kernel records not in GPU time: %zu (process, kernel) rows already kept\n",
            (unsigned long long)s.rows_full, s.max_kernel_rows);
  if (s.no_slot)
    fprintf(stderr, "gpuscope: %llu times a process's libgpuscope-cupti.so had all %d client slots taken\n",
            (unsigned long long)s.no_slot, GS_GT_CLIENTS);
  if (!lost && !s.lost_names && !s.lib_dropped) return;
  fprintf(stderr,
          "gpuscope: GPU records lost: %llu (ring buffer full), %llu (unreadable), %llu (over %u in one hand-off), "
          "%llu (over the kept bound), %llu (CUPTI had no buffer); %llu names lost, %llu kernels unnamed (name "
          "table full)\n",
          (unsigned long long)s.lost_ringbuf, (unsigned long long)s.lost_read, (unsigned long long)s.lost_too_many,
          GS_GT_BATCH_MAX, (unsigned long long)s.lost_kept, (unsigned long long)s.cupti_dropped,
          (unsigned long long)s.lost_names, (unsigned long long)s.lib_dropped);
}

GpuTimeCollector::Stats GpuTimeCollector::stats() const {
  Stats s;
  s.records = records_;
  s.names = names_n_;
  int fd = bpf_map__fd(skel_->maps.gs_gt_drops);
  s.lost_ringbuf = percpu_sum(fd, GS_GT_DROP_RINGBUF);
  s.lost_read = percpu_sum(fd, GS_GT_DROP_READ);
  s.lost_too_many = percpu_sum(fd, GS_GT_DROP_TOO_MANY);
  s.lost_names = percpu_sum(fd, GS_GT_DROP_NAME);
  s.lost_kept = lost_kept_;
  s.rows_full = rows_full_;
  s.cupti_dropped = dropped_released_.first;
  s.lib_dropped = dropped_released_.second;
  for (auto& [_, d] : dropped_) {
    s.cupti_dropped += d.first;
    s.lib_dropped += d.second;
  }
  s.files = session_.library_files(lib_);
  s.processes = told_.size();
  s.no_slot = no_slot_;
  s.max_kernel_rows = cfg_.max_kernel_rows;
  return s;
}

std::vector<GpuTimeProcess> GpuTimeCollector::snapshot() {
  drain();
  std::map<uint32_t, GpuTimeProcess> by_pid;
  auto get = [&](uint32_t pid) -> GpuTimeProcess& {
    auto& p = by_pid[pid];
    if (!p.pid) {
      p.pid = pid;
      if (auto c = comms_.find(pid); c != comms_.end()) p.comm = c->second;
      // Records were handed over before the process ended, so they are all drained by now.
      p.exited = !process_alive(static_cast<pid_t>(pid));
    }
    return p;
  };
  for (auto& [key, t] : times_) get(key.first).kernels[key.second] = t;
  for (auto& [key, ns] : busy_) get(key.first).busy_ns[key.second] = ns;
  std::vector<GpuTimeProcess> out;
  out.reserve(by_pid.size());
  for (auto& [pid, p] : by_pid) {
    if (cfg_.release_exited && p.exited) release(pid);
    out.push_back(std::move(p));
  }
  if (cfg_.release_exited) {
    // Processes that handed over no kernel, only copies or drop counts.
    std::vector<uint32_t> ended;
    for (auto& [pid, _] : dropped_)
      if (!by_pid.count(pid) && !process_alive(static_cast<pid_t>(pid))) ended.push_back(pid);
    for (uint32_t pid : ended) release(pid);
  }
  return out;
}

void GpuTimeCollector::release(uint32_t pid) {
  times_.erase(times_.lower_bound({pid, std::string()}), times_.lower_bound({pid + 1, std::string()}));
  busy_.erase(busy_.lower_bound({pid, 0}), busy_.lower_bound({pid + 1, 0}));
  busy_end_.erase(busy_end_.lower_bound({pid, 0}), busy_end_.lower_bound({pid + 1, 0}));
  comms_.erase(pid);
  if (auto d = dropped_.find(pid); d != dropped_.end()) {
    dropped_released_.first += d->second.first;
    dropped_released_.second += d->second.second;
    dropped_.erase(d);
  }
}

}  // namespace gpuscope
