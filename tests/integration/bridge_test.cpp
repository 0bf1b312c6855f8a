// gpuscope bridge against the NVML stand-in, on real bpffs: the pinned maps are read back with
// libbpf, byte offsets included, and compared with what the stand-in was told to answer.
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "bridge/bridge_maps.h"
#include "bridge/layout_fields.h"
#include "bridge_layout.skel.h"
#include "core/clock.h"
#include "core/system.h"
#include "bridge_fixture.h"
#include "harness.h"

#include <fmt/format.h>
#include <algorithm>
#include <memory>

using namespace gstest;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

struct Fd {
  int fd;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

const char* const kTwoDevices =
    "device 0 util 37 memutil 12 mem_total 85899345920 mem_free 81067507712 mem_used 4294967296 "
    "mem_reserved 536870912 temp 55 power 123456 smclk 1410 memclk 2619 throttle 0x105 pcie_tx 1000 pcie_rx 2000 "
    "enc 3 dec 4 fan 40 compute_mode 3 ecc_corr 7 ecc_uncorr 1\n"
    "device 1 util 91 memutil 44 mem_total 17179869184 mem_free 1 mem_used 8589934592 mem_reserved 1048576 "
    "temp ERR power 300000 smclk 1980 memclk 1593 throttle 0 pcie_tx ERR pcie_rx 5 enc 0 dec 9 fan 100 "
    "compute_mode 0 ecc_corr 0 ecc_uncorr 0\n"
    "process 0 1234 1048576\n"
    "process 1 1234 2097152\n"
    "process 1 4321 NA\n"
    "process 0 777 3145728\n";

// A pin directory and the stand-in told of kTwoDevices.
struct TwoDevices {
  PinDir d;
  StandinFile f;
  TwoDevices() { f.write(kTwoDevices); }
};

std::vector<std::string> bridge_argv(const PinDir& d, std::vector<std::string> extra = {}) {
  std::vector<std::string> v{gpuscope_bin(), "bridge", "--nvml", NVML_STANDIN, "--pin-dir", d.path};
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}

struct Bridge {
  Process p;
  Bridge(const PinDir& d, const StandinFile& f, std::vector<std::string> extra = {})
      : p(bridge_argv(d, std::move(extra)), {f.env()}) {
    if (!p.wait_for("bridge publishing", 10, true)) ADD_FAILURE() << "bridge did not start: " << p.err();
  }
};

template <typename V, typename K>
bool lookup(const std::string& pin, K key, V* v) {
  Fd fd(bpf_obj_get(pin.c_str()));
  return fd.fd >= 0 && bpf_map_lookup_elem(fd.fd, &key, v) == 0;
}

gpu_meta meta(const PinDir& d) {
  gpu_meta m{};
  EXPECT_TRUE(lookup(d.pin(GPU_PIN_META), 0u, &m));
  return m;
}

uint32_t map_id(const std::string& pin) {
  Fd fd(bpf_obj_get(pin.c_str()));
  bpf_map_info info{};
  uint32_t len = sizeof info;
  if (fd.fd < 0 || bpf_obj_get_info_by_fd(fd.fd, &info, &len) != 0) return 0;
  return info.id;
}

// Waits until the bridge has published `n` more ticks.
void wait_ticks(const PinDir& d, int n) {
  uint64_t last = meta(d).last_update_boottime_ns;
  auto deadline = std::chrono::steady_clock::now() + 5s;
  for (int seen = 0; seen < n;) {
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "no bridge tick under " << d.path;
      return;
    }
    std::this_thread::sleep_for(10ms);
    uint64_t now = meta(d).last_update_boottime_ns;
    if (now != last) seen++, last = now;
  }
}

template <typename T>
T at(const unsigned char* raw, size_t off) {
  T v;
  memcpy(&v, raw + off, sizeof v);
  return v;
}

std::vector<json> lines_of(const std::string& out, const std::string& type) {
  std::vector<json> v;
  for (auto& j : parse_lines(out))
    if (j["type"] == type) v.push_back(j);
  return v;
}

}  // namespace

