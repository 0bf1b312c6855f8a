// The kernel-log Xid source (src/errors/): the driver's line formats, the Xid catalogue, and the
// /dev/kmsg reader's lost-record counting, restart state and replay of saved logs. The EPIPE
// cases go through a fake source (KmsgSource): overwriting the reader's next record in the real
// /dev/kmsg would take flooding the whole kernel log. The real /dev/kmsg is read too, with a line
// this test writes into it (as root).
#include "errors/kmsg_reader.h"
#include "errors/xid.h"
#include "errors/xid_catalog.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

using namespace gpuscope;

namespace {

XidEvent parse_ok(std::string_view record) {
  auto e = parse_xid_record(record);
  EXPECT_TRUE(e.has_value()) << record;
  return e.value_or(XidEvent{});
}

}  // namespace

TEST(XidParse, MmuFault31WithPidNameAndDictionary) {
  auto e = parse_ok(
      "3,1523,6085126134786,-;NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=python3, Ch 00000008, intr 10000000. "
      "MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 faulted @ 0x7f12_34560000. Fault is of type FAULT_PDE "
      "ACCESS_TYPE_VIRT_READ\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n");
  EXPECT_EQ(e.seq, 1523u);
  EXPECT_EQ(e.ts_boot_us, 6085126134786u);
  EXPECT_EQ(e.pci_bus_id, "0000:3b:00.0");
  EXPECT_EQ(e.xid, 31);
  ASSERT_TRUE(e.pid.has_value());
  EXPECT_EQ(*e.pid, 1234);
  EXPECT_EQ(e.comm, "python3");
  EXPECT_EQ(e.message,
            "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 faulted @ 0x7f12_34560000. "
            "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ");
  EXPECT_EQ(e.gpu_instance, -1);
  EXPECT_EQ(e.compute_instance, -1);
  EXPECT_FALSE(e.injected) << "priority 3 is facility kern";

  auto r = parse_kmsg_record("3,1523,6085126134786,-;NVRM: x\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->priority, 3);
  EXPECT_EQ(r->message, "NVRM: x");
  EXPECT_EQ(r->device, "+pci:0000:3b:00.0");
  EXPECT_FALSE(r->continuation);
}

TEST(XidParse, GraphicsException13OfOlderDrivers) {
  auto e = parse_ok(
      "4,77,1200,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=2345, name=a.out, Graphics SM Warp Exception on (GPC 0, "
      "TPC 0, SM 0): Out Of Range Address");
  EXPECT_EQ(e.seq, 77u);
  EXPECT_EQ(e.ts_boot_us, 1200u);
  EXPECT_EQ(e.pci_bus_id, "0000:3b:00.0");
  EXPECT_EQ(e.xid, 13);
  EXPECT_EQ(e.pid, 2345);
  EXPECT_EQ(e.comm, "a.out");
  EXPECT_EQ(e.message, "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address");
}

TEST(XidParse, UnknownProcessHasNoPid) {
  auto e =
      parse_ok("3,9,10,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.");
  EXPECT_EQ(e.xid, 79);
  EXPECT_FALSE(e.pid.has_value());
  EXPECT_EQ(e.comm, "");
  EXPECT_EQ(e.message, "GPU has fallen off the bus.");

  e = parse_ok("3,9,10,-;NVRM: Xid (PCI:0000:3b:00): 43, pid=-1, name=<unknown>, Ch 00000010");
  EXPECT_EQ(e.xid, 43);
  EXPECT_FALSE(e.pid.has_value());
  EXPECT_EQ(e.message, "Ch 00000010");

  // The GPU-lost path prints neither (open-gpu-kernel-modules issue 1151), nor do older drivers.
  e = parse_ok("3,9,10,-;NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.");
  EXPECT_EQ(e.pci_bus_id, "0000:2b:00.0");
  EXPECT_EQ(e.xid, 79);
  EXPECT_FALSE(e.pid.has_value());
  EXPECT_EQ(e.comm, "");
  EXPECT_EQ(e.message, "GPU has fallen off the bus.");
  e = parse_ok(
      "3,9,10,-;NVRM: Xid (PCI:0000:08:00): 31, Ch 0000003b, intr 10000000. MMU Fault: ENGINE GRAPHICS "
      "HUBCLIENT_SCC faulted @ 0x0_04687000. Fault is of type FAULT_PDE ACCESS_TYPE_READ");
  EXPECT_EQ(e.xid, 31);
  EXPECT_FALSE(e.pid.has_value());
  EXPECT_EQ(e.message.substr(0, 28), "Ch 0000003b, intr 10000000. ");
}

TEST(XidParse, DoubleBitError48) {
  auto e = parse_ok(
      "3,40,50,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=91237, name=nv-hostengine, An uncorrectable double bit error "
      "(DBE) has been detected on GPU in the framebuffer at physical address 0x7fdf0de80");
  EXPECT_EQ(e.xid, 48);
  EXPECT_EQ(e.pid, 91237);
  EXPECT_EQ(e.comm, "nv-hostengine");
  EXPECT_EQ(e.message,
            "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physical "
            "address 0x7fdf0de80");
}

TEST(XidParse, ContextSwitchTimeoutAndContainedErrors) {
  auto e = parse_ok(
      "3,41,51,-;NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX "
      "SWITCH TIMEOUT, Info 0x58005");
  EXPECT_EQ(e.pci_bus_id, "0000:cb:00.0");
  EXPECT_EQ(e.xid, 109);
  EXPECT_EQ(e.pid, 1797828);
  EXPECT_EQ(e.comm, "pt_main_thread");
  EXPECT_EQ(e.message, "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005");

  e = parse_ok("3,42,52,-;NVRM: Xid (PCI:0000:3b:00): 94, pid=789012, name=process, Contained ECC error.");
  EXPECT_EQ(e.xid, 94);
  EXPECT_EQ(e.pid, 789012);
  EXPECT_EQ(e.comm, "process");
  EXPECT_EQ(e.message, "Contained ECC error.");

  // Xid 94/95 as kernel_rc.c's comment shows them: a pid, no name, MIG attribution.
  e = parse_ok(
      "3,43,53,-;NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, "
      "D-RST: No");
  EXPECT_EQ(e.pci_bus_id, "0000:01:00.0");
  EXPECT_EQ(e.gpu_instance, 5);
  EXPECT_EQ(e.compute_instance, -1);
  EXPECT_EQ(e.pid, 7194);
  EXPECT_EQ(e.comm, "");
  EXPECT_EQ(e.message, "Contained: CE User Channel (0x9). RST: No, D-RST: No");
  e = parse_ok("3,44,54,-;NVRM: Xid (PCI:0000:01:00 GPU-I:02 GPU-CI:01): 95, pid=7062, Uncontained: LTC TAG");
  EXPECT_EQ(e.xid, 95);
  EXPECT_EQ(e.gpu_instance, 2);
  EXPECT_EQ(e.compute_instance, 1);
  EXPECT_EQ(e.message, "Uncontained: LTC TAG");
}

TEST(XidParse, GspTimeout119) {
  auto e = parse_ok(
      "3,45,55,-;NVRM: Xid (PCI:0000:3b:00): 119, pid=1582259, name=nvc:[driver], Timeout after 6s of waiting for "
      "RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8).");
  EXPECT_EQ(e.xid, 119);
  EXPECT_EQ(e.pid, 1582259);
  EXPECT_EQ(e.comm, "nvc:[driver]");
  EXPECT_EQ(e.message,
            "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) "
            "(0x20802a02 0x8).");
  e = parse_ok("3,46,56,-;NVRM: Xid (PCI:0000:3b:00): 120, pid=5, name=nvidia-smi, GSP task exception");
  EXPECT_EQ(e.xid, 120);
  EXPECT_EQ(e.comm, "nvidia-smi");
}

TEST(XidParse, PciBusIds) {
  EXPECT_EQ(normalize_pci_bus_id("0000:3B:00"), "0000:3b:00.0");
  EXPECT_EQ(normalize_pci_bus_id("0000:3b:00.1"), "0000:3b:00.1");
  EXPECT_EQ(normalize_pci_bus_id("3b:00"), "0000:3b:00.0");
  EXPECT_EQ(normalize_pci_bus_id("10000:01:00"), "10000:01:00.0") << "VMD domains have five digits";
  EXPECT_EQ(normalize_pci_bus_id("1:01:00"), "0001:01:00.0");
  for (const char* bad : {"", "3b", "0000:3b:0", "0000:3b:00.8", "0000:3b:00.", "0:0:3b:00", "zz:00", "0000:3b:00 "})
    EXPECT_EQ(normalize_pci_bus_id(bad), "") << bad;
  // NVIDIA's Xid document's example has no "PCI:".
  auto e = parse_xid_message("NVRM: Xid (0000:03:00): 14, Channel 00000001");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->pci_bus_id, "0000:03:00.0");
  EXPECT_EQ(e->xid, 14);
  EXPECT_EQ(e->message, "Channel 00000001");
}

