#include "bridge/bridge.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <stop_token>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <unordered_map>
#include <unordered_set>

#include <bpf/bpf.h>

#include "bridge/bridge_maps.h"
#include "bridge/nvml.h"
#include "bridge/pin_dir.h"
#include "bridge/reader.h"
#include "bridge_pins.skel.h"
#include "core/bpf.h"
#include "core/clock.h"
#include "core/output.h"
#include "core/fd.h"
#include "core/system.h"
#include "core/where.h"

namespace gpuscope {

namespace {

using enum BridgePins::Map;

using PinsSkel = std::unique_ptr<bridge_pins_bpf, void (*)(bridge_pins_bpf*)>;

std::array<bpf_map*, BridgePins::kCount> skel_maps(bridge_pins_bpf* s) {
  return {s->maps.gpu_meta, s->maps.gpu_device, s->maps.gpu_per_pid, s->maps.gpu_per_pid_per_device};
}

// The contract's test for reuse in place: type, key size, value size and entries.
bool compatible(int fd, const bpf_map* want) {
  bpf_map_info info{};
  uint32_t len = sizeof info;
  if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) return false;
  return info.type == static_cast<uint32_t>(bpf_map__type(want)) && info.key_size == bpf_map__key_size(want) &&
         info.value_size == bpf_map__value_size(want) && info.max_entries == bpf_map__max_entries(want);
}

uint64_t sample_value(const nvml::Value& v, int type) {
  switch (type) {
    case nvml::kDouble: return v.dVal > 0 ? static_cast<uint64_t>(v.dVal) : 0;
    case nvml::kUInt: return v.uiVal;
    case nvml::kULong: return v.ulVal;
    case nvml::kULongLong: return v.ullVal;
    case nvml::kSLongLong: return v.sllVal > 0 ? static_cast<uint64_t>(v.sllVal) : 0;
    case nvml::kSInt: return v.siVal > 0 ? static_cast<uint64_t>(v.siVal) : 0;
  }
  return 0;
}

// One syscall for many entries; kernels without batch operations get one per entry.
template <typename K, typename V>
void update_all(int fd, const std::vector<K>& keys, const std::vector<V>& vals) {
  if (keys.empty()) return;
  uint32_t n = static_cast<uint32_t>(keys.size());
  if (bpf_map_update_batch(fd, keys.data(), vals.data(), &n, nullptr) == 0) return;
  for (size_t i = 0; i < keys.size(); i++) bpf_map_update_elem(fd, &keys[i], &vals[i], BPF_ANY);
}

template <typename K>
void delete_all(int fd, const std::vector<K>& keys) {
  if (keys.empty()) return;
  uint32_t n = static_cast<uint32_t>(keys.size());
  if (bpf_map_delete_batch(fd, keys.data(), &n, nullptr) == 0) return;
  for (auto& k : keys) bpf_map_delete_elem(fd, &k);
}

constexpr auto kPcieRefresh = std::chrono::seconds(5);
// How long one NVML event wait lasts: a stop waits for it to end.
constexpr unsigned kEventWaitMs = 250;

// Runs `fn` on a new thread that SIGINT and SIGTERM never reach: they are the owner's (the
// standalone bridge's loop wakes on them; an agent or starvation handles its own).
template <typename Fn>
std::jthread thread_without_signals(Fn&& fn) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  std::jthread t(std::forward<Fn>(fn));
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return t;
}

struct DeviceState {
  uint64_t last_seen_us = 0;       // newest utilization sample consumed
  uint64_t proc_last_seen_us = 0;  // newest per-process utilization sample consumed
  uint64_t start_us = 0;
  uint64_t sample_gap_us = 0;  // smallest spacing seen between samples
  uint64_t read_us = 0;        // last read of the buffer that found new samples
  uint32_t unsupported = 0;    // calls that answered NVML_ERROR_NOT_SUPPORTED, by bit
  std::chrono::steady_clock::time_point pcie_at{};
  uint64_t pcie_tx_kbps = 0, pcie_rx_kbps = 0;
  gpu_device_metrics detail{};  // the last details read, published again on utilization-only ticks
};

}  // namespace

