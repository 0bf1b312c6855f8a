#include <bpf/bpf.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <cstdarg>
#include <unordered_map>

#include "bridge/pin_dir.h"
#include "bridge/reader.h"
#include "core/bpf.h"
#include "core/clock.h"
#include "core/output.h"
#include "core/symbolizer.h"
#include "core/fd.h"
#include "core/system.h"
#include "python/pystacks.h"
#include "starvation.skel.h"
#include "core/flamegraph.h"
#include "starvation/starvation.h"
#include "starvation/starvation_collector.h"

namespace gpuscope {

namespace {

struct SkelDeleter {
  void operator()(starvation_bpf* s) const { starvation_bpf__destroy(s); }
};

std::string cstr(const char* s, size_t n) { return std::string(s, strnlen(s, n)); }

}  // namespace

class Starvation {
 public:
  using Options = StarvationCollector::Config;
  explicit Starvation(Options o)
      : o_(std::move(o)), dir_(o_.pin_dir), period_ns_(1000000000ull / o_.sample_hz), reader_(dir_) {}
  void start();
  void tick();
  StarvationReport collect();
  StarvationStats stats() const;
  void stop() { unload(); }
  uint64_t period_ns() const { return period_ns_; }
  void set_sample_hz(unsigned hz);
  BridgeState state() const { return state_; }

 private:
  void check_poll_interval(const gpu_meta& m) const;
  void open(const BridgePins& pins);
  void load(BridgePins pins);
  void unload();
  void attach_samplers();
  void watch_bridge();
  void refresh_tgids();
  bool gateable() const;
  void gate();
  void set_hooked(bool on);
  void say(const BridgeView& v);
  // One thread's time since the last report.
  struct Delta {
    gs_s_thread st;
    uint64_t cpu, hits;
  };
  using Threads = std::unordered_map<uint32_t, gs_s_thread>;                           // by tid
  using Busiest = std::unordered_map<uint32_t, std::pair<gs_s_sample_key, uint64_t>>;  // by tid
  std::vector<Delta> thread_deltas(Threads& all, std::set<uint32_t>& seen);
  Busiest sample_deltas(const Threads& all, StarvationReport& out);
  StarvationRow row_of(const Delta& r, const Busiest& busiest);
  StarvationReport report();
  void stash();  // report() now, handed out by the next collect
  void note(const char* f, ...) __attribute__((format(printf, 2, 3)));
  const std::vector<std::string>& ustack(uint32_t pid, int id, uint64_t py_hash);
  const std::vector<std::string>& kstack(int id);
  std::vector<std::string> folded_frames(const gs_s_sample_key& k, const std::string& comm, const std::string& thread);
  std::vector<std::pair<uint32_t, uint32_t>> prune(const std::set<uint32_t>& seen_tids);

  Options o_;
  std::string dir_;
  uint64_t period_ns_;
  bool stacks_ = false;  // rows carry stacks
  std::unique_ptr<starvation_bpf, SkelDeleter> skel_;
  std::vector<Link> links_;
  std::vector<Link> samplers_;  // the cpu-clock samplers, reattached when the rate changes
  Link switch_;                 // the sched_switch hook, while hooked_
  bool hooked_ = false;
  uint64_t hook_attaches_ = 0;
  uint32_t devices_ = 0;        // bit d: a listed process holds memory on device d
  uint64_t poll_ms_ = 100;      // the bridge's poll interval, as its meta says
  uint64_t bridge_age_ms_ = 0;  // at the last look
  BridgeReader reader_;
  BridgePins pins_;
  BridgeState state_ = BridgeState::None;

