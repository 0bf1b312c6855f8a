#include <bpf/bpf.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include "core/bpf.h"
#include "core/map_walk.h"
#include "core/output.h"
#include "core/system.h"
#include "uvm.skel.h"
#include "uvm/uvm.h"
#include "uvm/uvm_cmd.h"

namespace gpuscope {

const char* const kUvmFunctions[3] = {"uvm_parent_gpu_service_replayable_faults",
                                      "uvm_parent_gpu_service_non_replayable_fault_buffer",
                                      "uvm_tools_record_thrashing"};

std::string resolve_kallsyms(const std::string& text, const std::string& func) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    // "ffffffffc0a1b2c0 t uvm_tools_record_thrashing.isra.0\t[nvidia_uvm]"
    std::istringstream f(line);
    std::string addr, type, name;
    if (!(f >> addr >> type >> name)) continue;
    if (name == func ||
        (name.size() > func.size() && name.compare(0, func.size(), func) == 0 && name[func.size()] == '.'))
      return name;
  }
  return "";
}

namespace {

struct SkelDeleter {
  void operator()(uvm_bpf* s) const { uvm_bpf__destroy(s); }
};
using Skel = std::unique_ptr<uvm_bpf, SkelDeleter>;

bpf_program* const* kprobe_progs(uvm_bpf* s) {
  static bpf_program* p[3];
  p[0] = s->progs.gs_uvm_replayable, p[1] = s->progs.gs_uvm_non_replayable, p[2] = s->progs.gs_uvm_thrashing;
  return p;
}
bpf_program* const* fentry_progs(uvm_bpf* s) {
  static bpf_program* p[3];
  p[0] = s->progs.gs_uvm_replayable_fentry, p[1] = s->progs.gs_uvm_non_replayable_fentry,
  p[2] = s->progs.gs_uvm_thrashing_fentry;
  return p;
}

void only(uvm_bpf* s, std::initializer_list<bpf_program*> keep) {
  bpf_program* p;
  bpf_object__for_each_program(p, s->obj)
      bpf_program__set_autoload(p, std::find(keep.begin(), keep.end(), p) != keep.end());
}

class Uvm {
 public:
  explicit Uvm(const UvmOptions& o) : o_(o) {}
  int run();

 private:
  std::string try_kprobes();
  std::string try_fentry();
  void print();
  std::string owner_of(uint64_t addr);