class Bridge {
 public:
  explicit Bridge(BridgeOptions o) : o_(std::move(o)), dir_(o_.pin_dir) {}
  int run();
  void start();
  bool tick();
  size_t devices() const { return nvml_ ? nvml_->devices().size() : 0; }
  std::vector<NvmlDeviceId> device_ids() const { return events_ ? events_->devices() : std::vector<NvmlDeviceId>{}; }
  void on_event(NvmlEventHandler fn) {
    std::lock_guard g(subscribers_mu_);
    subscribers_.push_back(std::move(fn));
  }

 private:
  void start_events();
  void deliver(const NvmlEventRecord& e);
  void print_event(const NvmlEventRecord& e);
  void refuse_if_held();
  void open_maps();
  void clear_hash(int fd);
  bool still_holder();
  template <typename Fn, typename... Args>
  bool call(unsigned i, int field, Fn fn, Args... args);
  void read_device(unsigned i, gpu_device_metrics& m);
  void read_details(unsigned i, gpu_device_metrics& m);
  // The newest busy utilization sample since the last read, where the reading says idle.
  bool read_samples(unsigned i, gpu_device_metrics& m);
  void publish_devices();
  void read_process_utilization(unsigned i);
  void read_processes(uint64_t now_rt);
  void publish_processes();
  void write_process_json(uint32_t pid, const gpu_pid_device& v, const gpu_pid& agg);
  void publish_meta();
  std::string path(int map) const { return dir_ + "/" + BridgePins::kNames[map]; }

  BridgeOptions o_;
  std::string dir_;
  std::unique_ptr<nvml::Library> nvml_;
  PinsSkel skel_{nullptr, bridge_pins_bpf__destroy};
  Fd maps_[BridgePins::kCount];
  bool reused_[BridgePins::kCount] = {};
  std::vector<DeviceState> state_;
  bool pcie_read_this_tick_ = false;
  std::vector<nvml::Sample> samples_;
  std::vector<nvml::Proc> procs_;
  std::vector<nvml::ProcessUtilizationSample> putil_;
  // This tick's per-process utilization, the maximum of its samples, by (pid << 32) | device.
  std::unordered_map<uint64_t, nvml::ProcessUtilizationSample> putil_max_;
  std::unordered_map<uint32_t, gpu_pid> pids_;
  std::unordered_set<uint64_t> published_pid_devices_, next_pid_devices_;
  std::unordered_set<uint32_t> published_pids_;
  // Batches of this tick's writes.
  std::vector<uint32_t> dev_keys_, pid_keys_, gone_pids_;
  std::vector<gpu_device_metrics> dev_vals_;
  std::vector<uint64_t> pd_keys_, gone_pid_devices_;
  std::vector<gpu_pid_device> pd_vals_;
  std::vector<gpu_pid> pid_vals_;
  uint64_t ticks_ = 0;
  uint64_t tick_ns_ = 0;  // CLOCK_REALTIME when this tick began: its JSON lines' ts_ns
  std::unique_ptr<WhereView> where_ = o_.json ? std::make_unique<WhereView>(Scope{}) : nullptr;
  bool detail_tick_ = true;  // this tick reads details and processes
  std::chrono::steady_clock::time_point detail_at_{};
  Writer out_;
  std::mutex out_mu_;          // stdout, written by the ticks and by the event thread
  bool print_events_ = false;  // the standalone bridge; inside another process, only subscribers
  bool event_header_done_ = false;
  Writer event_out_;
  std::mutex subscribers_mu_;
  std::vector<NvmlEventHandler> subscribers_;
  std::unique_ptr<nvml::Events> events_;
  std::jthread events_thread_;  // last: stopped and joined before what it uses goes
};

void Bridge::refuse_if_held() {
  BridgeHolder h = bridge_holder(dir_);
  if (h.publishing && h.pid != static_cast<uint32_t>(getpid()))
    throw UsageError(
        fmt::format("bridge pid {} is publishing under {} (updated {} ms ago); stop it first", h.pid, dir_, h.age_ms));
}

void Bridge::clear_hash(int fd) {
  uint64_t key = 0, next = 0;
  std::vector<uint64_t> keys;
  void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    keys.push_back(next);
    key = next;
    prev = &key;
  }
  for (auto& k : keys) bpf_map_delete_elem(fd, &k);
}

