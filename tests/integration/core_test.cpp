// The shared uprobe core against real processes: a library opened with dlopen is probed for
// every capability before its first calls, and symbols are keyed by file, not by path; whole
// BPF maps read back as they are.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "core/fd.h"
#include "core/map_walk.h"
#include "harness.h"

using namespace gstest;
using gpuscope::Fd;
namespace fs = std::filesystem;

namespace {

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// A gpuscope subcommand in the background, ready once it has said `started` on stderr.
struct Running {
  Process p;
  Running(const std::vector<std::string>& args, const std::string& started) : p(args) {
    EXPECT_TRUE(p.wait_for(started, 30, true)) << p.err();
  }
  std::vector<json> stop() {
    p.signal(SIGINT);
    EXPECT_EQ(p.wait(30), 0) << p.err();
    return parse_lines(p.out());
  }
};

std::vector<json> of(const std::vector<json>& lines, const std::string& type, pid_t pid) {
  std::vector<json> r;
  for (auto& l : lines)
    if (l.value("type", "") == type && l.value("pid", -1) == pid) r.push_back(l);
  return r;
}

}  // namespace

// The workload calls cudaMalloc, cudaLaunchKernel and cudaFree 100 ms after its dlopen:
// sooner than any periodic rescan (400 ms before the core took over) would find the library.
TEST(CoreSession, DlopenedLibraryIsProbedForEveryCapability) {
  const std::string rt = standin_lib_dir() + "/libcudart.so.13";
  Running trace({gpuscope_bin(), "trace", "--json"}, "gpuscope: tracing");
  Running latency({gpuscope_bin(), "latency", "--json", "--per-process", "--api", "cudaMalloc,cudaLaunchKernel"},
                  "gpuscope: timing");
  Running kernels({gpuscope_bin(), "kernels", "--json", "--interval", "0.2"}, "gpuscope: counting");
  Running memleak({gpuscope_bin(), "memleak", "--json", "--interval", "0.2"}, "gpuscope: tracking");

  Process w({STANDIN_DLOPEN, rt, "100", "launch"});
  pid_t pid = ready_pid(w);
  ASSERT_EQ(w.wait(20), 0) << w.err();
  sleep_s(0.6);  // the exit rows of kernels and memleak

  auto t = trace.stop();
  auto m = select(t, pid, "cudaMalloc", "enter");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0]["size"], 777);
  EXPECT_EQ(select(t, pid, "cudaLaunchKernel", "exit").size(), 1u);

  auto l = of(latency.stop(), "latency", pid);
  std::map<std::string, uint64_t> counts;
  for (auto& row : l) counts[row["api"]] += row["count"].get<uint64_t>();
  EXPECT_EQ(counts["cudaMalloc"], 1u) << testing::PrintToString(l);
  EXPECT_EQ(counts["cudaLaunchKernel"], 1u) << testing::PrintToString(l);

  auto k = of(kernels.stop(), "kernel", pid);
  bool named = false;
  for (auto& row : k)
    if (row.value("exited", false)) {
      EXPECT_EQ(row["kernel"], "dlopen_probe_kernel");
      EXPECT_EQ(row["launches"], 1);
      named = true;
    }
  EXPECT_TRUE(named) << testing::PrintToString(k);

  auto s = of(memleak.stop(), "summary", pid);
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s.back()["state"], "exited");
  EXPECT_EQ(s.back()["allocs_ok"], 1);
  EXPECT_EQ(s.back()["frees_ok"], 1);
  EXPECT_EQ(s.back()["outstanding_allocs"], 0);
}