  const UvmOptions& o_;
  Skel skel_;
  std::vector<Link> links_;
  std::string names_[3];
  std::string how_;
  Writer out_;
  uint64_t prev_[GS_UVM_COUNTERS] = {};
};

// Empty on success, else why not.
std::string Uvm::try_kprobes() {
  if (access("/sys/bus/event_source/devices/kprobe/type", F_OK) != 0)
    return "no kprobe PMU at /sys/bus/event_source/devices/kprobe (kernel built without CONFIG_KPROBES)";
  if (names_[0].empty() && names_[1].empty() && names_[2].empty())
    return "nvidia_uvm is not loaded (its functions are not in /proc/kallsyms)";
  skel_.reset(uvm_bpf__open());
  if (!skel_) return std::string("cannot open BPF object: ") + strerror(errno);
  auto progs = kprobe_progs(skel_.get());
  only(skel_.get(), {progs[0], progs[1], progs[2]});
  if (int err = uvm_bpf__load(skel_.get())) return std::string("kprobe programs refused: ") + strerror(-err);
  for (int i = 0; i < 3; i++) {
    if (names_[i].empty()) continue;
    bpf_link* l = bpf_program__attach_kprobe(progs[i], false, names_[i].c_str());
    if (!l) {
      int err = errno;
      destroy_links(links_);
      skel_.reset();
      return "attaching a kprobe to " + names_[i] + " failed: " + strerror(err);
    }
    links_.emplace_back(l);
  }
  how_ = "kprobes";
  return "";
}

std::string Uvm::try_fentry() {
  {
    Skel probe(uvm_bpf__open());
    if (!probe) return std::string("cannot open BPF object: ") + strerror(errno);
    only(probe.get(), {probe->progs.gs_uvm_fentry_probe});
    if (int err = uvm_bpf__load(probe.get()))
      return std::string("fentry programs refused (load returned ") + strerrorname_np(-err) + ")";
  }
  if (access("/sys/kernel/btf/nvidia_uvm", F_OK) != 0)
    return "no BTF for nvidia_uvm (/sys/kernel/btf/nvidia_uvm missing)";
  skel_.reset(uvm_bpf__open());
  auto progs = fentry_progs(skel_.get());
  std::vector<bpf_program*> keep;
  for (int i = 0; i < 3; i++) {
    if (names_[i].empty()) continue;
    bpf_program__set_attach_target(progs[i], 0, names_[i].c_str());
    keep.push_back(progs[i]);
  }
  bpf_program* p;
  bpf_object__for_each_program(p, skel_->obj)
      bpf_program__set_autoload(p, std::find(keep.begin(), keep.end(), p) != keep.end());
  if (int err = uvm_bpf__load(skel_.get())) {
    skel_.reset();
    return std::string("fentry load on nvidia_uvm failed: ") + strerror(-err);
  }
  for (bpf_program* prog : keep) {
    bpf_link* l = bpf_program__attach(prog);
    if (!l) {
      int err = errno;
      destroy_links(links_);
      skel_.reset();
      return std::string("fentry attach failed: ") + strerror(err);
    }
    links_.emplace_back(l);
  }
  how_ = "fentry";
  return "";
}

// Managed memory is mapped from /dev/nvidia-uvm: the process with such a mapping over the
// address owns it.
std::string Uvm::owner_of(uint64_t addr) {
  for (pid_t pid : list_pids()) {
    auto maps = read_file_opt("/proc/" + std::to_string(pid) + "/maps");
    if (!maps || maps->find("nvidia-uvm") == std::string::npos) continue;
    std::istringstream in(*maps);
    std::string line;
    while (std::getline(in, line)) {
      unsigned long lo = 0, hi = 0;
      if (sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && addr >= lo && addr < hi)
        return std::to_string(pid) + " (" + proc_comm(pid) + ")";
    }
  }
  return "";
}

void Uvm::print() {
  uint64_t now[GS_UVM_COUNTERS], d[GS_UVM_COUNTERS];
  for (uint32_t i = 0; i < GS_UVM_COUNTERS; i++) {
    now[i] = percpu_sum(bpf_map__fd(skel_->maps.counters), i);
    d[i] = now[i] - prev_[i];
    prev_[i] = now[i];
  }
  std::vector<std::pair<uint64_t, gs_uvm_thrash_val>> top;
  int fd = bpf_map__fd(skel_->maps.thrashing);
  for_each_entry<uint64_t, gs_uvm_thrash_val>(fd, [&](uint64_t k, const gs_uvm_thrash_val& v) {
    top.push_back({k, v});
  });
  for (auto& [k, v] : top) bpf_map_delete_elem(fd, &k);
  std::sort(top.begin(), top.end(), [](auto& a, auto& b) { return a.second.count > b.second.count; });
  if (top.size() > o_.top) top.resize(o_.top);
  auto it = std::back_inserter(out_.buf());
  if (o_.json) {
    JsonLine(out_.buf())
        .str("type", "uvm")
        .num("replayable_fault_batches", d[GS_UVM_REPLAYABLE])
        .num("non_replayable_fault_batches", d[GS_UVM_NON_REPLAYABLE])
        .num("thrashing_events", d[GS_UVM_THRASHING])
        .end();
    for (auto& [addr, v] : top)
      JsonLine(out_.buf())
          .str("type", "thrashing")
          .hex("address", addr)
          .num("count", v.count)
          .num("last_pid", v.last_pid)
          .str("owner", owner_of(addr))
          .end();
  } else {
    fmt::format_to(it, "replayable fault servicing {}  non-replayable {}  thrashing {}\n", d[GS_UVM_REPLAYABLE],
                   d[GS_UVM_NON_REPLAYABLE], d[GS_UVM_THRASHING]);
    for (auto& [addr, v] : top) fmt::format_to(it, "  0x{:x}  {:>8}  owner {}\n", addr, v.count, owner_of(addr));
  }
  out_.flush();
}

int Uvm::run() {
  require_bpf_privileges();
  set_libbpf_verbose(o_.verbose);
  std::string ksyms = read_file_opt("/proc/kallsyms").value_or("");
  for (int i = 0; i < 3; i++) names_[i] = resolve_kallsyms(ksyms, kUvmFunctions[i]);
  std::string kwhy = try_kprobes();
  std::string fwhy = kwhy.empty() ? "" : try_fentry();
  if (!kwhy.empty() && !fwhy.empty())
    throw UsageError(
        "uvm unavailable: kprobes: " + kwhy + "; fentry: " + fwhy +
        (names_[0].empty() && names_[1].empty() && names_[2].empty() && kwhy.find("nvidia_uvm") == std::string::npos
             ? "; nvidia_uvm is not loaded either"
             : ""));
  fprintf(stderr, "gpuscope: watching nvidia-uvm fault servicing through %s. Ctrl-C to end.\n", how_.c_str());
  StopControl stop(o_.duration_s);
  using clock = std::chrono::steady_clock;
  auto period = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(o_.interval_s));
  auto next = clock::now() + period;
  while (!stop.should_stop()) {
    usleep(50000);
    if (clock::now() >= next) print(), next += period;
  }
  destroy_links(links_);
  print();
  return 0;
}

}  // namespace

int run_uvm(const UvmOptions& opts) {
  Uvm u(opts);
  return u.run();
}

}  // namespace gpuscope