void Bridge::open_maps() {
  auto maps = skel_maps(skel_.get());
  for (int i = 0; i < BridgePins::kCount; i++) {
    Fd fd(bpf_obj_get(path(i).c_str()));
    if (fd && compatible(fd.get(), maps[i])) {
      if (int err = bpf_map__reuse_fd(maps[i], fd.get()))
        throw std::runtime_error(fmt::format("cannot reuse {}: {}", path(i), strerror(-err)));
      reused_[i] = true;
    }
  }
  if (int err = bridge_pins_bpf__load(skel_.get()))
    throw std::runtime_error(fmt::format("cannot create the bridge's maps: {}", strerror(-err)));
  int pinned = 0;
  for (int i = 0; i < BridgePins::kCount; i++) {
    maps_[i] = Fd(fcntl(bpf_map__fd(maps[i]), F_DUPFD_CLOEXEC, 0));
    if (reused_[i]) continue;
    unlink(path(i).c_str());  // incompatible, or not there at all
    if (bpf_obj_pin(maps_[i].get(), path(i).c_str()) != 0) {
      int err = errno;
      for (int j = 0; j < i; j++)
        if (pinned & (1 << j)) unlink(path(j).c_str());
      throw UsageError(fmt::format("cannot pin {}: {}", path(i), strerror(err)));
    }
    pinned |= 1 << i;
  }
  skel_.reset();
  // Taken over from a dead holder: its processes are not ours to vouch for.
  if (reused_[kPerPid]) clear_hash(maps_[kPerPid].get());
  if (reused_[kPerPidDevice]) clear_hash(maps_[kPerPidDevice].get());
  gpu_device_metrics zero{};
  for (uint32_t i = static_cast<uint32_t>(nvml_->devices().size()); i < GPU_MAX_DEVICES; i++)
    bpf_map_update_elem(maps_[kDevice].get(), &i, &zero, BPF_ANY);
}

// A call the device does not support is not made again: on the H200 an unsupported
// nvmlDeviceGetFanSpeed costs 160 us of CPU every time.
template <typename Fn, typename... Args>
bool Bridge::call(unsigned i, int field, Fn fn, Args... args) {
  DeviceState& st = state_[i];
  uint32_t bit = 1u << field;
  if (!fn || (st.unsupported & bit)) return false;
  nvml::Return r = fn(nvml_->devices()[i], args...);
  if (r == nvml::kNotSupported) st.unsupported |= bit;
  return r == nvml::kSuccess;
}

void Bridge::read_device(unsigned i, gpu_device_metrics& m) {
  DeviceState& st = state_[i];
  // Details first, so that the utilization's timestamp is the newest reading.
  if (detail_tick_) read_details(i, st.detail);
  m = st.detail;
  m.timestamp_ns = realtime_ns();
  if (nvml::Utilization ut{}; call(i, 0, nvml_->api().utilization, &ut))
    m.sm_util_pct = ut.gpu, m.mem_util_pct = ut.memory;
}