TEST(XidParse, JunkIsRefusedAndKeptBounded) {
  for (const char* junk : {"", ";", "3,1,2;NVRM: Xid (PCI:0000:3b:00): 31, x", "a,1,2,-;NVRM: Xid (PCI:0000:3b:00): 1",
                           "3,1,2,-;NVRM: Xid", "3,1,2,-;NVRM: Xid (PCI:0000:3b:00)", "3,1,2,-;NVRM: Xid (PCI:zz): 31",
                           "3,1,2,-;NVRM: Xid (PCI:0000:3b:00): , pid=1", "3,1,2,-;NVRM: Xid (PCI:0000:3b:00): 1234567",
                           "3,1,2,-;NVRM: Xid (PCI:0000:3b:00): 31x", "3,1,2,-;NVRM: Xid (PCI:0000:3b:00: 31",
                           "3,1,2,-;nvidia: NVRM: Xid (PCI:0000:3b:00): 31, x",
                           "3,99999999999999999999999,2,-;NVRM: Xid (PCI:0000:3b:00): 31, x"})
    EXPECT_FALSE(parse_xid_record(junk).has_value()) << junk;

  std::string huge = "3,1,2,-;NVRM: Xid (PCI:0000:3b:00): 31, pid=99999999999, name=" + std::string(500, 'n') + ", " +
                     std::string(5000, 'm');
  auto e = parse_ok(huge);
  EXPECT_FALSE(e.pid.has_value()) << "beyond any pid";
  EXPECT_EQ(e.comm, std::string(kXidCommMax, 'n'));
  EXPECT_EQ(e.message, std::string(kXidMessageMax, 'm'));

  e = parse_ok(std::string("3,1,2,-;NVRM: Xid (PCI:0000:3b:00): 31, pid=7, name=a\tb, x\x1b[2Jy\x7f"));
  EXPECT_EQ(e.comm, "a\\x09b");
  EXPECT_EQ(e.message, "x\\x1b[2Jy\\x7f");
  // A cut never leaves half a UTF-8 character.
  std::string utf8(kXidMessageMax - 1, 'm');
  utf8 += "\xc3\xa9";
  e = parse_ok("3,1,2,-;NVRM: Xid (PCI:0000:3b:00): 31, " + utf8);
  EXPECT_EQ(e.message, std::string(kXidMessageMax - 1, 'm'));
}

