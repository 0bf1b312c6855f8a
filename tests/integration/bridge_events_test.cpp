// NVML events through the bridge (issue 44): the stand-in NVML delivers the events a test appends
// to its events file; `gpuscope bridge` prints them and BridgeThread hands them to subscribers.
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>

#include <bpf/bpf.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bridge/bridge.h"
#include "bridge/bridge_maps.h"
#include "bridge/nvml.h"
#include "bridge_fixture.h"
#include "core/clock.h"
#include "harness.h"

using namespace gstest;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

const char* const kDevices = "device 0 util 37 memutil 12\ndevice 1 util 91 memutil 44\n";

// The file the stand-in reads events from; lines are appended whole, as a driver would queue them.
struct EventsFile {
  std::string path;
  EventsFile() {
    static int n = 0;
    path = "/tmp/gstest-nvml-events-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".txt";
    std::ofstream(path).flush();
  }
  ~EventsFile() { unlink(path.c_str()); }
  void append(const std::string& line) const { std::ofstream(path, std::ios::app) << line << '\n'; }
  std::string env() const { return "NVML_STANDIN_EVENTS=" + path; }
};

// What the stand-in itself answers for a device's UUID and PCI bus id, asked through NVML's
// own entry points; the PCI id in the legacy form "%04X:%02X:%02X.0", lower-cased.
struct Identity {
  std::string uuid, pci_bus_id;
};
Identity standin_identity(const StandinFile& f, unsigned index) {
  setenv("NVML_STANDIN_FILE", f.path.c_str(), 1);
  Identity id;
  void* dl = dlopen(NVML_STANDIN, RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(dl, nullptr) << dlerror();
  if (!dl) return id;
  auto init = reinterpret_cast<int (*)()>(dlsym(dl, "nvmlInit_v2"));
  auto handle =
      reinterpret_cast<int (*)(unsigned, gpuscope::nvml::Device*)>(dlsym(dl, "nvmlDeviceGetHandleByIndex_v2"));
  auto uuid = reinterpret_cast<int (*)(gpuscope::nvml::Device, char*, unsigned)>(dlsym(dl, "nvmlDeviceGetUUID"));
  auto pci =
      reinterpret_cast<int (*)(gpuscope::nvml::Device, gpuscope::nvml::PciInfo*)>(dlsym(dl, "nvmlDeviceGetPciInfo_v3"));
  gpuscope::nvml::Device d{};
  char u[96] = {};
  gpuscope::nvml::PciInfo p{};
  EXPECT_EQ(init(), 0);
  EXPECT_EQ(handle(index, &d), 0);
  EXPECT_EQ(uuid(d, u, sizeof u), 0);
  EXPECT_EQ(pci(d, &p), 0);
  id.uuid = u;
  id.pci_bus_id = p.busIdLegacy;
  std::transform(id.pci_bus_id.begin(), id.pci_bus_id.end(), id.pci_bus_id.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  dlclose(dl);
  unsetenv("NVML_STANDIN_FILE");
  return id;
}

std::vector<json> events_of(const std::string& out) {
  std::vector<json> v;
  for (auto& j : parse_lines(out))
    if (j["type"] == "nvml_event") v.push_back(j);
  return v;
}

// Waits until `out()` holds `n` nvml_event lines; how long that took.
template <typename Out>
std::optional<Clock::duration> wait_events(Out out, size_t n, Clock::duration limit) {
  auto start = Clock::now();
  while (Clock::now() - start < limit) {
    if (events_of(out()).size() >= n) return Clock::now() - start;
    std::this_thread::sleep_for(5ms);
  }
  return std::nullopt;
}

std::vector<std::string> bridge_argv(const PinDir& d, std::vector<std::string> extra) {
  std::vector<std::string> v{gpuscope_bin(), "bridge", "--nvml", NVML_STANDIN, "--pin-dir", d.path};
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}

std::vector<std::string> lines_with(const std::string& text, const std::string& needle) {
  std::vector<std::string> v;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos) v.push_back(line);
  return v;
}

gpu_device_metrics device_pin(const PinDir& d, uint32_t index) {
  gpu_device_metrics m{};
  int fd = bpf_obj_get(d.pin(GPU_PIN_DEVICE).c_str());
  EXPECT_GE(fd, 0);
  EXPECT_EQ(bpf_map_lookup_elem(fd, &index, &m), 0);
  close(fd);
  return m;
}

uint64_t last_update(const PinDir& d) {
  gpu_meta m{};
  uint32_t zero = 0;
  int fd = bpf_obj_get(d.pin(GPU_PIN_META).c_str());
  EXPECT_GE(fd, 0);
  EXPECT_EQ(bpf_map_lookup_elem(fd, &zero, &m), 0);
  close(fd);
  return m.last_update_boottime_ns;
}

}  // namespace