// Every NVML query is an ioctl into the driver, and many are calls into the GPU's firmware that
// hold its locks: an agent beside a training job reads these once a second, not at the 10 Hz
// its utilization needs.
void Bridge::read_details(unsigned i, gpu_device_metrics& m) {
  const nvml::Api& a = nvml_->api();
  DeviceState& st = state_[i];
  auto call = [&](int field, auto fn, auto... args) { return this->call(i, field, fn, args...); };
  unsigned u = 0, u2 = 0;
  unsigned long long ull = 0;
  m = {};
  nvml::MemoryV2 mv{nvml::kMemoryV2Version};
  nvml::Memory mm{};
  if (call(1, a.memory_v2, &mv))
    m.mem_total_bytes = mv.total, m.mem_used_bytes = mv.used, m.mem_reserved_bytes = mv.reserved;
  else if (call(2, a.memory, &mm))
    m.mem_total_bytes = mm.total, m.mem_used_bytes = mm.used;
  if (call(3, a.temperature, 0 /* NVML_TEMPERATURE_GPU */, &u)) m.temp_c = u;
  if (call(4, a.power, &u)) m.power_mw = u;
  if (call(5, a.clock, 1 /* NVML_CLOCK_SM */, &u)) m.sm_clock_mhz = u;
  if (call(6, a.clock, 2 /* NVML_CLOCK_MEM */, &u)) m.mem_clock_mhz = u;
  if (call(7, a.event_reasons, &ull)) m.throttle_reasons = ull;
  if (call(8, a.encoder, &u, &u2)) m.enc_util_pct = u;
  if (call(9, a.decoder, &u, &u2)) m.dec_util_pct = u;
  // NVML_MEMORY_ERROR_TYPE_CORRECTED/UNCORRECTED, NVML_AGGREGATE_ECC (lifetime totals).
  if (call(10, a.ecc, 0, 1, &ull)) m.ecc_corrected_total = ull;
  if (call(11, a.ecc, 1, 1, &ull)) m.ecc_uncorrected_total = ull;
  if (call(12, a.fan, &u)) m.fan_speed_pct = u;
  if (int mode = 0; call(13, a.compute_mode, &mode)) m.compute_mode = static_cast<uint32_t>(mode);
  // nvmlDeviceGetPcieThroughput measures over 20 ms inside the call (measured on the H200: 20 ms
  // of wall time, 0.8 ms of CPU each), so it is read every kPcieRefresh, one device per tick.
  auto now = std::chrono::steady_clock::now();
  if (!pcie_read_this_tick_ && now - st.pcie_at >= kPcieRefresh) {
    pcie_read_this_tick_ = true;
    st.pcie_at = now;
    if (call(14, a.pcie, 0 /* NVML_PCIE_UTIL_TX_BYTES */, &u)) st.pcie_tx_kbps = u;
    if (call(15, a.pcie, 1 /* NVML_PCIE_UTIL_RX_BYTES */, &u)) st.pcie_rx_kbps = u;
  }
  m.pcie_tx_kbps = st.pcie_tx_kbps;
  m.pcie_rx_kbps = st.pcie_rx_kbps;
}

bool Bridge::read_samples(unsigned i, gpu_device_metrics& m) {
  if (o_.no_samples) return false;
  DeviceState& st = state_[i];
  // Reading the buffer costs 2.7 ms of CPU on the H200, which adds a sample every 200 ms: after
  // a read that found new samples, skip reads until the next one is due.
  uint64_t now_us = m.timestamp_ns / 1000;
  if (st.sample_gap_us && now_us >= st.read_us && now_us < st.read_us + st.sample_gap_us * 9 / 10) return false;
  int type = nvml::kUInt;
  nvml_->utilization_samples(nvml_->devices()[i], st.last_seen_us, samples_, &type);
  if (!samples_.empty()) st.read_us = now_us;
  const nvml::Sample* newest_busy = nullptr;
  for (auto& s : samples_) {
    if (s.timeStamp > st.last_seen_us && st.last_seen_us > st.start_us) {
      uint64_t gap = s.timeStamp - st.last_seen_us;
      st.sample_gap_us = st.sample_gap_us ? std::min(st.sample_gap_us, gap) : gap;
    }
    st.last_seen_us = std::max<uint64_t>(st.last_seen_us, s.timeStamp);
    if (sample_value(s.sampleValue, type) && (!newest_busy || s.timeStamp > newest_busy->timeStamp)) newest_busy = &s;
  }
  // The newest-non-zero rule: a burst that ended between two polls still moves a consumer's
  // last-active latch, to the burst's own time.
  if (m.sm_util_pct != 0 || !newest_busy) return false;
  m.sm_util_pct = static_cast<uint32_t>(std::min<uint64_t>(sample_value(newest_busy->sampleValue, type), 100));
  m.timestamp_ns = newest_busy->timeStamp * 1000;
  return true;
}

constexpr int kProcessUtilizationBit = 16;  // in DeviceState::unsupported, after read_device's

// Samples of one device since the last tick; each (pid, device) publishes the maximum of each
// of its fields over them, so a busy moment between two ticks is not lost.
void Bridge::read_process_utilization(unsigned i) {
  DeviceState& st = state_[i];
  if (st.unsupported & (1u << kProcessUtilizationBit)) return;
  nvml::Return r = nvml_->process_utilization(nvml_->devices()[i], st.proc_last_seen_us, putil_);
  if (r == nvml::kNotSupported) {
    st.unsupported |= 1u << kProcessUtilizationBit;
    if (o_.verbose)
      fprintf(stderr,
              "gpuscope: device %u: nvmlDeviceGetProcessUtilization is not supported; its per-process "
              "utilization stays 0\n",
              i);
    return;
  }
  for (auto& u : putil_) {
    if (u.timeStamp <= st.proc_last_seen_us) continue;  // a driver that ignores last_seen
    if (u.pid == 0) continue;                           // activity NVML could not attribute to a process
    auto& m = putil_max_[(static_cast<uint64_t>(u.pid) << 32) | i];
    m.pid = u.pid;
    m.timeStamp = std::max(m.timeStamp, u.timeStamp);
    m.smUtil = std::max(m.smUtil, std::min(u.smUtil, 100u));
    m.memUtil = std::max(m.memUtil, std::min(u.memUtil, 100u));
    m.encUtil = std::max(m.encUtil, std::min(u.encUtil, 100u));
    m.decUtil = std::max(m.decUtil, std::min(u.decUtil, 100u));
  }
  for (auto& u : putil_) st.proc_last_seen_us = std::max<uint64_t>(st.proc_last_seen_us, u.timeStamp);
}