TEST(XidParse, InjectedRecordsAreMarked) {
  // Written by a process with "<3>": the kernel gives it facility user (8 + 3).
  auto e = parse_ok("11,5,6,-;NVRM: Xid (PCI:0000:99:00): 31, pid=42, name=gstest, test");
  EXPECT_TRUE(e.injected);
  EXPECT_EQ(e.message, "test");
}

TEST(XidParse, SavedLogLines) {
  auto e = parse_xid_line("[ 5107.644336] NVRM: Xid (PCI:0000:03:00): 79, GPU has fallen off the bus.");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->ts_boot_us, 5107644336u);
  EXPECT_EQ(e->seq, 0u);
  EXPECT_EQ(e->xid, 79);
  e = parse_xid_line("<3>[12345.6] NVRM: Xid (PCI:0000:03:00): 13, pid=3, name=x, y");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->ts_boot_us, 12345600000u);
  e = parse_xid_line(
      "May 18 19:02:39 host kernel: NVRM: Xid (PCI:0000:2b:00): 79, pid=1, name=Xorg, GPU has fallen off the bus.");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->ts_boot_us, 0u);
  EXPECT_EQ(e->pid, 1);
  EXPECT_EQ(e->comm, "Xorg");
  e = parse_xid_line("6,10,20,-;NVRM: Xid (PCI:0000:2b:00): 8, pid=1, name=x, y");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->seq, 10u);
  EXPECT_EQ(e->ts_boot_us, 20u);
  EXPECT_FALSE(parse_xid_line("6,10,20,-;usb 1-1: new device").has_value());
  EXPECT_FALSE(parse_xid_line("[ 1.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.65.06").has_value());
}