  struct Snap {
    uint32_t pid = 0;
    uint64_t cpu_time_ns = 0, hit_count = 0, samples = 0;
  };
  std::unordered_map<uint32_t, Snap> snaps_;  // by tid
  struct KeyHash {
    size_t operator()(const gs_s_sample_key& k) const {
      return std::hash<uint64_t>()((uint64_t{k.tid} << 32) ^ static_cast<uint32_t>(k.ustack_id) ^
                                   (uint64_t(static_cast<uint32_t>(k.kstack_id)) << 16) ^ k.py_hash);
    }
  };
  struct KeyEq {
    bool operator()(const gs_s_sample_key& a, const gs_s_sample_key& b) const { return !memcmp(&a, &b, sizeof a); }
  };
  std::unordered_map<gs_s_sample_key, uint64_t, KeyHash, KeyEq> sample_snaps_;
  std::map<std::tuple<uint32_t, int, uint64_t>, std::vector<std::string>> ustacks_;
  std::unique_ptr<PyStacks> py_;
  std::set<uint32_t> py_seen_;  // tgids looked at for an interpreter
  bool py_recheck_ = false;     // look again (once a second): a process may have exec'd a Python
  std::map<int, std::vector<std::string>> kstacks_;
  Symbolizer sym_;
  ProcessNames names_;
  StarvationReport pending_;  // collected before a reload, handed out by the next collect
  using clock = std::chrono::steady_clock;
  clock::time_point next_watch_, next_tgids_, next_py_recheck_, hooked_at_;
};

void Starvation::note(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  if (size_t n = strlen(buf); n && buf[n - 1] == '\n') buf[n - 1] = 0;
  if (o_.log)
    o_.log(buf);
  else
    fprintf(stderr, "gpuscope: %s\n", buf);
}

void Starvation::check_poll_interval(const gpu_meta& m) const {
  // Inspektor Gadget's bridge leaves the field 0; the contract's default interval is 100 ms.
  uint64_t poll = m.poll_interval_ms ? m.poll_interval_ms : 100;
  if (o_.min_idle_ms < 2 * poll)
    throw UsageError(
        fmt::format("--min-idle-ms {} is below 2x the bridge's poll interval ({} ms): an idle spell "
                    "shorter than two polls is not seen; use --min-idle-ms {} or more",
                    o_.min_idle_ms, poll, 2 * poll));
}

// Opens the programs with the settings and map sizes, on the bridge's pins when there are.
void Starvation::open(const BridgePins& pins) {
  skel_.reset(starvation_bpf__open());
  if (!skel_) throw UsageError(std::string("cannot open BPF object: ") + strerror(errno));
  auto* ro = skel_->rodata;
  ro->min_gpu_mem_bytes = o_.min_gpu_mem_bytes;
  ro->min_idle_ns = o_.min_idle_ms * 1000000ull;
  ro->stale_ns = o_.stale_threshold_ms * 1000000ull;
  ro->switch_ustack = o_.collect_ustack;
  ro->switch_kstack = o_.collect_kstack;
  ro->sample_ustack = o_.collect_ustack || o_.fold;
  ro->sample_kstack = o_.collect_kstack;
  ro->py_walk = ro->sample_ustack && !o_.no_py_frames;
  if (o_.max_threads) {
    bpf_map__set_max_entries(skel_->maps.threads, o_.max_threads);
    bpf_map__set_max_entries(skel_->maps.samples, o_.max_threads);
    bpf_map__set_max_entries(skel_->maps.gs_py_tstates, o_.max_threads);
  }
  if (o_.max_stacks) {
    bpf_map__set_max_entries(skel_->maps.stacks, o_.max_stacks);
    bpf_map__set_max_entries(skel_->maps.gs_py_stacks, o_.max_stacks);
  }
  if (!pins.ok) return;
  bpf_map* maps[BridgePins::kCount] = {skel_->maps.gpu_meta, skel_->maps.gpu_device, skel_->maps.gpu_per_pid,
                                       skel_->maps.gpu_per_pid_per_device};
  for (int i = 0; i < BridgePins::kCount; i++)
    if (int err = bpf_map__reuse_fd(maps[i], pins.fds[i].get()))
      throw std::runtime_error(fmt::format("cannot use {}/{}: {}", dir_, BridgePins::kNames[i], strerror(-err)));
}

void Starvation::load(BridgePins pins) {
  open(pins);
  if (int err = starvation_bpf__load(skel_.get()))
    throw UsageError(std::string("cannot load BPF programs: ") + strerror(-err) +
                     " (needs BTF, tp_btf and task storage; try 'gpuscope doctor')");
  // Idle is counted from now at most: what the GPU did before we looked is unknown.
  uint64_t now = boottime_ns();
  for (auto& t : skel_->bss->last_active_ns) t = now;
  py_.reset();
  py_seen_.clear();
  if (skel_->rodata->py_walk) {
    auto& m = skel_->maps;
    py_ = std::make_unique<PyStacks>(
        PyStacks::Maps{bpf_map__fd(m.gs_py_procs), bpf_map__fd(m.gs_py_tstates), bpf_map__fd(m.gs_py_stacks),
                       bpf_map__fd(m.gs_py_counters), bpf_map__fd(m.gs_py_events)},
        [this](const std::string& line) { note("%s", line.c_str()); });
  }
  refresh_tgids();
  // Attached at load, so that a kernel without it is refused at once; gate() may take it off.
  bpf_link* l = bpf_program__attach(skel_->progs.gs_s_switch);
  if (!l) throw UsageError(std::string("cannot attach tp_btf/sched_switch: ") + strerror(errno));
  switch_ = Link(l);
  hooked_ = true;
  hook_attaches_++;
  hooked_at_ = clock::now();
  skel_->data->slices_on = 1;
  attach_samplers();
  if (py_) {
    if (bpf_link* pl = bpf_program__attach(skel_->progs.gs_py_exec))
      links_.emplace_back(pl);
    else
      note(
          "cannot attach tp_btf/sched_process_exec (%s): a Python process that execs keeps "
          "its old interpreter layout until it exits\n",
          strerror(errno));
  }
  pins_ = std::move(pins);
  snaps_.clear();
  sample_snaps_.clear();
  ustacks_.clear();
  kstacks_.clear();
}

void Starvation::unload() {
  samplers_.clear();
  switch_.reset();
  hooked_ = false;
  links_.clear();
  py_.reset();
  skel_.reset();
}

void Starvation::attach_samplers() {
  int ncpu = libbpf_num_possible_cpus();
  int attached = 0;
  std::string why;
  for (int cpu = 0; cpu < ncpu; cpu++) {
    perf_event_attr a{};
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_CPU_CLOCK;
    a.sample_period = period_ns_;  // cpu-clock counts nanoseconds: each sample weighs period_ns_
    int fd = static_cast<int>(syscall(__NR_perf_event_open, &a, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) {
      if (errno != ENODEV) why = fmt::format("perf_event_open on CPU {}: {}", cpu, strerror(errno));
      continue;
    }
    bpf_link* l = bpf_program__attach_perf_event(skel_->progs.gs_s_sample, fd);
    if (!l) {
      why = fmt::format("attaching the sampler on CPU {}: {}", cpu, strerror(errno));
      close(fd);
      continue;
    }
    samplers_.emplace_back(l);  // the link owns the perf event fd
    attached++;
  }
  if (!attached)
    note(
        "no cpu-clock sampler (%s): a thread that never leaves its CPU is counted only when "
        "it does, and there are no sampled stacks\n",
        why.c_str());
}

void Starvation::stash() {
  StarvationReport last = report();
  for (auto& r : last.rows) pending_.rows.push_back(std::move(r));
  for (auto& [k, w] : last.folded) pending_.folded[k] += w;
  pending_.folded_samples += last.folded_samples;
  pending_.gone.insert(pending_.gone.end(), last.gone.begin(), last.gone.end());
}

// Samples taken so far weigh the old period: they are reported (at the next collect) before the
// samplers are reattached at the new one.
void Starvation::set_sample_hz(unsigned hz) {
  uint64_t period = 1000000000ull / std::clamp(hz, 1u, 1000u);
  if (period == period_ns_) return;
  if (skel_) {
    samplers_.clear();
    stash();
  }
  period_ns_ = period;
  if (skel_) attach_samplers();
}

// The BPF side skips the hash lookup for a tgid whose bit is clear; the bridge's list changes
// once a poll, and this runs as often.
void Starvation::refresh_tgids() {
  std::vector<uint64_t> bits(GS_S_TGID_WORDS);
  int per_pid = bpf_map__fd(skel_->maps.gpu_per_pid), per_dev = bpf_map__fd(skel_->maps.gpu_per_pid_per_device);
  uint32_t devices = 0;
  for (uint32_t key : BridgeReader::pids(per_pid)) {
    bits[(key / 64) % GS_S_TGID_WORDS] |= 1ull << (key % 64);
    // The devices whose idleness can make a listed process starve, as gpu_of() in BPF picks them.
    gpu_pid p{};
    if (bpf_map_lookup_elem(per_pid, &key, &p) == 0 && p.used_gpu_memory_total_bytes >= o_.min_gpu_mem_bytes) {
      if (p.gpu_device_primary != GPU_DEVICE_SEVERAL) {
        if (p.gpu_device_primary < GPU_MAX_DEVICES) devices |= 1u << p.gpu_device_primary;
      } else {
        for (uint32_t dev = 0; dev < GPU_MAX_DEVICES; dev++) {
          uint64_t k = (uint64_t{key} << 32) | dev;
          gpu_pid_device pd{};
          if (bpf_map_lookup_elem(per_dev, &k, &pd) == 0 && pd.used_gpu_memory_bytes >= o_.min_gpu_mem_bytes)
            devices |= 1u << dev;
        }
      }
    }
    // The walk needs the interpreter's layout before the process's samples come.
    if (py_ && (py_seen_.insert(key).second || py_recheck_) && o_.scope.wants(key, proc_comm(static_cast<pid_t>(key))))
      py_->track(static_cast<pid_t>(key));
  }
  volatile __u64* live = skel_->bss->gpu_tgid_bits;
  for (size_t i = 0; i < bits.size(); i++)
    if (live[i] != bits[i]) live[i] = bits[i];
  devices_ = devices;
}

// The sched_switch hook runs at every context switch on the host, yet counts nothing while each
// listed process has a GPU busy: it is attached only while one of their GPUs has been idle
// min_idle / 2, and taken off once all have been busy within min_idle / 4. Where the samplers
// fold the bridge's ticks into the latch (they run throughout) and that lead covers a bridge poll,
// two ticks of this and a sample period, a thread already running when the hook comes is picked
// up by a sample before any of its time can count: the counts are those of a hook kept on.
bool Starvation::gateable() const {
  uint64_t lead_ns = o_.min_idle_ms * 1000000ull / 2;
  return !samplers_.empty() && lead_ns >= poll_ms_ * 1000000ull + 100000000ull + period_ns_;
}

void Starvation::gate() {
  bool on = hooked_;
  if (!gateable()) {
    on = true;
  } else if (state_ == BridgeState::None || (state_ == BridgeState::Stale && bridge_age_ms_ > 2000)) {
    on = false;  // no bridge: the hook would count nothing (a late tick or two changes nothing)
  } else {
    uint64_t now = boottime_ns(), idle = 0, min_idle = o_.min_idle_ms * 1000000ull;
    const volatile __u64* latch = skel_->bss->last_active_ns;
    for (uint32_t d = 0; d < GPU_MAX_DEVICES; d++)
      if (devices_ & (1u << d) && now > latch[d]) idle = std::max<uint64_t>(idle, now - latch[d]);
    if (idle >= min_idle / 2)
      on = true;
    else if (idle < min_idle / 4 && clock::now() - hooked_at_ >= std::chrono::seconds(1))
      on = false;
  }
  if (on != hooked_) set_hooked(on);
}

void Starvation::set_hooked(bool on) {
  if (!on) {
    skel_->data->slices_on = 0;  // the samplers first: they open no slice the hook would not end
    switch_.reset();
  } else {
    // Slices left open when the hook went have stale starts: every CPU's state starts again.
    int ncpu = libbpf_num_possible_cpus();
    std::vector<gs_s_cpu> zero(static_cast<size_t>(std::max(ncpu, 1)));
    uint32_t key = 0;
    if (bpf_map_update_elem(bpf_map__fd(skel_->maps.cpu_state), &key, zero.data(), BPF_ANY))
      throw std::runtime_error(std::string("cannot reset the per-CPU slice state: ") + strerror(errno));
    bpf_link* l = bpf_program__attach(skel_->progs.gs_s_switch);
    if (!l) throw std::runtime_error(std::string("cannot attach tp_btf/sched_switch again: ") + strerror(errno));
    switch_ = Link(l);
    skel_->data->slices_on = 1;
    hook_attaches_++;
  }
  hooked_ = on;
  hooked_at_ = clock::now();
}

void Starvation::say(const BridgeView& v) {
  switch (v.state) {
    case BridgeState::None:
      note(
          "no bridge data under %s (is `gpuscope bridge` running?); nothing to report until "
          "a bridge publishes\n",
          dir_.c_str());
      break;
    case BridgeState::Stale:
      note(
          "bridge data under %s is stale: last update %llu ms ago by pid %u (%s); no verdicts "
          "until a bridge publishes again\n",
          dir_.c_str(), static_cast<unsigned long long>(v.age_ms), v.meta.helper_pid,
          process_running(static_cast<pid_t>(v.meta.helper_pid)) ? "alive, not publishing" : "not running");
      break;
    case BridgeState::Fresh:
      note("bridge pid %u publishing under %s every %u ms; verdicts on\n", v.meta.helper_pid, dir_.c_str(),
           v.meta.poll_interval_ms);
      break;
  }
}

// Pins replaced (a new bridge that could not reuse them) mean new maps: the programs are
// reloaded on them. Pins reused in place need nothing: the programs read the same maps.
void Starvation::watch_bridge() {
  BridgePins now = reader_.open_pins();
  if (now.ok && !now.same(pins_)) {
    BridgeView v = BridgeReader::view(now, o_.stale_threshold_ms);
    if (v.state == BridgeState::Fresh) check_poll_interval(v.meta);
    stash();
    unload();
    note("bridge maps under %s changed; reattached\n", dir_.c_str());
    load(std::move(now));
    state_ = v.state;
    poll_ms_ = v.meta.poll_interval_ms ? v.meta.poll_interval_ms : 100;
    say(v);
    return;
  }
  BridgeView v = BridgeReader::view(pins_, o_.stale_threshold_ms);
  bridge_age_ms_ = v.age_ms;
  if (v.state == state_) return;
  if (v.state == BridgeState::Fresh) check_poll_interval(v.meta);
  if (v.state == BridgeState::Stale && state_ == BridgeState::Fresh)
    note(
        "bridge data under %s went stale (no update for %llu ms); no verdicts until it "
        "resumes\n",
        dir_.c_str(), static_cast<unsigned long long>(v.age_ms));
  else
    say(v);
  state_ = v.state;
  poll_ms_ = v.meta.poll_interval_ms ? v.meta.poll_interval_ms : 100;
}

const std::vector<std::string>& Starvation::ustack(uint32_t pid, int id, uint64_t py_hash) {
  static const std::vector<std::string> none;
  if (id < 0 && !py_hash) return none;
  auto key = std::make_tuple(pid, id, py_hash);
  auto it = ustacks_.find(key);
  if (it != ustacks_.end()) return it->second;
  uint64_t ips[GS_S_STACK_DEPTH] = {};
  std::vector<std::string> frames;
  if (id >= 0 && bpf_map_lookup_elem(bpf_map__fd(skel_->maps.stacks), &id, ips) == 0)
    frames = sym_.user_stack(static_cast<pid_t>(pid), ips, GS_S_STACK_DEPTH);
  if (py_ && py_hash) frames = py_merge(frames, py_->frames(static_cast<pid_t>(pid), py_hash));
  return ustacks_.emplace(key, std::move(frames)).first->second;
}

const std::vector<std::string>& Starvation::kstack(int id) {
  static const std::vector<std::string> none;
  if (id < 0) return none;
  auto it = kstacks_.find(id);
  if (it != kstacks_.end()) return it->second;
  uint64_t ips[GS_S_STACK_DEPTH] = {};
  std::vector<std::string> frames;
  if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.stacks), &id, ips) == 0)
    frames = sym_.kernel_stack(ips, GS_S_STACK_DEPTH);
  // A stack taken at sched_switch starts with the tracing machinery and our own program.
  auto own = std::find_if(frames.begin(), frames.end(), [](const std::string& f) {
    return !f.starts_with("bpf_prog_") && !f.starts_with("bpf_trace_run") && !f.starts_with("__traceiter_") &&
           !f.starts_with("__bpf_trace_");
  });
  frames.erase(frames.begin(), own);
  return kstacks_.emplace(id, std::move(frames)).first->second;
}