// False when another bridge has taken the pins over since the last tick.
bool Bridge::still_holder() {
  if (ticks_ == 0) return true;
  gpu_meta cur{};
  uint32_t zero = 0;
  if (bpf_map_lookup_elem(maps_[kMeta].get(), &zero, &cur) != 0 || cur.helper_pid == static_cast<uint32_t>(getpid()))
    return true;
  fprintf(stderr, "gpuscope: bridge pid %u took over %s; stopping\n", cur.helper_pid, dir_.c_str());
  return false;
}

void Bridge::publish_devices() {
  unsigned n = static_cast<unsigned>(nvml_->devices().size());
  dev_keys_.clear();
  dev_vals_.clear();
  pcie_read_this_tick_ = false;
  for (unsigned i = 0; i < n; i++) {
    gpu_device_metrics m{};
    read_device(i, m);
    bool from_sample = read_samples(i, m);
    dev_keys_.push_back(i);
    dev_vals_.push_back(m);
    if (!o_.json) continue;
    JsonLine j(out_.buf());
    j.record("device", tick_ns_).num("tick", ticks_).num("device", i).num("timestamp_ns", m.timestamp_ns);
    j.boolean("from_sample", from_sample).num("sm_util_pct", m.sm_util_pct).num("mem_util_pct", m.mem_util_pct);
    j.num("mem_total_bytes", m.mem_total_bytes).num("mem_used_bytes", m.mem_used_bytes);
    j.num("mem_reserved_bytes", m.mem_reserved_bytes).num("temp_c", m.temp_c).num("power_mw", m.power_mw);
    j.num("sm_clock_mhz", m.sm_clock_mhz).num("mem_clock_mhz", m.mem_clock_mhz);
    j.num("throttle_reasons", m.throttle_reasons).num("pcie_tx_kbps", m.pcie_tx_kbps);
    j.num("pcie_rx_kbps", m.pcie_rx_kbps).num("enc_util_pct", m.enc_util_pct).num("dec_util_pct", m.dec_util_pct);
    j.num("nvlink_tx_kbps", m.nvlink_tx_kbps).num("nvlink_rx_kbps", m.nvlink_rx_kbps);
    j.num("ecc_corrected_total", m.ecc_corrected_total).num("ecc_uncorrected_total", m.ecc_uncorrected_total);
    j.num("fan_speed_pct", m.fan_speed_pct).num("compute_mode", m.compute_mode).end();
  }
  update_all(maps_[kDevice].get(), dev_keys_, dev_vals_);
}

// This tick's (pid, device) entries and each pid's aggregate over its devices.
void Bridge::read_processes(uint64_t now_rt) {
  pids_.clear();
  next_pid_devices_.clear();
  pd_keys_.clear();
  pd_vals_.clear();
  putil_max_.clear();
  for (unsigned i = 0; i < nvml_->devices().size(); i++) {
    nvml_->processes(nvml_->devices()[i], procs_);
    read_process_utilization(i);  // also on a device without processes, so its samples never pile up
    for (auto& p : procs_) {
      gpu_pid_device v{};
      v.timestamp_ns = now_rt;
      v.used_gpu_memory_bytes = p.used_bytes;
      v.gpu_device = static_cast<uint8_t>(i);
      v.kinds = p.kinds;
      uint64_t key = (static_cast<uint64_t>(p.pid) << 32) | i;
      if (auto u = putil_max_.find(key); u != putil_max_.end())
        v.sm_util_pct = u->second.smUtil, v.mem_util_pct = u->second.memUtil, v.enc_util_pct = u->second.encUtil,
        v.dec_util_pct = u->second.decUtil;
      pd_keys_.push_back(key);
      pd_vals_.push_back(v);
      next_pid_devices_.insert(key);
      auto& agg = pids_[p.pid];
      agg.timestamp_ns = now_rt;
      agg.used_gpu_memory_total_bytes += p.used_bytes;
      agg.sm_util_pct_max = std::max(agg.sm_util_pct_max, v.sm_util_pct);
      agg.mem_util_pct_max = std::max(agg.mem_util_pct_max, v.mem_util_pct);
      agg.gpu_device_primary = agg.device_count ? GPU_DEVICE_SEVERAL : static_cast<uint8_t>(i);
      agg.device_count++;
    }
  }
}