TEST(BridgeEvents, XidIsPrintedOnceWithTheDevicesUuidAndPciBusIdWithinTwoSeconds) {
  PinDir d;
  StandinFile f;
  f.write(kDevices);
  EventsFile ev;
  Identity dev0 = standin_identity(f, 0), dev1 = standin_identity(f, 1);
  ASSERT_EQ(dev0.pci_bus_id, "0000:3b:00.0");  // the form the kernel log's Xid lines normalize to
  Process p(bridge_argv(d, {"--json"}), {f.env(), ev.env()});
  ASSERT_TRUE(p.wait_for("bridge publishing", 10, true)) << p.err();

  // A single-bit ECC event (corrected, not registered) and a PState change come first: neither
  // reaches the bridge.
  ev.append("1 0x1 0");
  ev.append("0 0x4 0");
  uint64_t before = gpuscope::realtime_ns();
  ev.append("0 8 31");
  auto took = wait_events([&] { return p.out(); }, 1, 2s);
  uint64_t after = gpuscope::realtime_ns();
  ASSERT_TRUE(took) << p.out() << p.err();
  std::this_thread::sleep_for(300ms);  // anything else would have come by now
  auto evs = events_of(p.out());
  ASSERT_EQ(evs.size(), 1u) << p.out();
  json& x = evs[0];
  EXPECT_EQ(x["event"], "xid");
  EXPECT_EQ(x["event_type"], 8);
  EXPECT_EQ(x["xid"], 31);
  EXPECT_EQ(x["data"], 31);
  EXPECT_EQ(x["device"], 0);
  EXPECT_EQ(x["uuid"], dev0.uuid);
  EXPECT_EQ(x["pci_bus_id"], dev0.pci_bus_id);
  EXPECT_EQ(x["gpu_instance_id"], -1);
  EXPECT_EQ(x["compute_instance_id"], -1);
  EXPECT_GE(x["ts_ns"].get<uint64_t>(), before);
  EXPECT_LE(x["ts_ns"].get<uint64_t>(), after);
  EXPECT_EQ(x.size(), 11u) << x.dump();

  // A MIG-attributed double-bit ECC error on device 1: its instances, and no Xid.
  ev.append("1 0x2 0 3 1");
  ASSERT_TRUE(wait_events([&] { return p.out(); }, 2, 2s)) << p.out() << p.err();
  json e = events_of(p.out())[1];
  EXPECT_EQ(e["event"], "ecc_double_bit");
  EXPECT_EQ(e["event_type"], 2);
  EXPECT_TRUE(e["xid"].is_null()) << e.dump();
  EXPECT_EQ(e["data"], 0);
  EXPECT_EQ(e["device"], 1);
  EXPECT_EQ(e["uuid"], dev1.uuid);
  EXPECT_EQ(e["pci_bus_id"], dev1.pci_bus_id);
  EXPECT_EQ(e["gpu_instance_id"], 3);
  EXPECT_EQ(e["compute_instance_id"], 1);

  // SIGINT stops the event thread as well, within its 250 ms wait.
  auto stop = Clock::now();
  p.signal(SIGINT);
  EXPECT_EQ(p.wait(10), 0) << p.err();
  EXPECT_LT(Clock::now() - stop, 1s);
  EXPECT_NE(p.err().find("gpuscope: bridge stopped after "), std::string::npos) << p.err();
  EXPECT_TRUE(lines_with(p.err(), "NVML events").empty()) << p.err();
}

TEST(BridgeEvents, TableModePrintsOneRowPerEvent) {
  PinDir d;
  StandinFile f;
  f.write(kDevices);
  EventsFile ev;
  Identity dev0 = standin_identity(f, 0);
  Process p(bridge_argv(d, {}), {f.env(), ev.env()});
  ASSERT_TRUE(p.wait_for("bridge publishing", 10, true)) << p.err();
  ev.append("0 8 79");
  ASSERT_TRUE(p.wait_for(dev0.uuid, 2)) << p.out() << p.err();
  p.signal(SIGINT);
  ASSERT_EQ(p.wait(10), 0) << p.err();
  std::istringstream out(p.out());
  std::string header, row, more;
  std::getline(out, header);
  std::getline(out, row);
  EXPECT_FALSE(std::getline(out, more)) << p.out();
  EXPECT_EQ(
      header,
      "TIME         GPU PCI          UUID                                     EVENT                      DATA  GI CI");
  // The time is the local clock's; the rest is fixed.
  ASSERT_GT(row.size(), 13u) << row;
  EXPECT_EQ(row.substr(13), fmt::format("  0 {} {:<40} {:<24} {:>6}   - -", dev0.pci_bus_id, dev0.uuid, "xid", 79));
  EXPECT_EQ(row[2], ':');
  EXPECT_EQ(row[8], '.');
}