// Process, thread, user frames from main outwards in, then the kernel's, as perf script folds.
std::vector<std::string> Starvation::folded_frames(const gs_s_sample_key& k, const std::string& comm,
                                                   const std::string& thread) {
  std::vector<std::string> f{comm, thread};
  auto& u = ustack(k.pid, k.ustack_id, k.py_hash);
  // As bcc's profile does: a sample whose user stack could not be taken still says so.
  if (u.empty() && skel_->rodata->sample_ustack) f.push_back("[missed user stack]");
  f.insert(f.end(), u.rbegin(), u.rend());
  auto& ks = kstack(k.kstack_id);
  for (auto it = ks.rbegin(); it != ks.rend(); ++it) f.push_back(*it + "_[k]");
  return f;
}

// Threads with on-CPU time since the last report: every thread read (by tid, for the samples),
// the tids with time, and the rows of those in scope.
std::vector<Starvation::Delta> Starvation::thread_deltas(Threads& all, std::set<uint32_t>& seen) {
  std::vector<Delta> rows;
  int tfd = bpf_map__fd(skel_->maps.threads);
  uint32_t key = 0, next = 0;
  for (void* prev = nullptr; bpf_map_get_next_key(tfd, prev, &next) == 0; prev = &key) {
    key = next;
    gs_s_thread st{};
    if (bpf_map_lookup_elem(tfd, &key, &st) != 0) continue;
    all[key] = st;
    Snap& s = snaps_[key];
    if (s.pid != st.pid || st.cpu_time_ns < s.cpu_time_ns) s = Snap{st.pid};  // a reused tid starts again
    uint64_t cpu = st.cpu_time_ns - s.cpu_time_ns, hits = st.hit_count - s.hit_count;
    s.cpu_time_ns = st.cpu_time_ns, s.hit_count = st.hit_count, s.samples = st.samples;
    if (!cpu) continue;
    seen.insert(key);
    if (o_.scope.wants(st.pid, cstr(st.comm, sizeof st.comm))) rows.push_back({st, cpu, hits});
  }
  return rows;
}