TEST(XidCatalog, EntriesOfTheCatalogue) {
  struct Want {
    int xid;
    XidClass cls;
    XidAction action;
  };
  const Want wants[] = {
      {8, XidClass::kApplication, XidAction::kRestartApp},
      {13, XidClass::kApplication, XidAction::kRestartApp},
      {31, XidClass::kApplication, XidAction::kRestartApp},
      {32, XidClass::kHardware, XidAction::kRestartApp},
      {38, XidClass::kDriver, XidAction::kNone},
      {43, XidClass::kApplication, XidAction::kNone},
      {45, XidClass::kOther, XidAction::kNone},
      {48, XidClass::kHardware, XidAction::kResetGpu},
      {54, XidClass::kThermalPower, XidAction::kDrainNode},
      {61, XidClass::kDriver, XidAction::kResetGpu},
      {62, XidClass::kDriver, XidAction::kResetGpu},
      {63, XidClass::kHardware, XidAction::kNone},
      {64, XidClass::kHardware, XidAction::kResetGpu},
      {68, XidClass::kApplication, XidAction::kRestartApp},
      {69, XidClass::kApplication, XidAction::kRestartApp},
      {74, XidClass::kHardware, XidAction::kResetGpu},
      {79, XidClass::kHardware, XidAction::kDrainNode},
      {92, XidClass::kHardware, XidAction::kNone},
      {94, XidClass::kHardware, XidAction::kRestartApp},
      {95, XidClass::kHardware, XidAction::kResetGpu},
      {109, XidClass::kDriver, XidAction::kResetGpu},
      {119, XidClass::kDriver, XidAction::kResetGpu},
      {120, XidClass::kDriver, XidAction::kResetGpu},
      {121, XidClass::kHardware, XidAction::kNone},
      {140, XidClass::kHardware, XidAction::kResetGpu},
      {143, XidClass::kHardware, XidAction::kResetGpu},
      {164, XidClass::kThermalPower, XidAction::kNone},
  };
  for (const Want& w : wants) {
    XidInfo i = xid_info(w.xid);
    EXPECT_EQ(i.xid, w.xid);
    EXPECT_NE(std::string(i.meaning), "unknown Xid") << w.xid;
    EXPECT_EQ(i.cls, w.cls) << w.xid;
    EXPECT_EQ(i.action, w.action) << w.xid;
  }
  for (int x = 144; x <= 150; x++) {
    EXPECT_EQ(xid_info(x).cls, XidClass::kHardware) << x;
    EXPECT_EQ(xid_info(x).action, XidAction::kResetGpu) << x;
  }
  EXPECT_EQ(std::string(xid_info(79).meaning), "GPU has fallen off the bus: not reachable over PCIe");
  for (int unknown : {0, 1, 9, 47, 999, -5}) {
    XidInfo i = xid_info(unknown);
    EXPECT_EQ(i.xid, unknown);
    EXPECT_EQ(std::string(i.meaning), "unknown Xid");
    EXPECT_EQ(i.cls, XidClass::kOther);
    EXPECT_EQ(i.action, XidAction::kSeeCatalog);
  }
  EXPECT_STREQ(xid_class_name(XidClass::kApplication), "application");
  EXPECT_STREQ(xid_class_name(XidClass::kThermalPower), "thermal_power");
  EXPECT_STREQ(xid_class_name(XidClass::kOther), "other");
  EXPECT_STREQ(xid_action_name(XidAction::kDrainNode), "drain_node");
  EXPECT_STREQ(xid_action_name(XidAction::kSeeCatalog), "see_catalog");
  EXPECT_STREQ(xid_action_text(XidAction::kRestartApp), "restart the application");
  EXPECT_STREQ(xid_action_text(XidAction::kSeeCatalog), "see NVIDIA's Xid catalogue");
  for (const XidInfo& i : xid_catalog()) {
    XidInfo found = xid_info(i.xid);
    EXPECT_STREQ(found.meaning, i.meaning) << i.xid;
    EXPECT_EQ(found.cls, i.cls) << i.xid;
    EXPECT_EQ(found.action, i.action) << i.xid;
  }
  EXPECT_EQ(xid_catalog().size(), 94u);
}