// Writes this tick's processes and deletes the entries of those that left.
void Bridge::publish_processes() {
  update_all(maps_[kPerPidDevice].get(), pd_keys_, pd_vals_);
  gone_pid_devices_.clear();
  for (auto key : published_pid_devices_)
    if (!next_pid_devices_.count(key)) gone_pid_devices_.push_back(key);
  delete_all(maps_[kPerPidDevice].get(), gone_pid_devices_);
  std::swap(published_pid_devices_, next_pid_devices_);

  gone_pids_.clear();
  for (auto it = published_pids_.begin(); it != published_pids_.end();) {
    if (pids_.count(*it)) {
      ++it;
      continue;
    }
    gone_pids_.push_back(*it);
    it = published_pids_.erase(it);
  }
  delete_all(maps_[kPerPid].get(), gone_pids_);
  pid_keys_.clear();
  pid_vals_.clear();
  for (auto& [pid, agg] : pids_) {
    pid_keys_.push_back(pid);
    pid_vals_.push_back(agg);
    published_pids_.insert(pid);
  }
  if (o_.json)
    for (size_t k = 0; k < pd_keys_.size(); k++) {
      auto pid = static_cast<uint32_t>(pd_keys_[k] >> 32);
      write_process_json(pid, pd_vals_[k], pids_[pid]);
    }
  update_all(maps_[kPerPid].get(), pid_keys_, pid_vals_);
}

void Bridge::write_process_json(uint32_t pid, const gpu_pid_device& v, const gpu_pid& agg) {
  JsonLine j(out_.buf());
  j.record("process", tick_ns_);
  where_->process(j, static_cast<pid_t>(pid), {});
  j.num("tick", ticks_).num("device", v.gpu_device);
  j.boolean("compute", v.kinds & GPU_PROC_COMPUTE).boolean("graphics", v.kinds & GPU_PROC_GRAPHICS);
  j.num("timestamp_ns", agg.timestamp_ns).num("used_gpu_memory_bytes", v.used_gpu_memory_bytes);
  j.num("sm_util_pct", v.sm_util_pct).num("mem_util_pct", v.mem_util_pct).num("enc_util_pct", v.enc_util_pct);
  j.num("dec_util_pct", v.dec_util_pct).num("used_gpu_memory_total_bytes", agg.used_gpu_memory_total_bytes);
  j.num("sm_util_pct_max", agg.sm_util_pct_max).num("mem_util_pct_max", agg.mem_util_pct_max);
  j.num("gpu_device_primary", agg.gpu_device_primary).num("device_count", agg.device_count).end();
}

// Meta goes last: its timestamp vouches for everything written before it.
void Bridge::publish_meta() {
  gpu_meta meta{};
  meta.schema_version = GPU_BRIDGE_SCHEMA_VERSION;
  meta.n_devices = static_cast<uint32_t>(nvml_->devices().size());
  meta.helper_pid = static_cast<uint32_t>(getpid());
  meta.poll_interval_ms = o_.poll_interval_ms;
  meta.clock_offset_ns = realtime_minus_boottime_ns();
  meta.last_update_boottime_ns = boottime_ns();
  uint32_t zero = 0;
  bpf_map_update_elem(maps_[kMeta].get(), &zero, &meta, BPF_ANY);
  if (!o_.json) return;
  JsonLine j(out_.buf());
  j.record("meta", tick_ns_).num("tick", ticks_).num("schema_version", meta.schema_version);
  j.num("n_devices", meta.n_devices).num("last_update_boottime_ns", meta.last_update_boottime_ns);
  j.num("helper_pid", meta.helper_pid).num("poll_interval_ms", meta.poll_interval_ms);
  j.num("clock_offset_ns", meta.clock_offset_ns).end();
}