// Samples since the last round: the flame graph's weights (into out), and each thread's busiest
// stack.
Starvation::Busiest Starvation::sample_deltas(const Threads& all, StarvationReport& out) {
  Busiest busiest;
  if (!skel_->rodata->sample_ustack && !skel_->rodata->sample_kstack) return busiest;
  int sfd = bpf_map__fd(skel_->maps.samples);
  gs_s_sample_key sk{}, snext{};
  for (void* prev = nullptr; bpf_map_get_next_key(sfd, prev, &snext) == 0; prev = &sk) {
    sk = snext;
    uint64_t n = 0;
    if (bpf_map_lookup_elem(sfd, &sk, &n) != 0) continue;
    uint64_t& was = sample_snaps_[sk];
    uint64_t d = n >= was ? n - was : n;
    was = n;
    if (!d) continue;
    auto it = all.find(sk.tid);
    if (it == all.end() || it->second.pid != sk.pid) continue;
    const gs_s_thread& st = it->second;
    std::string comm = cstr(st.comm, sizeof st.comm);
    if (!o_.scope.wants(sk.pid, comm)) continue;
    auto& b = busiest[sk.tid];
    if (d > b.second) b = {sk, d};
    if (o_.fold) {
      out.folded[fold(folded_frames(sk, comm, cstr(st.thread, sizeof st.thread)))] += d * period_ns_;
      out.folded_samples += d;
    }
  }
  return busiest;
}