namespace {

// Records and read errors in the order /dev/kmsg would give them; EAGAIN once they run out.
class FakeKmsg : public KmsgSource {
 public:
  struct Item {
    Item(std::string r) : record(std::move(r)) {}
    Item(int e) : err(e) {}
    std::string record;
    int err = 0;  // an errno instead of a record
  };
  explicit FakeKmsg(std::vector<Item>* items) : items_(items) {}
  ssize_t read_record(char* buf, size_t size) override {
    if (at_ >= items_->size()) return -EAGAIN;
    const Item& it = (*items_)[at_++];
    if (it.err) return -it.err;
    const std::string& rec = it.record;
    size_t n = std::min(size, rec.size());
    memcpy(buf, rec.data(), n);
    return static_cast<ssize_t>(n);
  }
  bool rewind() override {
    at_ = 0;
    rewinds++;
    return true;
  }
  int rewinds = 0;

 private:
  std::vector<Item>* items_;
  size_t at_ = 0;
};

std::string xid_rec(uint64_t seq, int xid, int pid = 100) {
  return std::to_string(3) + "," + std::to_string(seq) + "," + std::to_string(seq * 1000) +
         ",-;NVRM: Xid (PCI:0000:3b:00): " + std::to_string(xid) + ", pid=" + std::to_string(pid) +
         ", name=app, text " + std::to_string(seq) + "\n";
}
std::string other_rec(uint64_t seq) { return "6," + std::to_string(seq) + ",1,-;usb 1-1: something\n"; }

std::string temp_path(const char* name) {
  auto dir = std::filesystem::temp_directory_path() / ("gs_xid_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

}  // namespace

TEST(KmsgReader, SequenceGapsAndEpipeAreCounted) {
  std::vector<FakeKmsg::Item> items = {other_rec(10), xid_rec(11, 31), other_rec(12),
                                       EPIPE,         xid_rec(20, 13), other_rec(21)};
  auto* src = new FakeKmsg(&items);
  KmsgReader r(std::unique_ptr<KmsgSource>(src), "", "boot");
  auto ev = r.poll();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].seq, 11u);
  EXPECT_EQ(ev[0].xid, 31);
  EXPECT_EQ(ev[0].message, "text 11");
  EXPECT_EQ(ev[1].seq, 20u);
  EXPECT_EQ(ev[1].xid, 13);
  EXPECT_EQ(r.stats().records, 5u);
  EXPECT_EQ(r.stats().xids, 2u);
  EXPECT_EQ(r.stats().overruns, 1u);
  EXPECT_EQ(r.stats().lost, 7u) << "13..19 were overwritten";
  EXPECT_EQ(r.stats().skipped, 0u);
  EXPECT_EQ(r.last_seq(), 21u);
  EXPECT_EQ(r.read_error(), "");
  EXPECT_FALSE(r.at_end());

