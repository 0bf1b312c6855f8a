// gpuscope uvm. Neither kprobes nor fentry work on the CI machine and there is no nvidia_uvm,
// so what can be checked is that the programs verify as kprobe programs and that the
// command says why it cannot run, exits 2 and leaves the host's BPF state as it was.
#include <unistd.h>

#include <gtest/gtest.h>

#include "harness.h"
#include "uvm.skel.h"
#include "uvm/uvm_collector.h"

using namespace gstest;

TEST(Uvm, KprobeProgramsPassTheVerifier) {
  uvm_bpf* s = uvm_bpf__open();
  ASSERT_NE(s, nullptr);
  bpf_program* kp[] = {s->progs.gs_uvm_replayable, s->progs.gs_uvm_non_replayable, s->progs.gs_uvm_thrashing};
  bpf_program* p;
  bpf_object__for_each_program(p, s->obj) bpf_program__set_autoload(p, false);
  for (auto* k : kp) bpf_program__set_autoload(k, true);
  ASSERT_EQ(uvm_bpf__load(s), 0);
  for (auto* k : kp) {
    EXPECT_EQ(bpf_program__type(k), BPF_PROG_TYPE_KPROBE) << bpf_program__name(k);
    EXPECT_GE(bpf_program__fd(k), 0) << bpf_program__name(k);
  }
  uvm_bpf__destroy(s);
}

TEST(Uvm, KallsymsSuffixes) {
  const std::string text =
      "ffffffffc0a00000 t uvm_parent_gpu_service_replayable_faults.isra.0\t[nvidia_uvm]\n"
      "ffffffffc0a00100 t uvm_parent_gpu_service_non_replayable_fault_buffer_x\t[nvidia_uvm]\n"
      "ffffffffc0a00200 t uvm_parent_gpu_service_non_replayable_fault_buffer\t[nvidia_uvm]\n"
      "ffffffffc0a00300 T uvm_tools_record_thrashing.constprop.0\t[nvidia_uvm]\n";
  using gpuscope::kUvmFunctions;
  using gpuscope::resolve_kallsyms;
  EXPECT_EQ(resolve_kallsyms(text, kUvmFunctions[0]), "uvm_parent_gpu_service_replayable_faults.isra.0");
  EXPECT_EQ(resolve_kallsyms(text, kUvmFunctions[1]), "uvm_parent_gpu_service_non_replayable_fault_buffer")
      << "a longer name is another function";
  EXPECT_EQ(resolve_kallsyms(text, kUvmFunctions[2]), "uvm_tools_record_thrashing.constprop.0");
  EXPECT_EQ(resolve_kallsyms("", kUvmFunctions[2]), "");
}

TEST(Uvm, UnavailableSaysWhyInOneLineAndChangesNothing) {
  if (access("/sys/bus/event_source/devices/kprobe/type", F_OK) == 0) GTEST_SKIP() << "kprobes work on this host";
  BpfLeftovers left;
  auto r = run({gpuscope_bin(), "uvm", "-d", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("gpuscope: uvm unavailable: kprobes: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("CONFIG_KPROBES"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("; fentry: "), std::string::npos) << r.err;
  EXPECT_EQ(left.list(), "");
}

TEST(Uvm, BadInputOneLineExit2) {
  for (std::vector<std::string> a : {std::vector<std::string>{"--bogus"}, {"--interval", "0"}, {"--top", "x"}}) {
    a.insert(a.begin(), {gpuscope_bin(), "uvm"});
    auto r = run(a);
    EXPECT_EQ(r.exit_code, 2) << a.back();
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}