StarvationRow Starvation::row_of(const Delta& r, const Busiest& busiest) {
  uint32_t pid = r.st.pid, tid = r.st.tid;
  StarvationRow row{
      pid, tid, cstr(r.st.comm, sizeof r.st.comm), cstr(r.st.thread, sizeof r.st.thread), r.cpu, r.hits, r.st.idle_ns};
  if (!stacks_) return row;
  int uid = r.st.switch_ustack_id, kid = r.st.switch_kstack_id;
  uint64_t py_hash = 0;
  if (auto b = busiest.find(tid); b != busiest.end())
    uid = b->second.first.ustack_id, kid = b->second.first.kstack_id, py_hash = b->second.first.py_hash;
  if (o_.collect_ustack) row.ustack = ustack(pid, uid, py_hash);
  if (o_.collect_kstack) row.kstack = kstack(kid);
  return row;
}

StarvationReport Starvation::report() {
  StarvationReport out;
  if (!skel_) return out;
  Threads all;
  std::set<uint32_t> seen;
  std::vector<Delta> rows = thread_deltas(all, seen);
  Busiest busiest = sample_deltas(all, out);
  std::sort(rows.begin(), rows.end(), [](const Delta& a, const Delta& b) { return a.cpu > b.cpu; });
  for (auto& r : rows) out.rows.push_back(row_of(r, busiest));
  out.gone = prune(seen);
  return out;
}