  // Later records continue the count; a gap without EPIPE (records lost before the first read
  // after a wake-up) is counted too.
  items.push_back(other_rec(22));
  items.push_back(xid_rec(25, 79));
  ev = r.poll();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].xid, 79);
  EXPECT_EQ(r.stats().lost, 9u);
  EXPECT_EQ(r.stats().overruns, 1u);
  EXPECT_EQ(src->rewinds, 0);
  // Records that do not parse are counted as read and give nothing; a read error stops the poll.
  items.push_back(std::string("garbage"));
  items.push_back(EIO);
  items.push_back(xid_rec(26, 31));
  EXPECT_TRUE(r.poll().empty());
  EXPECT_EQ(r.read_error(), "Input/output error");
  EXPECT_EQ(r.stats().records, 8u);
  ASSERT_EQ(r.poll().size(), 1u);
  EXPECT_EQ(r.read_error(), "");
}

TEST(KmsgReader, StateFileSkipsWhatWasReported) {
  std::string state = temp_path("skip.seq");
  std::filesystem::remove(state);
  std::vector<FakeKmsg::Item> items = {other_rec(1), xid_rec(2, 31), other_rec(3), xid_rec(4, 48)};
  {
    KmsgReader r(std::make_unique<FakeKmsg>(&items), state, "boot-a");
    ASSERT_EQ(r.poll().size(), 2u);
    EXPECT_EQ(r.state_error(), "");
  }
  std::ifstream f(state);
  std::string saved((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(saved, "boot-a 4\n");

  // A restart in the same boot: the kernel still holds 1..4, and 5..7 came meanwhile; 5 was
  // overwritten before the restart.
  items.push_back(xid_rec(6, 13));
  items.push_back(other_rec(7));
  items.erase(items.begin());  // the oldest rotated out
  KmsgReader r(std::make_unique<FakeKmsg>(&items), state, "boot-a");
  auto ev = r.poll();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].seq, 6u);
  EXPECT_EQ(ev[0].xid, 13);
  EXPECT_EQ(r.stats().skipped, 3u);
  EXPECT_EQ(r.stats().lost, 1u);
  EXPECT_FALSE(r.stats().restarted);
  std::ifstream g(state);
  saved.assign((std::istreambuf_iterator<char>(g)), std::istreambuf_iterator<char>());
  EXPECT_EQ(saved, "boot-a 7\n") << "saved after a poll with Xid events";
}