TEST(BridgeLayout, EveryPublishedFieldMatchesNvml) {
  TwoDevices two;
  auto& [d, f] = two;
  uint64_t rt0 = gpuscope::realtime_ns(), bt0 = gpuscope::boottime_ns();
  Bridge b(d, f, {"--json"});
  wait_ticks(d, 1);
  b.p.signal(SIGINT);
  ASSERT_EQ(b.p.wait(10), 0) << b.p.err();
  uint64_t rt1 = gpuscope::realtime_ns(), bt1 = gpuscope::boottime_ns();

  // meta, by the contract's byte offsets.
  unsigned char raw[128];
  ASSERT_TRUE(lookup(d.pin(GPU_PIN_META), 0u, reinterpret_cast<gpu_meta*>(raw)));
  EXPECT_EQ(at<uint32_t>(raw, 0), 1u);
  EXPECT_EQ(at<uint32_t>(raw, 4), 2u);
  EXPECT_GT(at<uint64_t>(raw, 8), bt0);
  EXPECT_LT(at<uint64_t>(raw, 8), bt1);
  EXPECT_EQ(at<uint32_t>(raw, 16), static_cast<uint32_t>(b.p.pid()));
  EXPECT_EQ(at<uint32_t>(raw, 20), 100u);
  EXPECT_NEAR(static_cast<double>(at<int64_t>(raw, 24)), static_cast<double>(gpuscope::realtime_minus_boottime_ns()),
              1e6);

  // Device 0: every field the stand-in answers.
  ASSERT_TRUE(lookup(d.pin(GPU_PIN_DEVICE), 0u, reinterpret_cast<gpu_device_metrics*>(raw)));
  EXPECT_GT(at<uint64_t>(raw, 0), rt0);
  EXPECT_LT(at<uint64_t>(raw, 0), rt1);
  EXPECT_EQ(at<uint32_t>(raw, 8), 37u);
  EXPECT_EQ(at<uint32_t>(raw, 12), 12u);
  EXPECT_EQ(at<uint64_t>(raw, 16), 85899345920ull);
  EXPECT_EQ(at<uint64_t>(raw, 24), 4294967296ull);
  EXPECT_EQ(at<uint64_t>(raw, 32), 536870912ull);
  EXPECT_EQ(at<uint32_t>(raw, 40), 55u);
  EXPECT_EQ(at<uint32_t>(raw, 44), 123456u);
  EXPECT_EQ(at<uint32_t>(raw, 48), 1410u);
  EXPECT_EQ(at<uint32_t>(raw, 52), 2619u);
  EXPECT_EQ(at<uint64_t>(raw, 56), 0x105ull);
  EXPECT_EQ(at<uint64_t>(raw, 64), 1000ull);
  EXPECT_EQ(at<uint64_t>(raw, 72), 2000ull);
  EXPECT_EQ(at<uint32_t>(raw, 80), 3u);
  EXPECT_EQ(at<uint32_t>(raw, 84), 4u);
  EXPECT_EQ(at<uint64_t>(raw, 88), 0ull) << "no NVLink source";
  EXPECT_EQ(at<uint64_t>(raw, 96), 0ull);
  EXPECT_EQ(at<uint64_t>(raw, 104), 7ull);
  EXPECT_EQ(at<uint64_t>(raw, 112), 1ull);
  EXPECT_EQ(at<uint32_t>(raw, 120), 40u);
  EXPECT_EQ(at<uint32_t>(raw, 124), 3u);

  // Device 1: the calls that fail give 0, the others their values.
  gpu_device_metrics m1{};
  ASSERT_TRUE(lookup(d.pin(GPU_PIN_DEVICE), 1u, &m1));
  EXPECT_EQ(m1.sm_util_pct, 91u);
  EXPECT_EQ(m1.mem_util_pct, 44u);
  EXPECT_EQ(m1.mem_total_bytes, 17179869184ull);
  EXPECT_EQ(m1.mem_used_bytes, 8589934592ull);
  EXPECT_EQ(m1.mem_reserved_bytes, 1048576ull);
  EXPECT_EQ(m1.temp_c, 0u) << "temperature call failed";
  EXPECT_EQ(m1.power_mw, 300000u);
  EXPECT_EQ(m1.sm_clock_mhz, 1980u);
  EXPECT_EQ(m1.mem_clock_mhz, 1593u);
  EXPECT_EQ(m1.pcie_tx_kbps, 0ull) << "PCIe TX call failed";
  EXPECT_EQ(m1.pcie_rx_kbps, 5ull);
  EXPECT_EQ(m1.dec_util_pct, 9u);
  EXPECT_EQ(m1.fan_speed_pct, 100u);
  gpu_device_metrics zero{};
  for (uint32_t i = 2; i < GPU_MAX_DEVICES; i++) {
    gpu_device_metrics m{};
    ASSERT_TRUE(lookup(d.pin(GPU_PIN_DEVICE), i, &m));
    EXPECT_EQ(memcmp(&m, &zero, sizeof m), 0) << "device " << i;
  }

  // Per pid per device: exactly the stand-in's list; NOT_AVAILABLE memory is 0.
  struct Want {
    uint32_t pid;
    uint8_t dev;
    uint64_t bytes;
  };
  for (Want w : {Want{1234, 0, 1048576}, Want{1234, 1, 2097152}, Want{4321, 1, 0}, Want{777, 0, 3145728}}) {
    uint64_t key = (uint64_t{w.pid} << 32) | w.dev;
    ASSERT_TRUE(lookup(d.pin(GPU_PIN_PER_PID_PER_DEVICE), key, reinterpret_cast<gpu_pid_device*>(raw)))
        << w.pid << "/" << int(w.dev);
    EXPECT_GT(at<uint64_t>(raw, 0), rt0);
    EXPECT_LT(at<uint64_t>(raw, 0), rt1);
    EXPECT_EQ(at<uint64_t>(raw, 8), w.bytes);
    for (size_t off : {16, 20, 24, 28}) EXPECT_EQ(at<uint32_t>(raw, off), 0u) << "no per-process samples: 0";
    EXPECT_EQ(raw[32], w.dev);
    EXPECT_EQ(raw[33], 0) << "mig_instance";
    EXPECT_EQ(at<uint16_t>(raw, 34), GPU_PROC_COMPUTE) << "kinds: in the compute list only";
    EXPECT_EQ(at<uint32_t>(raw, 36), 0u) << "reserved tail";
  }
  {
    Fd fd(bpf_obj_get(d.pin(GPU_PIN_PER_PID_PER_DEVICE).c_str()));
    uint64_t k, n = 0;
    int count = 0;
    for (void* prev = nullptr; bpf_map_get_next_key(fd.fd, prev, &n) == 0; prev = &k) k = n, count++;
    EXPECT_EQ(count, 4);
  }

  // Per pid aggregate.
  struct Agg {
    uint32_t pid;
    uint64_t total;
    uint8_t primary, count;
  };
  for (Agg w : {Agg{1234, 3145728, GPU_DEVICE_SEVERAL, 2}, Agg{4321, 0, 1, 1}, Agg{777, 3145728, 0, 1}}) {
    ASSERT_TRUE(lookup(d.pin(GPU_PIN_PER_PID), w.pid, reinterpret_cast<gpu_pid*>(raw))) << w.pid;
    EXPECT_GT(at<uint64_t>(raw, 0), rt0);
    EXPECT_EQ(at<uint64_t>(raw, 8), w.total) << w.pid;
    EXPECT_EQ(at<uint32_t>(raw, 16), 0u);
    EXPECT_EQ(at<uint32_t>(raw, 20), 0u);
    EXPECT_EQ(raw[24], w.primary) << w.pid;
    EXPECT_EQ(raw[25], w.count) << w.pid;
    EXPECT_EQ(at<uint16_t>(raw, 26), 0);
    EXPECT_EQ(at<uint32_t>(raw, 28), 0u) << "reserved tail";
  }

  // --json prints what the last tick published.
  auto devs = lines_of(b.p.out(), "device");
  ASSERT_GE(devs.size(), 2u);
  auto& j1 = devs.back();
  EXPECT_EQ(j1["device"], 1);
  EXPECT_EQ(j1["sm_util_pct"], 91);
  EXPECT_EQ(j1["mem_reserved_bytes"], 1048576);
  EXPECT_EQ(j1["timestamp_ns"].get<uint64_t>(), m1.timestamp_ns);
  auto procs = lines_of(b.p.out(), "process");
  int last_tick = procs.back()["tick"];
  int n_last = 0;
  for (auto& p : procs) {
    if (p["tick"] != last_tick) continue;
    n_last++;
    if (p["pid"] == 1234) {
      EXPECT_EQ(p["gpu_device_primary"], 255);
      EXPECT_EQ(p["device_count"], 2);
      EXPECT_EQ(p["used_gpu_memory_total_bytes"], 3145728);
    }
  }
  EXPECT_EQ(n_last, 4);
  auto metas = lines_of(b.p.out(), "meta");
  ASSERT_FALSE(metas.empty());
  EXPECT_EQ(metas.back()["last_update_boottime_ns"].get<uint64_t>(), meta(d).last_update_boottime_ns);
}