// Threads that have exited leave the maps once their last row is out.
std::vector<std::pair<uint32_t, uint32_t>> Starvation::prune(const std::set<uint32_t>& seen) {
  int tfd = bpf_map__fd(skel_->maps.threads);
  std::vector<uint32_t> gone;
  std::set<uint32_t> gone_pids;
  for (auto& [tid, s] : snaps_) {
    if (seen.count(tid)) continue;
    if (access(fmt::format("/proc/{}/task/{}", s.pid, tid).c_str(), F_OK) == 0) continue;
    gone.push_back(tid);
    if (!pid_exists(static_cast<pid_t>(s.pid))) gone_pids.insert(s.pid);
  }
  std::vector<std::pair<uint32_t, uint32_t>> out;
  if (gone.empty()) return out;
  std::set<uint32_t> gone_set(gone.begin(), gone.end());
  for (uint32_t tid : gone) {
    out.push_back({snaps_[tid].pid, tid});
    bpf_map_delete_elem(tfd, &tid);
    snaps_.erase(tid);
  }
  int sfd = bpf_map__fd(skel_->maps.samples);
  for (auto it = sample_snaps_.begin(); it != sample_snaps_.end();) {
    if (gone_set.count(it->first.tid)) {
      bpf_map_delete_elem(sfd, &it->first);
      it = sample_snaps_.erase(it);
    } else {
      ++it;
    }
  }
  for (uint32_t pid : gone_pids) {
    sym_.forget(static_cast<pid_t>(pid));
    std::erase_if(ustacks_, [&](auto& kv) { return std::get<0>(kv.first) == pid; });
    if (py_) py_->forget(static_cast<pid_t>(pid));
    py_seen_.erase(pid);
  }
  return out;
}