TEST(BridgeEvents, RegistersOnlyTheCriticalTypesTheDeviceSupports) {
  PinDir d;
  StandinFile f;
  f.write(kDevices);
  EventsFile ev;
  // Single-bit ECC, double-bit ECC, PState, Xid and GPU recovery action. The stand-in refuses a
  // registration that asks for any type beyond these, as NVML does.
  Process p(bridge_argv(d, {"--json", "-v"}), {f.env(), ev.env(), "NVML_STANDIN_EVENT_TYPES=0x800f"});
  ASSERT_TRUE(p.wait_for("bridge publishing", 10, true)) << p.err();
  EXPECT_EQ(
      lines_with(p.err(), "NVML events"),
      (std::vector<std::string>{"gpuscope: device 0: NVML events registered: ecc_double_bit, xid, gpu_recovery_action",
                                "gpuscope: device 1: NVML events registered: ecc_double_bit, xid, "
                                "gpu_recovery_action"}));
  ev.append("0 0x1 0");
  ev.append("1 0x4 0");
  ev.append("1 0x8000 0");
  ASSERT_TRUE(wait_events([&] { return p.out(); }, 1, 2s)) << p.out() << p.err();
  std::this_thread::sleep_for(300ms);
  auto evs = events_of(p.out());
  ASSERT_EQ(evs.size(), 1u) << p.out();
  EXPECT_EQ(evs[0]["event"], "gpu_recovery_action");
  EXPECT_EQ(evs[0]["device"], 1);
  p.signal(SIGINT);
  EXPECT_EQ(p.wait(10), 0) << p.err();
}

TEST(BridgeBadInput, NvmlWithoutEventSupportIsSaidOnceAndUtilizationIsStillPublished) {
  PinDir d;
  StandinFile f;
  f.write(kDevices);
  EventsFile ev;
  Process p(bridge_argv(d, {"--json", "--poll-interval-ms", "50"}),
            {f.env(), ev.env(), "NVML_STANDIN_EVENT_TYPES=ERR"});
  ASSERT_TRUE(p.wait_for("bridge publishing", 10, true)) << p.err();
  ev.append("0 8 31");
  uint64_t first = last_update(d);
  std::this_thread::sleep_for(600ms);
  EXPECT_GT(last_update(d), first);  // still ticking
  gpu_device_metrics m0 = device_pin(d, 0), m1 = device_pin(d, 1);
  EXPECT_EQ(m0.sm_util_pct, 37u);
  EXPECT_EQ(m0.mem_util_pct, 12u);
  EXPECT_EQ(m1.sm_util_pct, 91u);
  EXPECT_EQ(m1.mem_util_pct, 44u);
  p.signal(SIGINT);
  ASSERT_EQ(p.wait(10), 0) << p.err();
  EXPECT_TRUE(events_of(p.out()).empty()) << p.out();
  EXPECT_EQ(lines_with(p.err(), "NVML events"),
            std::vector<std::string>{"gpuscope: NVML events not supported on device 0, 1 (3: Not Supported); Xid, "
                                     "ECC and other critical GPU events from NVML are not reported there"})
      << p.err();
}

// In another process (the agent, starvation): subscribers get each event on the bridge's event
// thread, and destroying the BridgeThread stops that thread promptly.
TEST(BridgeEvents, BridgeThreadHandsEventsToSubscribersAndStopsAtDestruction) {
  PinDir d;
  StandinFile f;
  f.write(kDevices);
  EventsFile ev;
  Identity dev0 = standin_identity(f, 0), dev1 = standin_identity(f, 1);
  setenv("NVML_STANDIN_FILE", f.path.c_str(), 1);
  setenv("NVML_STANDIN_EVENTS", ev.path.c_str(), 1);
  gpuscope::BridgeOptions o;
  o.nvml = NVML_STANDIN;
  o.pin_dir = d.path;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<gpuscope::NvmlEventRecord> got;
  auto t = std::make_unique<gpuscope::BridgeThread>(o);
  t->on_event([&](const gpuscope::NvmlEventRecord& e) {
    std::lock_guard g(mu);
    got.push_back(e);
    cv.notify_all();
  });
  auto ids = t->device_ids();
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0].index, 0u);
  EXPECT_EQ(ids[0].uuid, dev0.uuid);
  EXPECT_EQ(ids[0].pci_bus_id, dev0.pci_bus_id);
  EXPECT_EQ(ids[1].index, 1u);
  EXPECT_EQ(ids[1].uuid, dev1.uuid);
  EXPECT_EQ(ids[1].pci_bus_id, dev1.pci_bus_id);
  uint64_t before = gpuscope::realtime_ns();
  ev.append("1 8 43 2 0");
  {
    std::unique_lock l(mu);
    ASSERT_TRUE(cv.wait_for(l, 2s, [&] { return !got.empty(); }));
  }
  auto stop = Clock::now();
  t.reset();
  EXPECT_LT(Clock::now() - stop, 1s);
  ASSERT_EQ(got.size(), 1u);
  const auto& e = got[0];
  EXPECT_EQ(e.event_type, gpuscope::nvml::kEventXid);
  EXPECT_TRUE(e.is_xid());
  EXPECT_EQ(e.data, 43u);
  EXPECT_EQ(e.device, 1u);
  EXPECT_EQ(e.uuid, dev1.uuid);
  EXPECT_EQ(e.pci_bus_id, dev1.pci_bus_id);
  EXPECT_EQ(e.gpu_instance_id, 2);
  EXPECT_EQ(e.compute_instance_id, 0);
  EXPECT_GE(e.ts_ns, before);
  EXPECT_LE(e.ts_ns, gpuscope::realtime_ns());
  unsetenv("NVML_STANDIN_FILE");
  unsetenv("NVML_STANDIN_EVENTS");
}