bool Bridge::tick() {
  if (!still_holder()) return false;
  uint64_t now_rt = realtime_ns();
  tick_ns_ = now_rt;
  auto now = std::chrono::steady_clock::now();
  detail_tick_ = ticks_ == 0 || now - detail_at_ >= std::chrono::milliseconds(o_.detail_interval_ms);
  if (detail_tick_) detail_at_ = now;
  publish_devices();
  if (detail_tick_) {
    read_processes(now_rt);
    publish_processes();
  }
  publish_meta();
  {
    std::lock_guard g(out_mu_);
    out_.flush();
  }
  ticks_++;
  return true;
}

int Bridge::run() {
  if (o_.poll_interval_ms == 0) throw UsageError("--poll-interval-ms must be at least 1");
  require_bpf_privileges();
  set_libbpf_verbose(o_.verbose);
  print_events_ = true;
  start();
  StopControl stop(o_.duration_s);
  timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  bool ok = true;
  while (ok && !stop.should_stop()) {
    uint64_t ns = next.tv_nsec + o_.poll_interval_ms * 1000000ull;
    next.tv_sec += static_cast<time_t>(ns / 1000000000ull);
    next.tv_nsec = static_cast<long>(ns % 1000000000ull);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, nullptr) == EINTR && !stop.should_stop()) {
    }
    if (stop.should_stop()) break;
    ok = tick();
  }
  events_thread_.request_stop();
  if (events_thread_.joinable()) events_thread_.join();
  // Pins stay: consumers see last_update_boottime_ns stop moving and give no verdicts.
  fprintf(stderr, "gpuscope: bridge stopped after %llu ticks; pins kept under %s, data now stale\n",
          static_cast<unsigned long long>(ticks_), dir_.c_str());
  return ok ? 0 : 1;
}

void Bridge::start() {
  check_pin_dir(dir_, true);
  nvml_ = std::make_unique<nvml::Library>(o_.nvml);
  if (nvml_->devices().empty()) throw UsageError("NVML reports no GPU devices");
  uint64_t start_us = realtime_ns() / 1000;
  DeviceState initial;
  initial.last_seen_us = initial.proc_last_seen_us = initial.start_us = start_us;
  state_.assign(nvml_->devices().size(), initial);
  skel_.reset(bridge_pins_bpf__open());
  if (!skel_) throw std::runtime_error(std::string("cannot open the bridge's BPF object: ") + strerror(errno));

  {
    // Held until the first tick is published, so two bridges starting at once cannot both
    // find the pins free.
    Fd dir(open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir || flock(dir.get(), LOCK_EX) != 0)
      throw UsageError(fmt::format("cannot lock {}: {}", dir_, strerror(errno)));
    refuse_if_held();
    open_maps();
    tick();
  }
  start_events();
  fprintf(stderr, "gpuscope: bridge publishing %zu device(s) under %s every %u ms%s%s\n", nvml_->devices().size(),
          dir_.c_str(), o_.poll_interval_ms, o_.no_samples ? " (samples off)" : "",
          reused_[kMeta] ? " (pins taken over in place)" : "");
  if (o_.verbose)
    for (int i = 0; i < BridgePins::kCount; i++) {
      bpf_map_info info{};
      uint32_t len = sizeof info;
      bpf_obj_get_info_by_fd(maps_[i].get(), &info, &len);
      fprintf(stderr, "gpuscope: %s map id %u, BTF id %u (%s)\n", BridgePins::kNames[i], info.id, info.btf_id,
              reused_[i] ? "reused" : "created");
    }
}

// Registered before the bridge says it is publishing: an event from then on is delivered.
void Bridge::start_events() {
  events_ = std::make_unique<nvml::Events>(*nvml_, o_.verbose);
  if (!events_->active()) return;
  events_thread_ = thread_without_signals([this](std::stop_token stop) {
    pthread_setname_np(pthread_self(), "gs-nvml-events");
    NvmlEventRecord e;
    while (!stop.stop_requested())
      if (events_->wait(kEventWaitMs, e)) deliver(e);
  });
}