void StarvationCollector::validate(const Config& o) {
  if (o.min_idle_ms == 0) throw UsageError("--min-idle-ms must be at least 1");
  if (o.stale_threshold_ms == 0) throw UsageError("--stale-threshold-ms must be at least 1");
  if (o.sample_hz == 0 || o.sample_hz > 1000) throw UsageError("--sample-hz must be between 1 and 1000");
}

void Starvation::start() {
  check_pin_dir(dir_, false);
  stacks_ = o_.collect_ustack || o_.collect_kstack;
  BridgePins pins = reader_.open_pins();
  BridgeView v = BridgeReader::view(pins, o_.stale_threshold_ms);
  if (v.state == BridgeState::Fresh) check_poll_interval(v.meta);
  load(std::move(pins));
  state_ = v.state;
  poll_ms_ = v.meta.poll_interval_ms ? v.meta.poll_interval_ms : 100;
  say(v);
  auto now = clock::now();
  next_watch_ = now + std::chrono::milliseconds(250);
  next_tgids_ = now;
  next_py_recheck_ = now + std::chrono::seconds(1);
}

void Starvation::tick() {
  auto now = clock::now();
  if (py_) py_->poll();
  if (now >= next_tgids_) {
    py_recheck_ = now >= next_py_recheck_;
    if (py_recheck_) {
      next_py_recheck_ = now + std::chrono::seconds(1);
      // Processes that exited without a row (never starved) leave the walk's maps too.
      for (auto it = py_seen_.begin(); it != py_seen_.end();)
        if (!pid_exists(static_cast<pid_t>(*it))) {
          if (py_) py_->forget(static_cast<pid_t>(*it));
          it = py_seen_.erase(it);
        } else {
          ++it;
        }
    }
    refresh_tgids();
    py_recheck_ = false;
    next_tgids_ = now + std::chrono::milliseconds(50);
  }
  if (now >= next_watch_) {
    watch_bridge();
    next_watch_ = now + std::chrono::milliseconds(250);
  }
  if (skel_) gate();
}