TEST(KmsgReader, StateOfAnEarlierBootStartsOver) {
  std::string state = temp_path("reboot.seq");
  { std::ofstream(state) << "boot-a 5000\n"; }
  std::vector<FakeKmsg::Item> items = {other_rec(1), xid_rec(2, 79)};
  // Told by the boot id.
  KmsgReader by_id(std::make_unique<FakeKmsg>(&items), state, "boot-b");
  EXPECT_TRUE(by_id.stats().restarted);
  auto ev = by_id.poll();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].seq, 2u);
  EXPECT_EQ(by_id.stats().skipped, 0u);
  EXPECT_EQ(by_id.stats().lost, 0u);

  // Told by the numbers alone (a state file of the same id, the buffer's newest record below it):
  // everything is read again from the oldest record.
  { std::ofstream(state) << "boot-c 5000\n"; }
  auto* src = new FakeKmsg(&items);
  KmsgReader by_seq(std::unique_ptr<KmsgSource>(src), state, "boot-c");
  EXPECT_FALSE(by_seq.stats().restarted);
  ev = by_seq.poll();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].seq, 2u);
  EXPECT_EQ(ev[0].xid, 79);
  EXPECT_TRUE(by_seq.stats().restarted);
  EXPECT_EQ(by_seq.stats().skipped, 0u);
  EXPECT_EQ(by_seq.stats().records, 2u);
  EXPECT_EQ(src->rewinds, 1);
  std::ifstream f(state);
  std::string saved((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(saved, "boot-c 2\n");

  // An unreadable or foreign state file is ignored, not trusted.
  { std::ofstream(state) << "nonsense"; }
  KmsgReader junk(std::make_unique<FakeKmsg>(&items), state, "boot-c");
  EXPECT_FALSE(junk.last_seq().has_value());
  EXPECT_EQ(junk.poll().size(), 1u);
}

TEST(KmsgReader, ReplaysASavedLogOfMixedFormats) {
  std::string log = temp_path("saved.log");
  std::string state = temp_path("replay.seq");
  std::filesystem::remove(state);
  {
    std::ofstream f(log);
    f << "3,100,5000000,-;NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=python3, Ch 00000008, MMU Fault\n"
      << " SUBSYSTEM=pci\n"
      << " DEVICE=+pci:0000:3b:00.0\n"
      << "6,101,5000100,-;usb 1-1: new high-speed USB device\n"
      << "[ 5107.644336] NVRM: Xid (PCI:0000:03:00): 79, GPU has fallen off the bus.\n"
      << "\n"
      << std::string(20000, 'x') << " NVRM: Xid (PCI:0000:03:00): 13, cut away\n"
      << "May 18 19:02:39 host kernel: NVRM: Xid (PCI:0000:2b:00): 48, pid=9, name=a, DBE\n"
      << "3,104,5000400,-;NVRM: Xid (PCI:0000:3b:00): 94, pid=1234, name=python3, Contained ECC error.";
  }
  std::string err;
  auto r = KmsgReader::open({.path = log, .state_path = state}, &err);
  ASSERT_NE(r, nullptr) << err;
  EXPECT_GE(r->fd(), 0);
  auto ev = r->poll();
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].seq, 100u);
  EXPECT_EQ(ev[0].ts_boot_us, 5000000u);
  EXPECT_EQ(ev[0].xid, 31);
  EXPECT_EQ(ev[0].pid, 1234);
  EXPECT_EQ(ev[0].message, "Ch 00000008, MMU Fault");
  EXPECT_EQ(ev[1].seq, 0u);
  EXPECT_EQ(ev[1].ts_boot_us, 5107644336u);
  EXPECT_EQ(ev[1].xid, 79);
  EXPECT_EQ(ev[1].pci_bus_id, "0000:03:00.0");
  EXPECT_EQ(ev[2].xid, 48);
  EXPECT_EQ(ev[2].comm, "a");
  EXPECT_EQ(ev[3].seq, 104u);
  EXPECT_EQ(ev[3].xid, 94);
  EXPECT_EQ(ev[3].message, "Contained ECC error.") << "the last line has no newline";
  EXPECT_TRUE(r->at_end());
  EXPECT_EQ(r->stats().lost, 2u) << "102 and 103 are missing from the saved log";

  // Appended lines are read by the next poll; a replay again with the state skips what was seen.
  { std::ofstream(log, std::ios::app) << "\n3,105,5000500,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=b, c\n"; }
  ev = r->poll();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].seq, 105u);
  auto again = KmsgReader::open({.path = log, .state_path = state}, &err);
  ASSERT_NE(again, nullptr) << err;
  ev = again->poll();
  ASSERT_EQ(ev.size(), 2u) << "the dmesg lines carry no sequence number to skip by";
  EXPECT_EQ(ev[0].xid, 79);
  EXPECT_EQ(ev[1].xid, 48);
  EXPECT_EQ(again->stats().skipped, 4u);
}