TEST(BridgeLayout, BpfProgramAndCxxAgree) {
  std::unique_ptr<bridge_layout_bpf, void (*)(bridge_layout_bpf*)> skel(bridge_layout_bpf__open(),
                                                                        bridge_layout_bpf__destroy);
  ASSERT_TRUE(skel);
#define S(s, size) sizeof(s),
#define F(s, f, off) offsetof(s, f),
  const size_t cxx[] = {GPU_BRIDGE_LAYOUT(S, F)};
  const char* names[] = {
#undef S
#undef F
#define S(s, size) #s,
#define F(s, f, off) #s "." #f,
      GPU_BRIDGE_LAYOUT(S, F)};
#undef S
#undef F
  constexpr size_t n = sizeof cxx / sizeof cxx[0];
  ASSERT_EQ(sizeof skel->rodata->layout / sizeof(uint32_t), n);
  for (size_t i = 0; i < n; i++) EXPECT_EQ(skel->rodata->layout[i], cxx[i]) << names[i];

  // A BPF program built from the same header reads a bridge's pinned meta.
  TwoDevices two;
  auto& [d, f] = two;
  auto r = run(bridge_argv(d, {"-d", "0.3"}), {f.env()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Fd pinned(bpf_obj_get(d.pin(GPU_PIN_META).c_str()));
  ASSERT_GE(pinned.fd, 0);
  ASSERT_EQ(bpf_map__reuse_fd(skel->maps.gpu_meta, pinned.fd), 0);
  ASSERT_EQ(bridge_layout_bpf__load(skel.get()), 0);
  LIBBPF_OPTS(bpf_test_run_opts, opts);
  unsigned long long args[2] = {};
  opts.ctx_in = args;
  opts.ctx_size_in = sizeof args;
  ASSERT_EQ(bpf_prog_test_run_opts(bpf_program__fd(skel->progs.read_meta), &opts), 0) << strerror(errno);
  EXPECT_EQ(skel->bss->seen_update_ns, meta(d).last_update_boottime_ns);
  EXPECT_NE(skel->bss->seen_update_ns, 0u);
}

TEST(BridgeSamples, BurstBetweenPollsMovesLastActive) {
  PinDir d, d_poll;
  StandinFile f;
  f.write("device 0 util 0\ndevice 1 util 0\n");
  Bridge b(d, f, {"--json", "--poll-interval-ms", "200"});
  Bridge poll_only(d_poll, f, {"--json", "--poll-interval-ms", "200", "--no-samples"});
  wait_ticks(d, 1);
  // A burst that ended between two polls; the newest sample is idle again, as is the poll.
  uint64_t now_us = gpuscope::realtime_ns() / 1000;
  uint64_t busy_us = now_us - 40000;
  f.write(fmt::format("device 0 util 0\ndevice 1 util 0\nsample 0 {} 50\nsample 0 {} 80\nsample 0 {} 0\n",
                      now_us - 60000, busy_us, now_us - 10000));
  wait_ticks(d, 3);
  wait_ticks(d_poll, 1);
  b.p.signal(SIGINT);
  poll_only.p.signal(SIGINT);
  ASSERT_EQ(b.p.wait(10), 0);
  ASSERT_EQ(poll_only.p.wait(10), 0);

  std::vector<json> busy;
  for (auto& j : lines_of(b.p.out(), "device"))
    if (j["from_sample"] == true) busy.push_back(j);
  ASSERT_EQ(busy.size(), 1u) << b.p.out();
  EXPECT_EQ(busy[0]["device"], 0);
  EXPECT_EQ(busy[0]["sm_util_pct"], 80) << "the newest non-zero sample's value";
  EXPECT_EQ(busy[0]["timestamp_ns"].get<uint64_t>(), busy_us * 1000) << "and its time";
  // A consumer's latch: realtime - clock_offset gives boot time, just before the write above.
  int64_t offset = 0;
  for (auto& m : lines_of(b.p.out(), "meta"))
    if (m["tick"] == busy[0]["tick"]) offset = m["clock_offset_ns"];
  uint64_t latch_boot = busy_us * 1000 - static_cast<uint64_t>(offset);
  EXPECT_NEAR(static_cast<double>(latch_boot),
              static_cast<double>(gpuscope::boottime_ns() - (gpuscope::realtime_ns() - busy_us * 1000)), 5e6);
  // The tick after goes back to the poll: a sample counts once.
  int later = 0;
  for (auto& j : lines_of(b.p.out(), "device"))
    if (j["device"] == 0 && j["tick"] > busy[0]["tick"]) {
      later++;
      EXPECT_EQ(j["sm_util_pct"], 0);
    }
  EXPECT_GE(later, 1);

  for (auto& j : lines_of(poll_only.p.out(), "device")) {
    EXPECT_EQ(j["from_sample"], false);
    EXPECT_EQ(j["sm_util_pct"], 0) << "polling alone misses the burst";
  }
}

// --detail-interval-ms (the agent's bridge reads them once a second): utilization every poll;
// the device details and the processes, NVML calls that reach the GPU's firmware, only on a
// tick at least the interval after the last that read them, published unchanged in between.
TEST(BridgeSamples, DetailsAndProcessesReadEveryDetailInterval) {
  TwoDevices two;
  auto& [d, f] = two;
  Bridge b(d, f, {"--json", "--poll-interval-ms", "50", "--detail-interval-ms", "600"});
  wait_ticks(d, 3);
  std::string changed = kTwoDevices;
  changed.replace(changed.find("util 37"), 7, "util 80");
  changed.replace(changed.find("temp 55"), 7, "temp 70");
  changed += "process 0 999 4194304\n";
  f.write(changed);
  wait_ticks(d, 40);
  b.p.signal(SIGINT);
  ASSERT_EQ(b.p.wait(10), 0);

  std::set<int> detail_ticks;
  for (auto& j : lines_of(b.p.out(), "process")) detail_ticks.insert(j["tick"].get<int>());
  std::map<int, json> dev0;  // by tick
  for (auto& j : lines_of(b.p.out(), "device"))
    if (j["device"] == 0) dev0[j["tick"].get<int>()] = j;
  ASSERT_GE(dev0.size(), 43u) << b.p.out();
  ASSERT_TRUE(detail_ticks.count(0)) << "the first tick reads everything";
  ASSERT_GE(detail_ticks.size(), 2u) << b.p.out();
  ASSERT_LT(detail_ticks.size(), dev0.size() / 2) << "details on every tick";
  // Details read at most every 600 ms, utilization at every tick. A tick decides at its start and
  // stamps the device after reading its details, so its stamp moves by what those reads took
  // (under a sanitizer, milliseconds): 550 ms apart at least, where every tick would be 50.
  int prev = -1, util_at = -1, temp_at = -1;
  for (int t : detail_ticks) {
    if (prev >= 0)
      EXPECT_GE(dev0[t]["timestamp_ns"].get<uint64_t>() - dev0[prev]["timestamp_ns"].get<uint64_t>(), 550'000'000u);
    prev = t;
  }
  for (auto& [t, j] : dev0) {
    if (util_at < 0 && j["sm_util_pct"] == 80) util_at = t;
    if (temp_at < 0 && j["temp_c"] == 70) temp_at = t;
    if (temp_at < 0) EXPECT_EQ(j["temp_c"], 55) << j.dump();
    EXPECT_EQ(j["power_mw"], 123456) << "details are published on every tick";
  }
  ASSERT_GE(util_at, 0) << b.p.out();
  ASSERT_GE(temp_at, util_at) << b.p.out();
  EXPECT_TRUE(detail_ticks.count(temp_at)) << "the temperature changed on tick " << temp_at << ", no detail tick";
  bool new_pid_before = false;
  for (auto& j : lines_of(b.p.out(), "process"))
    if (j["pid"] == 999) new_pid_before = new_pid_before || j["tick"].get<int>() < temp_at;
  EXPECT_FALSE(new_pid_before) << "the process list is read with the details";
  // What a consumer reads now: the last tick's values.
  gpu_device_metrics m{};
  ASSERT_TRUE(lookup(d.pin(GPU_PIN_DEVICE), 0u, &m));
  EXPECT_EQ(m.sm_util_pct, 80u);
  EXPECT_EQ(m.temp_c, 70u);
  gpu_pid p{};
  EXPECT_TRUE(lookup(d.pin(GPU_PIN_PER_PID), 999u, &p));
}

TEST(BridgeLifecycle, FreshnessAdvancesEachTickAndStopsAfterExit) {
  TwoDevices two;
  auto& [d, f] = two;
  Bridge b(d, f);
  uint64_t prev = meta(d).last_update_boottime_ns;
  for (int i = 0; i < 4; i++) {
    wait_ticks(d, 1);
    uint64_t now = meta(d).last_update_boottime_ns;
    EXPECT_GT(now - prev, 50'000'000u);
    EXPECT_LT(now - prev, 400'000'000u);  // a loaded 2-core VM delays ticks
    EXPECT_LT(gpuscope::boottime_ns() - now, 300'000'000u);
    prev = now;
  }
  b.p.signal(SIGTERM);
  ASSERT_EQ(b.p.wait(10), 0);
  EXPECT_NE(b.p.err().find("pins kept"), std::string::npos) << b.p.err();
  uint64_t stopped = meta(d).last_update_boottime_ns;
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(meta(d).last_update_boottime_ns, stopped) << "stale after exit";
  EXPECT_EQ(d.entries(), 4) << "pins are kept";
}

TEST(BridgeLifecycle, SecondBridgeRefusesWhileFirstLives) {
  TwoDevices two;
  auto& [d, f] = two;
  Bridge first(d, f);
  uint32_t id = map_id(d.pin(GPU_PIN_META));
  auto r = run(bridge_argv(d), {f.env()}, 10);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, fmt::format("gpuscope: bridge pid {} is publishing under {} (updated ", first.p.pid(), d.path) +
                       r.err.substr(r.err.find("updated ") + 8, r.err.find(" ms ago") - r.err.find("updated ") - 8) +
                       " ms ago); stop it first\n");
  EXPECT_EQ(map_id(d.pin(GPU_PIN_META)), id);
  wait_ticks(d, 1);
  EXPECT_EQ(meta(d).helper_pid, static_cast<uint32_t>(first.p.pid()));
}

TEST(BridgeLifecycle, AfterKillNineANewBridgeReusesTheMapsInPlace) {
  TwoDevices two;
  auto& [d, f] = two;
  // An incompatible leftover (wrong value size) is replaced, not reused.
  {
    Fd odd(bpf_map_create(BPF_MAP_TYPE_ARRAY, "odd", 4, 64, 1, nullptr));
    ASSERT_EQ(bpf_obj_pin(odd.fd, d.pin(GPU_PIN_PER_PID).c_str()), 0);
  }
  uint32_t odd_id = map_id(d.pin(GPU_PIN_PER_PID));
  auto first = std::make_unique<Bridge>(d, f);
  EXPECT_NE(map_id(d.pin(GPU_PIN_PER_PID)), odd_id);
  uint32_t ids[4];
  for (int i = 0; i < 4; i++) ids[i] = map_id(d.pin(kBridgePins[i]));
  // A consumer that opened the maps before the crash.
  Fd meta_fd(bpf_obj_get(d.pin(GPU_PIN_META).c_str())), dev_fd(bpf_obj_get(d.pin(GPU_PIN_DEVICE).c_str()));
  first->p.signal(SIGKILL);
  first->p.wait(10);
  first.reset();
  gpu_meta m{};
  uint32_t zero = 0;
  ASSERT_EQ(bpf_map_lookup_elem(meta_fd.fd, &zero, &m), 0);
  uint64_t dead = m.last_update_boottime_ns;

  f.write(std::string(kTwoDevices) + "device 0 util 55\n");
  Bridge second(d, f);
  EXPECT_NE(second.p.err().find("taken over in place"), std::string::npos) << second.p.err();
  for (int i = 0; i < 4; i++) EXPECT_EQ(map_id(d.pin(kBridgePins[i])), ids[i]) << kBridgePins[i];
  wait_ticks(d, 1);
  ASSERT_EQ(bpf_map_lookup_elem(meta_fd.fd, &zero, &m), 0);
  EXPECT_GT(m.last_update_boottime_ns, dead);
  EXPECT_EQ(m.helper_pid, static_cast<uint32_t>(second.p.pid()));
  EXPECT_LT(gpuscope::boottime_ns() - m.last_update_boottime_ns, 300'000'000u);
  gpu_device_metrics dm{};
  ASSERT_EQ(bpf_map_lookup_elem(dev_fd.fd, &zero, &dm), 0);
  EXPECT_EQ(dm.sm_util_pct, 55u) << "the old fd sees the new bridge's data";
}

// A bridge restarted a second after the last one exited (within the readers' 10 s of staleness)
// takes the pins over at once.
TEST(BridgeLifecycle, BridgeStartedASecondAfterAnotherExitedTakesOver) {
  TwoDevices two;
  auto& [d, f] = two;
  auto first = run(bridge_argv(d, {"-d", "1"}), {f.env()}, 30);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  uint32_t id = map_id(d.pin(GPU_PIN_META));
  std::this_thread::sleep_for(1s);
  Bridge second(d, f);
  EXPECT_NE(second.p.err().find("taken over in place"), std::string::npos) << second.p.err();
  EXPECT_EQ(map_id(d.pin(GPU_PIN_META)), id);
  wait_ticks(d, 2);
  EXPECT_EQ(meta(d).helper_pid, static_cast<uint32_t>(second.p.pid()));
  EXPECT_LT(gpuscope::boottime_ns() - meta(d).last_update_boottime_ns, 300'000'000u);
}

TEST(BridgeLifecycle, StaleLiveHolderIsTakenOverAndStepsDown) {
  TwoDevices two;
  auto& [d, f] = two;
  Bridge first(d, f);
  uint32_t id = map_id(d.pin(GPU_PIN_DEVICE));
  first.p.signal(SIGSTOP);  // alive, but its data goes stale
  std::this_thread::sleep_for(1200ms);
  Bridge second(d, f);
  EXPECT_EQ(map_id(d.pin(GPU_PIN_DEVICE)), id);
  first.p.signal(SIGCONT);
  EXPECT_EQ(first.p.wait(10), 1);
  EXPECT_NE(first.p.err().find(fmt::format("gpuscope: bridge pid {} took over", second.p.pid())), std::string::npos)
      << first.p.err();
  wait_ticks(d, 1);
  EXPECT_EQ(meta(d).helper_pid, static_cast<uint32_t>(second.p.pid()));
}

TEST(BridgeLifecycle, PidLeavingTheProcessListLeavesTheMaps) {
  TwoDevices two;
  auto& [d, f] = two;
  Bridge b(d, f);
  gpu_pid v{};
  gpu_pid_device pd{};
  ASSERT_TRUE(lookup(d.pin(GPU_PIN_PER_PID), 4321u, &v));
  std::string without(kTwoDevices);
  without.erase(without.find("process 1 4321 NA\n"), 18);
  without.erase(without.find("process 1 1234 2097152\n"), 23);
  f.write(without);
  wait_ticks(d, 2);
  EXPECT_FALSE(lookup(d.pin(GPU_PIN_PER_PID), 4321u, &v));
  EXPECT_FALSE(lookup(d.pin(GPU_PIN_PER_PID_PER_DEVICE), (uint64_t{4321} << 32) | 1, &pd));
  EXPECT_FALSE(lookup(d.pin(GPU_PIN_PER_PID_PER_DEVICE), (uint64_t{1234} << 32) | 1, &pd));
  ASSERT_TRUE(lookup(d.pin(GPU_PIN_PER_PID_PER_DEVICE), (uint64_t{1234} << 32) | 0, &pd));
  ASSERT_TRUE(lookup(d.pin(GPU_PIN_PER_PID), 1234u, &v));
  EXPECT_EQ(v.gpu_device_primary, 0) << "now on one device";
  EXPECT_EQ(v.device_count, 1);
  EXPECT_EQ(v.used_gpu_memory_total_bytes, 1048576u);
}

// NVML lists graphics contexts (Vulkan, OpenGL) apart from compute ones: a graphics-only
// process is published like any other, each (pid, device) with the kinds of list it is in
// (kinds, in the contract's pad), a process in both once with the larger memory figure.
TEST(BridgeProcesses, GraphicsProcessesArePublishedWithTheirKind) {
  PinDir d;
  StandinFile f;
  f.write(
      "device 0 util 10 memutil 1 mem_total 85899345920 mem_free 1 mem_used 1 mem_reserved 0 temp 30 power 1 "
      "smclk 1 memclk 1 throttle 0 pcie_tx 0 pcie_rx 0 enc 0 dec 0 fan 0 compute_mode 0 ecc_corr 0 ecc_uncorr 0\n"
      "process 0 1234 1048576\n"
      "gprocess 0 888 4194304\n"
      "process 0 4321 2097152\n"
      "gprocess 0 4321 2097152\n");
  Bridge b(d, f, {"--json"});
  wait_ticks(d, 2);
  struct Want {
    uint32_t pid;
    uint64_t bytes;
    uint16_t kinds;
  };
  for (Want w : {Want{1234, 1048576, GPU_PROC_COMPUTE}, Want{888, 4194304, GPU_PROC_GRAPHICS},
                 Want{4321, 2097152, GPU_PROC_COMPUTE | GPU_PROC_GRAPHICS}}) {
    gpu_pid_device pd{};
    ASSERT_TRUE(lookup(d.pin(GPU_PIN_PER_PID_PER_DEVICE), uint64_t{w.pid} << 32, &pd)) << w.pid;
    EXPECT_EQ(pd.kinds, w.kinds) << w.pid;
    EXPECT_EQ(pd.used_gpu_memory_bytes, w.bytes) << w.pid;
    gpu_pid agg{};
    ASSERT_TRUE(lookup(d.pin(GPU_PIN_PER_PID), w.pid, &agg)) << w.pid;
    EXPECT_EQ(agg.used_gpu_memory_total_bytes, w.bytes) << w.pid;
    EXPECT_EQ(agg.device_count, 1) << w.pid;
  }
  b.p.signal(SIGTERM);
  ASSERT_EQ(b.p.wait(10), 0) << b.p.err();
  std::map<uint32_t, std::pair<bool, bool>> seen;
  for (auto& j : lines_of(b.p.out(), "process")) seen[j["pid"]] = {j["compute"], j["graphics"]};
  EXPECT_EQ(seen[1234], std::make_pair(true, false));
  EXPECT_EQ(seen[888], std::make_pair(false, true));
  EXPECT_EQ(seen[4321], std::make_pair(true, true));
  EXPECT_EQ(seen.size(), 3u);
}

TEST(BridgeBadInput, OneLineExitTwoNothingPinned) {
  PinDir d;
  StandinFile f, failing;
  f.write(kTwoDevices);
  failing.write(std::string(kTwoDevices) + "init_fail 9\n");
  std::string not_elf = f.path;  // a text file
  struct Case {
    std::vector<std::string> args;
    const StandinFile* file;
    std::string says;
  };
  std::vector<Case> cases = {
      {bridge_argv(d, {"--poll-interval-ms", "0"}), &f, "--poll-interval-ms"},
      {{gpuscope_bin(), "bridge", "--nvml", "/bin/true", "--pin-dir", d.path}, &f, "NVML not available"},
      {{gpuscope_bin(), "bridge", "--nvml", not_elf, "--pin-dir", d.path}, &f, "NVML not available"},
      {{gpuscope_bin(), "bridge", "--nvml", "/nonexistent/libnvidia-ml.so.1", "--pin-dir", d.path},
       &f,
       "NVML not available"},
      {bridge_argv(d), &failing, "nvmlInit_v2 failed"},
      {{gpuscope_bin(), "bridge", "--nvml", NVML_STANDIN, "--pin-dir", "/tmp"}, &f, "not a directory on bpffs"},
  };
  for (auto& c : cases) {
    auto r = run(c.args, {c.file->env()}, 10);
    std::string cmd;
    for (auto& a : c.args) cmd += a + " ";
    EXPECT_EQ(r.exit_code, 2) << cmd << r.err;
    EXPECT_EQ(r.err.rfind("gpuscope: ", 0), 0u) << cmd << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << cmd << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << cmd << r.err;
    EXPECT_TRUE(r.out.empty()) << cmd;
    EXPECT_EQ(d.entries(), 0) << cmd;
  }
  EXPECT_FALSE(fs::exists("/tmp/" GPU_PIN_META));
}

namespace {

// Per-process utilization samples of kTwoDevices' pids, several per (pid, device), with the
// maxima each field must publish. 4321 (listed on device 1) has none; 555 is not in the
// process list and pid 0 is NVML's unattributed bucket: neither is published.
struct PUtil {
  uint32_t pid;
  uint8_t dev;
  uint32_t sm, mem, enc, dec;
};
const PUtil kSamples[] = {
    {1234, 0, 20, 5, 1, 0}, {777, 0, 12, 8, 0, 0},  {1234, 0, 60, 3, 0, 2},
    {1234, 1, 75, 1, 0, 0}, {555, 0, 90, 90, 0, 0}, {1234, 0, 40, 9, 0, 0},
    {0, 1, 100, 100, 0, 0}, {777, 0, 33, 4, 0, 0},  {1234, 1, 10, 30, 0, 7},
};
const PUtil kMaxima[] = {{1234, 0, 60, 9, 1, 2}, {1234, 1, 75, 30, 0, 7}, {777, 0, 33, 8, 0, 0}, {4321, 1, 0, 0, 0, 0}};
struct AggWant {
  uint32_t pid, sm_max, mem_max;
};
const AggWant kAggMaxima[] = {{1234, 75, 30}, {777, 33, 8}, {4321, 0, 0}};

std::string putil_lines(uint64_t first_us) {
  std::string s;
  for (size_t i = 0; i < std::size(kSamples); i++) {
    auto& p = kSamples[i];
    s += fmt::format("putil {} {} {} {} {} {} {}\n", p.dev, p.pid, first_us + i * 1000, p.sm, p.mem, p.enc, p.dec);
  }
  return s;
}

uint64_t pid_dev_key(uint32_t pid, uint32_t dev) { return (uint64_t{pid} << 32) | dev; }

std::string tmp_dir(const char* tag) {
  std::string d = fmt::format("/tmp/gstest-{}-{}", tag, getpid());
  mkdir(d.c_str(), 0700);
  return d;
}

}  // namespace

TEST(BridgeProcessUtilization, PinnedValuesAreThisTicksMaximaAndTheAggregateIsTheMaxAcrossDevices) {
  PinDir d;
  StandinFile f;
  uint64_t t0_us = gpuscope::realtime_ns() / 1000;
  // Older than the bridge: never counted, although larger than anything below.
  f.write(fmt::format("{}putil 0 1234 {} 99 99 99 99\n", kTwoDevices, t0_us - 5'000'000));
  Bridge b(d, f, {"--json", "--poll-interval-ms", "1000"});
  wait_ticks(d, 1);
  f.write(kTwoDevices + putil_lines(gpuscope::realtime_ns() / 1000 - 100'000));

  // The tick that consumed them; read inside its 1 s period, after its meta write.
  gpu_pid_device pd{};
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!(lookup(d.pin(GPU_PIN_PER_PID_PER_DEVICE), pid_dev_key(1234, 0), &pd) && pd.sm_util_pct != 0)) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no tick published the samples";
    std::this_thread::sleep_for(10ms);
  }
  std::this_thread::sleep_for(100ms);
  uint64_t tick = meta(d).last_update_boottime_ns;
  for (auto& w : kMaxima) {
    ASSERT_TRUE(lookup(d.pin(GPU_PIN_PER_PID_PER_DEVICE), pid_dev_key(w.pid, w.dev), &pd)) << w.pid;
    EXPECT_EQ(pd.sm_util_pct, w.sm) << w.pid << "/" << int(w.dev);
    EXPECT_EQ(pd.mem_util_pct, w.mem) << w.pid << "/" << int(w.dev);
    EXPECT_EQ(pd.enc_util_pct, w.enc) << w.pid << "/" << int(w.dev);
    EXPECT_EQ(pd.dec_util_pct, w.dec) << w.pid << "/" << int(w.dev);
  }
  for (auto& w : kAggMaxima) {
    gpu_pid agg{};
    ASSERT_TRUE(lookup(d.pin(GPU_PIN_PER_PID), w.pid, &agg)) << w.pid;
    EXPECT_EQ(agg.sm_util_pct_max, w.sm_max) << w.pid;
    EXPECT_EQ(agg.mem_util_pct_max, w.mem_max) << w.pid;
  }
  gpu_pid absent{};
  EXPECT_FALSE(lookup(d.pin(GPU_PIN_PER_PID), 555u, &absent)) << "not in the process list";
  EXPECT_FALSE(lookup(d.pin(GPU_PIN_PER_PID), 0u, &absent));
  EXPECT_EQ(meta(d).last_update_boottime_ns, tick) << "all read within one tick";

  // The next tick counts only samples newer than those: one, on 1234/0.
  f.write(kTwoDevices + putil_lines(gpuscope::realtime_ns() / 1000 - 100'000 - 60'000'000) +
          fmt::format("putil 0 1234 {} 5 1 0 0\n", gpuscope::realtime_ns() / 1000));
  wait_ticks(d, 1);
  std::this_thread::sleep_for(100ms);
  b.p.signal(SIGINT);
  ASSERT_EQ(b.p.wait(10), 0) << b.p.err();
  ASSERT_TRUE(lookup(d.pin(GPU_PIN_PER_PID_PER_DEVICE), pid_dev_key(1234, 0), &pd));
  EXPECT_EQ(pd.sm_util_pct, 5u);
  EXPECT_EQ(pd.mem_util_pct, 1u);
  EXPECT_EQ(pd.enc_util_pct, 0u);
  EXPECT_EQ(pd.dec_util_pct, 0u);
  ASSERT_TRUE(lookup(d.pin(GPU_PIN_PER_PID_PER_DEVICE), pid_dev_key(1234, 1), &pd));
  EXPECT_EQ(pd.sm_util_pct, 0u) << "no new sample on device 1";
  EXPECT_EQ(pd.mem_util_pct, 0u);
  gpu_pid agg{};
  ASSERT_TRUE(lookup(d.pin(GPU_PIN_PER_PID), 1234u, &agg));
  EXPECT_EQ(agg.sm_util_pct_max, 5u);
  EXPECT_EQ(agg.mem_util_pct_max, 1u);

  // --json shows the same per-process fields, tick by tick.
  std::map<int, std::vector<json>> by_tick;
  int busy_tick = -1;
  for (auto& j : lines_of(b.p.out(), "process")) {
    by_tick[j["tick"].get<int>()].push_back(j);
    if (j["pid"] == 1234 && j["device"] == 0 && j["sm_util_pct"] == 60) busy_tick = j["tick"];
  }
  ASSERT_GE(busy_tick, 1) << b.p.out();
  ASSERT_EQ(by_tick.rbegin()->first, busy_tick + 1) << "stopped on the tick after";
  for (int t = 0; t < busy_tick; t++)
    for (auto& j : by_tick[t]) EXPECT_EQ(j["sm_util_pct"], 0) << j.dump();
  int checked = 0;
  for (auto& j : by_tick[busy_tick])
    for (auto& w : kMaxima)
      if (j["pid"] == w.pid && j["device"] == w.dev) {
        checked++;
        EXPECT_EQ(j["sm_util_pct"], w.sm) << j.dump();
        EXPECT_EQ(j["mem_util_pct"], w.mem) << j.dump();
        EXPECT_EQ(j["enc_util_pct"], w.enc) << j.dump();
        EXPECT_EQ(j["dec_util_pct"], w.dec) << j.dump();
        for (auto& a : kAggMaxima)
          if (a.pid == w.pid) {
            EXPECT_EQ(j["sm_util_pct_max"], a.sm_max);
            EXPECT_EQ(j["mem_util_pct_max"], a.mem_max);
          }
      }
  EXPECT_EQ(checked, 4);
  for (auto& j : by_tick[busy_tick + 1])
    if (j["pid"] == 1234 && j["device"] == 0) {
      EXPECT_EQ(j["sm_util_pct"], 5);
    }

  // bpftool prints the pins by field name, from the maps' BTF, with the published values.
  auto dump = run({BPFTOOL, "-j", "map", "dump", "pinned", d.pin(GPU_PIN_PER_PID_PER_DEVICE)});
  ASSERT_EQ(dump.exit_code, 0) << dump.err;
  int named = 0;
  for (auto& e : json::parse(dump.out)) {
    ASSERT_TRUE(e.contains("formatted")) << "no BTF: " << e.dump();
    auto& v = e["formatted"]["value"];
    if (e["formatted"]["key"].get<uint64_t>() != pid_dev_key(1234, 0)) continue;
    named++;
    EXPECT_EQ(v["used_gpu_memory"], 1048576);
    EXPECT_EQ(v["sm_util_pct"], 5);
    EXPECT_EQ(v["mem_util_pct"], 1);
    EXPECT_EQ(v["gpu_device"], 0);
    EXPECT_EQ(v["mig_instance"], 0);
  }
  EXPECT_EQ(named, 1) << dump.out;
  dump = run({BPFTOOL, "-j", "map", "dump", "pinned", d.pin(GPU_PIN_PER_PID)});
  ASSERT_EQ(dump.exit_code, 0) << dump.err;
  for (auto& e : json::parse(dump.out))
    if (e["formatted"]["key"] == 1234) {
      EXPECT_EQ(e["formatted"]["value"]["sm_util_pct_max"], 5);
      EXPECT_EQ(e["formatted"]["value"]["used_gpu_memory_total"], 3145728);
      EXPECT_EQ(e["formatted"]["value"]["gpu_device_primary"], 255);
    }
  const std::pair<const char*, const char*> types[] = {
      {GPU_PIN_META, "STRUCT 'gpu_meta' size=32 vlen=6"},
      {GPU_PIN_DEVICE, "STRUCT 'gpu_device_metrics' size=128 vlen=21"},
      {GPU_PIN_PER_PID, "STRUCT 'gpu_pid_metrics_aggregated' size=32"},
      {GPU_PIN_PER_PID_PER_DEVICE, "STRUCT 'gpu_pid_metrics' size=40"}};
  for (auto& [pin, want] : types) {
    auto btf = run({BPFTOOL, "btf", "dump", "map", "pinned", d.pin(pin), "value"});
    EXPECT_NE(btf.out.find(want), std::string::npos) << pin << ": " << btf.out << btf.err;
  }
}

TEST(BridgeProcessUtilization, NotSupportedDeviceIsNotAskedAgainAndSaysSoOnce) {
  PinDir d;
  StandinFile f;
  uint64_t soon_us = gpuscope::realtime_ns() / 1000 + 1'000'000;  // newer than the bridge's start
  f.write(kTwoDevices + std::string("device 1 putil ERR\n") + putil_lines(soon_us));
  Bridge b(d, f, {"--json", "-v"});
  wait_ticks(d, 2);
  // Device 1 would answer now; it is not asked again.
  f.write(kTwoDevices +
          fmt::format("putil 1 1234 {} 80 80 0 0\nputil 1 4321 {} 70 70 0 0\n", soon_us + 500'000, soon_us + 500'000));
  wait_ticks(d, 3);
  b.p.signal(SIGINT);
  ASSERT_EQ(b.p.wait(10), 0) << b.p.err();
  int dev0_busy = 0;
  for (auto& j : lines_of(b.p.out(), "process")) {
    if (j["device"] == 1) {
      EXPECT_EQ(j["sm_util_pct"], 0) << j.dump();
      EXPECT_EQ(j["mem_util_pct"], 0) << j.dump();
      EXPECT_EQ(j["dec_util_pct"], 0) << j.dump();
    }
    if (j["device"] == 0 && j["pid"] == 1234 && j["sm_util_pct"] == 60) {
      dev0_busy++;
      EXPECT_EQ(j["tick"], 0);
      EXPECT_EQ(j["sm_util_pct_max"], 60) << "device 1 contributes nothing";
    }
  }
  EXPECT_EQ(dev0_busy, 1) << "device 0 is unaffected";
  std::string line =
      "gpuscope: device 1: nvmlDeviceGetProcessUtilization is not supported; its per-process utilization stays 0\n";
  auto err = b.p.err();
  size_t at = err.find(line);
  ASSERT_NE(at, std::string::npos) << err;
  EXPECT_EQ(err.find("nvmlDeviceGetProcessUtilization", at + line.size()), std::string::npos) << "said once";
  EXPECT_EQ(err.find("device 0: nvmlDeviceGetProcessUtilization"), std::string::npos);
}

// A consumer written only from Inspektor Gadget's published header (bridge_ig_types.h,
// pinned by name, 4096-entry per-pid maps; tests/integration/bridge_ig_consumer.*) loads on our
// pins and reads, field by field under IG's names, what our header reads.
TEST(BridgeProcessUtilization, InspektorGadgetConsumerReadsOurPins) {
  PinDir d;
  StandinFile f;
  f.write(kTwoDevices + putil_lines(gpuscope::realtime_ns() / 1000 + 1'000'000));
  auto r = run(bridge_argv(d, {"-d", "0.05"}), {f.env()});  // one tick
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> argv{IG_CONSUMER, d.path, "1234", "777", "4321", "555", "--"};
  for (auto& w : kMaxima) argv.push_back(fmt::format("{}:{}", w.pid, w.dev));
  auto c = run(argv);
  ASSERT_EQ(c.exit_code, 0) << "libbpf did not take our pins: " << c.err;
  EXPECT_EQ(d.entries(), 4) << "the consumer pinned nothing of its own";

  std::map<std::string, std::vector<json>> seen;
  for (auto& j : parse_lines(c.out)) seen[j["map"]].push_back(j);
  ASSERT_EQ(seen["gpu_meta"].size(), 1u) << c.out;
  auto& jm = seen["gpu_meta"][0];
  gpu_meta m = meta(d);
  EXPECT_EQ(jm["schema_version"], 1);
  EXPECT_EQ(jm["n_devices"], 2);
  EXPECT_EQ(jm["last_update_boottime_ns"].get<uint64_t>(), m.last_update_boottime_ns);
  EXPECT_EQ(jm["helper_pid"], m.helper_pid);
  EXPECT_EQ(jm["_reserved"], 100) << "our poll interval";
  EXPECT_EQ(jm["clock_offset_ns"].get<int64_t>(), m.clock_offset_ns);

  ASSERT_EQ(seen["gpu_device"].size(), 2u);
  for (auto& j : seen["gpu_device"]) {
    gpu_device_metrics dm{};
    ASSERT_TRUE(lookup(d.pin(GPU_PIN_DEVICE), j["device"].get<uint32_t>(), &dm));
    const std::pair<const char*, uint64_t> fields[] = {{"timestamp_ns", dm.timestamp_ns},
                                                       {"sm_util_pct", dm.sm_util_pct},
                                                       {"mem_util_pct", dm.mem_util_pct},
                                                       {"mem_total", dm.mem_total_bytes},
                                                       {"mem_used", dm.mem_used_bytes},
                                                       {"mem_reserved", dm.mem_reserved_bytes},
                                                       {"temp_c", dm.temp_c},
                                                       {"power_mw", dm.power_mw},
                                                       {"sm_clock_mhz", dm.sm_clock_mhz},
                                                       {"mem_clock_mhz", dm.mem_clock_mhz},
                                                       {"throttle_reasons", dm.throttle_reasons},
                                                       {"pcie_tx_kbps", dm.pcie_tx_kbps},
                                                       {"pcie_rx_kbps", dm.pcie_rx_kbps},
                                                       {"enc_util_pct", dm.enc_util_pct},
                                                       {"dec_util_pct", dm.dec_util_pct},
                                                       {"nvlink_tx_kbps", dm.nvlink_tx_kbps},
                                                       {"nvlink_rx_kbps", dm.nvlink_rx_kbps},
                                                       {"ecc_corrected_total", dm.ecc_corrected_total},
                                                       {"ecc_uncorrected_total", dm.ecc_uncorrected_total},
                                                       {"fan_speed_pct", dm.fan_speed_pct},
                                                       {"compute_mode", dm.compute_mode}};
    for (auto& [name, v] : fields) EXPECT_EQ(j[name].get<uint64_t>(), v) << j["device"] << " " << name;
  }
  EXPECT_EQ(seen["gpu_device"][0]["mem_total"], 85899345920ull);
  EXPECT_EQ(seen["gpu_device"][1]["sm_util_pct"], 91);

  ASSERT_EQ(seen["gpu_per_pid"].size(), 3u) << "1234, 777, 4321; not 555";
  for (size_t i = 0; i < 3; i++) {
    auto& j = seen["gpu_per_pid"][i];
    gpu_pid agg{};
    ASSERT_TRUE(lookup(d.pin(GPU_PIN_PER_PID), j["pid"].get<uint32_t>(), &agg));
    EXPECT_EQ(j["pid"], kAggMaxima[i].pid);
    EXPECT_EQ(j["sm_util_pct_max"], kAggMaxima[i].sm_max) << j.dump();
    EXPECT_EQ(j["mem_util_pct_max"], kAggMaxima[i].mem_max) << j.dump();
    EXPECT_EQ(j["timestamp_ns"].get<uint64_t>(), agg.timestamp_ns);
    EXPECT_EQ(j["used_gpu_memory_total"], agg.used_gpu_memory_total_bytes);
    EXPECT_EQ(j["gpu_device_primary"], agg.gpu_device_primary);
    EXPECT_EQ(j["device_count"], agg.device_count);
  }
  EXPECT_EQ(seen["gpu_per_pid"][0]["used_gpu_memory_total"], 3145728);
  EXPECT_EQ(seen["gpu_per_pid"][0]["gpu_device_primary"], 255);

  ASSERT_EQ(seen["gpu_per_pid_per_device"].size(), 4u);
  for (size_t i = 0; i < 4; i++) {
    auto& j = seen["gpu_per_pid_per_device"][i];
    auto& w = kMaxima[i];
    gpu_pid_device pd{};
    ASSERT_TRUE(lookup(d.pin(GPU_PIN_PER_PID_PER_DEVICE), pid_dev_key(w.pid, w.dev), &pd));
    EXPECT_EQ(j["key"].get<uint64_t>(), pid_dev_key(w.pid, w.dev));
    EXPECT_EQ(j["sm_util_pct"], w.sm) << j.dump();
    EXPECT_EQ(j["mem_util_pct"], w.mem) << j.dump();
    EXPECT_EQ(j["enc_util_pct"], w.enc) << j.dump();
    EXPECT_EQ(j["dec_util_pct"], w.dec) << j.dump();
    EXPECT_EQ(j["gpu_device"], w.dev);
    EXPECT_EQ(j["mig_instance"], 0);
    EXPECT_EQ(j["timestamp_ns"].get<uint64_t>(), pd.timestamp_ns);
    EXPECT_EQ(j["used_gpu_memory"], pd.used_gpu_memory_bytes);
  }
  EXPECT_EQ(seen["gpu_per_pid_per_device"][0]["used_gpu_memory"], 1048576);
}

TEST(BridgeBadInput, PinDirEmptyReadOnlyOrNotADirectory) {
  TwoDevices two;
  auto& [d, f] = two;
  auto expect_refused = [&](const std::vector<std::string>& argv, const std::string& line) {
    auto r = run(argv, {f.env()}, 20);
    std::string cmd;
    for (auto& a : argv) cmd += "'" + a + "' ";
    EXPECT_EQ(r.exit_code, 2) << cmd << r.err;
    EXPECT_EQ(r.err, line) << cmd;
    EXPECT_TRUE(r.out.empty()) << cmd;
  };
  // '' is not /sys/fs/bpf: whatever is pinned there stays as it was.
  uint32_t root_meta = map_id("/sys/fs/bpf/" GPU_PIN_META);
  expect_refused({gpuscope_bin(), "bridge", "--nvml", NVML_STANDIN, "--pin-dir", ""},
                 "gpuscope: --pin-dir is empty; name a directory on bpffs\n");
  expect_refused({gpuscope_bin(), "starvation", "--pin-dir", ""},
                 "gpuscope: --pin-dir is empty; name a directory on bpffs\n");
  EXPECT_EQ(map_id("/sys/fs/bpf/" GPU_PIN_META), root_meta);

  std::string ro = tmp_dir("robpf");
  ASSERT_EQ(mount("bpf", ro.c_str(), "bpf", MS_RDONLY, nullptr), 0) << strerror(errno);
  auto listing = [&] {
    std::set<std::string> names;  // a new bpffs may start with bpf_preload's maps.debug and progs.debug
    for (auto& e : fs::directory_iterator(ro)) names.insert(e.path().filename());
    return names;
  };
  auto before = listing();
  expect_refused({gpuscope_bin(), "bridge", "--nvml", NVML_STANDIN, "--pin-dir", ro},
                 fmt::format("gpuscope: --pin-dir {} is on a read-only bpffs\n", ro));
  EXPECT_EQ(listing(), before);
  umount2(ro.c_str(), MNT_DETACH);
  rmdir(ro.c_str());

  // A pinned object is on bpffs but is no directory.
  {
    Fd odd(bpf_map_create(BPF_MAP_TYPE_ARRAY, "odd", 4, 4, 1, nullptr));
    ASSERT_EQ(bpf_obj_pin(odd.fd, d.pin("odd").c_str()), 0);
  }
  for (const char* cmd : {"bridge", "starvation"}) {
    std::vector<std::string> argv{gpuscope_bin(), cmd, "--pin-dir", d.pin("odd")};
    if (std::string(cmd) == "bridge") argv.insert(argv.begin() + 2, {"--nvml", NVML_STANDIN});
    expect_refused(argv, fmt::format("gpuscope: --pin-dir {} is not a directory on bpffs\n", d.pin("odd")));
  }
  unlink(d.pin("odd").c_str());
  EXPECT_EQ(d.entries(), 0);
}

TEST(BridgeBadInput, TruncatedNvmlIsRefusedBeforeTheLoaderTouchesIt) {
  TwoDevices two;
  auto& [d, f] = two;
  std::string dir = tmp_dir("nvml"), lib = dir + "/libnvidia-ml.so.1";
  // 8192 bytes: the ELF and program headers are whole; the text segment runs past the end.
  ASSERT_TRUE(truncated_copy(NVML_STANDIN, lib, 8192));
  auto r = run({gpuscope_bin(), "bridge", "--nvml", lib, "--pin-dir", d.path}, {f.env()}, 20);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.rfind(fmt::format("gpuscope: NVML not available: {} is truncated: segment ", lib), 0), 0u) << r.err;
  EXPECT_NE(r.err.find(", the file has 8192\n"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(d.entries(), 0);
  // A bare name is checked too, in the file the loader would find (LD_LIBRARY_PATH here).
  r = run({gpuscope_bin(), "bridge", "--nvml", "libnvidia-ml.so.1", "--pin-dir", d.path},
          {f.env(), "LD_LIBRARY_PATH=" + dir}, 20);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.rfind(fmt::format("gpuscope: NVML not available: {} is truncated: segment ", lib), 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(d.entries(), 0);
  // Cut inside the program headers, and inside the ELF header.
  for (size_t n : {size_t{70}, size_t{20}}) {
    ASSERT_TRUE(truncated_copy(NVML_STANDIN, lib, n));
    r = run({gpuscope_bin(), "bridge", "--nvml", lib, "--pin-dir", d.path}, {f.env()}, 20);
    EXPECT_EQ(r.exit_code, 2) << n << ": " << r.err;
    EXPECT_EQ(r.err.rfind(fmt::format("gpuscope: NVML not available: {} is ", lib), 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(d.entries(), 0);
  }
  fs::remove_all(dir);
}