StarvationReport Starvation::collect() {
  StarvationReport r = report();
  if (pending_.rows.empty() && pending_.folded.empty() && pending_.gone.empty()) return r;
  StarvationReport out = std::move(pending_);
  pending_ = {};
  for (auto& row : r.rows) out.rows.push_back(std::move(row));
  for (auto& [k, w] : r.folded) out.folded[k] += w;
  out.folded_samples += r.folded_samples;
  out.gone.insert(out.gone.end(), r.gone.begin(), r.gone.end());
  return out;
}

StarvationStats Starvation::stats() const {
  StarvationStats st;
  if (!skel_) return st;
  int fd = bpf_map__fd(skel_->maps.counters);
  st.lost_threads = percpu_sum(fd, GS_S_CNT_NO_THREAD);
  st.lost_samples = percpu_sum(fd, GS_S_CNT_NO_SAMPLE_KEY);
  st.lost_stacks = percpu_sum(fd, GS_S_CNT_STACK_ERR);
  st.samples = percpu_sum(fd, GS_S_CNT_SAMPLES);
  st.latch_ticks = percpu_sum(fd, GS_S_CNT_LATCH_TICKS);
  st.switch_hooked = hooked_;
  st.switch_attaches = hook_attaches_;
  if (py_) {
    st.py = true;
    st.py_drops = py_->drops_text();
    auto c = py_->counters();
    st.py_walks = c.walks;
    st.py_no_tstate = c.no_tstate;
  }
  return st;
}

StarvationCollector::StarvationCollector(Config c) {
  validate(c);
  impl_ = std::make_unique<Starvation>(std::move(c));
  impl_->start();
}

StarvationCollector::~StarvationCollector() = default;
void StarvationCollector::tick() { impl_->tick(); }
StarvationReport StarvationCollector::collect() { return impl_->collect(); }
StarvationStats StarvationCollector::stats() const { return impl_->stats(); }
uint64_t StarvationCollector::period_ns() const { return impl_->period_ns(); }
void StarvationCollector::set_sample_hz(unsigned hz) { impl_->set_sample_hz(hz); }
void StarvationCollector::stop() { impl_->stop(); }

std::string StarvationCollector::bridge_state() const {
  switch (impl_->state()) {
    case BridgeState::Fresh: return "fresh";
    case BridgeState::Stale: return "stale";
    default: return "none";
  }
}

}  // namespace gpuscope