TEST(KmsgReader, AnUnreadableSourceSaysWhy) {
  std::string err;
  EXPECT_EQ(KmsgReader::open({.path = "/nonexistent/kmsg"}, &err), nullptr);
  EXPECT_EQ(err, "cannot read /nonexistent/kmsg: No such file or directory");
  EXPECT_EQ(KmsgReader::open({.path = "/tmp"}, &err), nullptr);
  EXPECT_EQ(err, "cannot read /tmp: not the kernel log or a file");
  // A state file where none can be written: the events still come, the error is kept.
  std::vector<FakeKmsg::Item> items = {xid_rec(1, 31)};
  KmsgReader r(std::make_unique<FakeKmsg>(&items), "/proc/version/kmsg.seq", "b");
  EXPECT_EQ(r.poll().size(), 1u);
  EXPECT_NE(r.state_error(), "");
}

namespace {

// With its newline: the kernel keeps a record without one open (for a continuation), and readers
// see it only when the next record comes.
void write_kmsg(std::string line) {
  line += '\n';
  int fd = open("/dev/kmsg", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size())) << strerror(errno);
  close(fd);
}

// Our own line among whatever else the machine logs meanwhile.
std::vector<XidEvent> ours(KmsgReader& r, const std::string& tag) {
  std::vector<XidEvent> found;
  for (int i = 0; i < 50 && found.empty(); i++) {
    for (auto& e : r.poll())
      if (e.comm == "gstest" && e.message == tag) found.push_back(e);
    if (found.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return found;
}

}  // namespace

TEST(KmsgReader, ReadsTheRealKernelLog) {
  ASSERT_EQ(geteuid(), 0u) << "writes to /dev/kmsg";
  std::string state = temp_path("real.seq");
  std::filesystem::remove(state);
  std::string err;
  auto r = KmsgReader::open({.state_path = state}, &err);
  ASSERT_NE(r, nullptr) << err;
  EXPECT_GE(r->fd(), 0);
  std::string tag = "test " + std::to_string(getpid());
  write_kmsg("<3>NVRM: Xid (PCI:0000:99:00): 31, pid=" + std::to_string(getpid()) + ", name=gstest, " + tag);
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  auto found = ours(*r, tag);
  ASSERT_EQ(found.size(), 1u) << r->stats().records << " records read; " << r->read_error();
  const XidEvent e = found[0];
  EXPECT_EQ(e.pci_bus_id, "0000:99:00.0");
  EXPECT_EQ(e.xid, 31);
  EXPECT_EQ(e.pid, getpid());
  EXPECT_TRUE(e.injected);
  EXPECT_GT(e.seq, 0u);
  EXPECT_EQ(r->last_seq().value_or(0) >= e.seq, true);
  // The kernel log's clock is the monotonic one (local_clock), in microseconds.
  double now_us = now.tv_sec * 1e6 + now.tv_nsec / 1e3;
  EXPECT_NEAR(static_cast<double>(e.ts_boot_us), now_us, 5e6);

  // A second reader on the same state (a restart) does not report it again, but the next one.
  auto again = KmsgReader::open({.state_path = state}, &err);
  ASSERT_NE(again, nullptr) << err;
  EXPECT_TRUE(ours(*again, tag).empty());
  EXPECT_GE(again->stats().skipped, 1u);
  EXPECT_FALSE(again->stats().restarted);
  std::string tag2 = tag + " again";
  write_kmsg("<3>NVRM: Xid (PCI:0000:99:00): 13, pid=" + std::to_string(getpid()) + ", name=gstest, " + tag2);
  found = ours(*again, tag2);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].xid, 13);
  EXPECT_GT(found[0].seq, e.seq);
  std::filesystem::remove_all(std::filesystem::path(state).parent_path());
}