void Bridge::deliver(const NvmlEventRecord& e) {
  if (print_events_) print_event(e);
  std::lock_guard g(subscribers_mu_);
  for (auto& fn : subscribers_) fn(e);
}

void Bridge::print_event(const NvmlEventRecord& e) {
  std::lock_guard g(out_mu_);
  auto& buf = event_out_.buf();
  if (o_.json) {
    JsonLine j(buf);
    j.record("nvml_event", e.ts_ns).num("device", e.device).str("uuid", e.uuid).str("pci_bus_id", e.pci_bus_id);
    j.str("event", nvml_event_name(e.event_type)).num("event_type", e.event_type).num("data", e.data);
    if (e.is_xid())
      j.num("xid", e.data);
    else
      j.null("xid");
    j.num("gpu_instance_id", e.gpu_instance_id).num("compute_instance_id", e.compute_instance_id).end();
  } else {
    static const Table table(
        {{"TIME", -12}, {"GPU", 3}, {"PCI", -12}, {"UUID", -40}, {"EVENT", -24}, {"DATA", 6}, {"GI", 3}, {"CI", 0}});
    if (!event_header_done_) table.header(buf);
    event_header_done_ = true;
    auto t = static_cast<time_t>(e.ts_ns / 1000000000);
    tm tm{};
    localtime_r(&t, &tm);
    auto id = [](int v) { return v < 0 ? std::string("-") : std::to_string(v); };
    table.row(buf, {fmt::format("{:02}:{:02}:{:02}.{:03}", tm.tm_hour, tm.tm_min, tm.tm_sec, e.ts_ns / 1000000 % 1000),
                    std::to_string(e.device), e.pci_bus_id, e.uuid, nvml_event_name(e.event_type),
                    std::to_string(e.data), id(e.gpu_instance_id), id(e.compute_instance_id)});
  }
  event_out_.flush();
}

BridgeHolder bridge_holder(const std::string& pin_dir) {
  BridgeHolder h;
  std::optional<gpu_meta> m = BridgeReader::read_meta(pin_dir);
  if (!m) return h;
  h.pid = m->helper_pid;
  h.age_ms = bridge_age_ms(*m);
  // A holder is fresh while it has ticked within a few of its own poll intervals.
  uint64_t interval_ms = m->poll_interval_ms ? m->poll_interval_ms : 100;
  bool fresh = m->last_update_boottime_ns && h.age_ms <= std::max<uint64_t>(5 * interval_ms, 1000);
  h.publishing = fresh && process_running(static_cast<pid_t>(m->helper_pid));
  return h;
}

BridgePublisher::BridgePublisher(const BridgeOptions& o) : impl_(std::make_unique<Bridge>(o)) { impl_->start(); }
BridgePublisher::~BridgePublisher() = default;
bool BridgePublisher::tick() { return impl_->tick(); }
size_t BridgePublisher::devices() const { return impl_->devices(); }
void BridgePublisher::on_event(NvmlEventHandler fn) { impl_->on_event(std::move(fn)); }
std::vector<NvmlDeviceId> BridgePublisher::device_ids() const { return impl_->device_ids(); }

BridgeThread::BridgeThread(const BridgeOptions& o) : pub_(o), poll_ms_(o.poll_interval_ms) {
  pub_.tick();  // readers find data at once
  thread_ = thread_without_signals([this](std::stop_token stop) {
    pthread_setname_np(pthread_self(), "gs-bridge");  // its CPU apart from its owner's, in top -H
    auto next = std::chrono::steady_clock::now();
    std::mutex m;
    std::condition_variable_any cv;
    while (!stop.stop_requested()) {
      next += std::chrono::milliseconds(poll_ms_);
      std::unique_lock l(m);
      cv.wait_until(l, stop, next, [] { return false; });  // woken early only by the stop
      if (stop.stop_requested()) break;
      try {
        if (!pub_.tick()) break;  // another bridge took the pins over: it is read instead
      } catch (const std::exception& e) {
        std::lock_guard g(mu_);
        why_ = e.what();
        break;
      }
    }
    done_ = true;
  });
}

BridgeThread::~BridgeThread() {
  thread_.request_stop();
  if (thread_.joinable()) thread_.join();
}

std::string BridgeThread::why() const {
  std::lock_guard g(mu_);
  return why_;
}

int run_bridge(const BridgeOptions& opts) { return Bridge(opts).run(); }

}  // namespace gpuscope