// Two containers hold different libraries at one path (/tmp/gs-kns-PID/libbeta.so in two
// private mounts): each process's kernels are named from its own file.
TEST(CoreSymbols, SamePathDifferentLibrariesInTwoMountNamespaces) {
  const std::string dir = "/tmp/gs-kns-" + std::to_string(getpid());
  fs::create_directories(dir);
  const std::string app = std::string(KERNELS_FIXTURE_DIR) + "/shared/kernels_app";
  Running kernels({gpuscope_bin(), "kernels", "--json", "--interval", "0.2"}, "gpuscope: counting");
  auto start = [&](const std::string& lib) {
    std::string script = "mount -t tmpfs none " + dir + " && cp " + lib + " " + dir +
                         "/libbeta.so && LD_LIBRARY_PATH=" + dir + " exec " + app + " wait";
    return std::make_unique<Process>(
        std::vector<std::string>{"unshare", "-m", "--propagation", "private", "sh", "-c", script});
  };
  auto a = start(std::string(KERNELS_FIXTURE_DIR) + "/shared/libbeta.so");
  auto b = start(std::string(KERNELS_FIXTURE_DIR) + "/other/libbeta.so");
  pid_t pa = ready_pid(*a), pb = ready_pid(*b);
  for (auto* w : {a.get(), b.get()}) {
    w->signal(SIGUSR1);
    EXPECT_TRUE(w->wait_for("launched", 20)) << w->err();
  }
  sleep_s(0.6);
  for (auto* w : {a.get(), b.get()}) {
    w->signal(SIGUSR1);
    EXPECT_EQ(w->wait(20), 0) << w->err();
  }
  sleep_s(0.6);
  auto lines = kernels.stop();
  EXPECT_FALSE(fs::exists(dir + "/libbeta.so")) << "the libraries must live only inside their namespaces";
  auto rows = [&](pid_t pid) {
    std::map<std::string, std::pair<uint64_t, std::string>> r;
    for (auto& l : of(lines, "kernel", pid))
      if (l.value("exited", false)) r[l["kernel"]] = {l["launches"].get<uint64_t>(), l["module"].get<std::string>()};
    return r;
  };
  auto ra = rows(pa), rb = rows(pb);
  EXPECT_EQ(ra["void beta_kernel<float>(float*)"], std::make_pair(uint64_t{13}, std::string("libbeta.so")))
      << testing::PrintToString(ra);
  EXPECT_EQ(rb["void gamma_kernel<double>(double*)"], std::make_pair(uint64_t{13}, std::string("libbeta.so")))
      << testing::PrintToString(rb);
  EXPECT_EQ(ra.count("void gamma_kernel<double>(double*)"), 0u);
  EXPECT_EQ(rb.count("void beta_kernel<float>(float*)"), 0u);
  EXPECT_EQ(ra["alpha_kernel(float*)"].first, 37u);
  EXPECT_EQ(rb["alpha_kernel(float*)"].first, 37u);
  fs::remove_all(dir);
}

namespace {
struct BigValue {
  uint64_t w[512];  // 4 KiB: a latency histogram's size class, per CPU
};
}  // namespace

// A whole per-CPU hash map read in batches bounded in bytes (32 entries a batch on 2 CPUs, 4 on
// a 16-CPU host): every entry once, each CPU's value its own.
TEST(CoreMaps, PerCpuHashReadWholeInBoundedBatches) {
  const int ncpus = libbpf_num_possible_cpus();
  ASSERT_GT(ncpus, 0);
  constexpr uint32_t kEntries = 1500;
  Fd fd(
      bpf_map_create(BPF_MAP_TYPE_PERCPU_HASH, "gs_walk_test", sizeof(uint32_t), sizeof(BigValue), kEntries, nullptr));
  ASSERT_TRUE(fd) << strerror(errno);
  std::vector<BigValue> v(static_cast<size_t>(ncpus));
  for (uint32_t k = 0; k < kEntries; k++) {
    for (int c = 0; c < ncpus; c++) v[c].w[0] = v[c].w[511] = k * 1000ull + static_cast<uint64_t>(c);
    ASSERT_EQ(bpf_map_update_elem(fd.get(), &k, v.data(), BPF_NOEXIST), 0) << k << ": " << strerror(errno);
  }
  std::map<uint32_t, int> seen;
  gpuscope::for_each_percpu_entry<uint32_t, BigValue>(fd.get(), [&](uint32_t k, const std::vector<BigValue>& per_cpu) {
    seen[k]++;
    ASSERT_EQ(per_cpu.size(), static_cast<size_t>(ncpus));
    for (int c = 0; c < ncpus; c++) {
      EXPECT_EQ(per_cpu[c].w[0], k * 1000ull + static_cast<uint64_t>(c)) << k << " cpu " << c;
      EXPECT_EQ(per_cpu[c].w[511], k * 1000ull + static_cast<uint64_t>(c)) << k << " cpu " << c;
    }
  });
  EXPECT_EQ(seen.size(), kEntries);
  for (auto& [k, n] : seen) EXPECT_EQ(n, 1) << k;
  // A plain hash of small values: 1,024 a batch, several batches.
  Fd small(bpf_map_create(BPF_MAP_TYPE_HASH, "gs_walk_small", sizeof(uint32_t), sizeof(uint64_t), 5000, nullptr));
  ASSERT_TRUE(small) << strerror(errno);
  for (uint32_t k = 0; k < 5000; k++) {
    uint64_t x = k * 7ull;
    ASSERT_EQ(bpf_map_update_elem(small.get(), &k, &x, BPF_NOEXIST), 0);
  }
  std::map<uint32_t, uint64_t> got;
  gpuscope::for_each_entry<uint32_t, uint64_t>(small.get(), [&](uint32_t k, uint64_t x) { got.emplace(k, x); });
  ASSERT_EQ(got.size(), 5000u);
  for (auto& [k, x] : got) EXPECT_EQ(x, k * 7ull) << k;
}
