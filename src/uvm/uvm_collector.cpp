#include "uvm/uvm_collector.h"

#include <bpf/bpf.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/bpf.h"
#include "core/map_walk.h"
#include "core/proc_maps.h"
#include "core/system.h"
#include "uvm.skel.h"

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

void UvmCollector::SkelDeleter::operator()(uvm_bpf* s) const { uvm_bpf__destroy(s); }

namespace {

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

void only(uvm_bpf* s, const std::vector<bpf_program*>& keep) {
  bpf_program* p;
  bpf_object__for_each_program(p, s->obj)
      bpf_program__set_autoload(p, std::find(keep.begin(), keep.end(), p) != keep.end());
}

}  // namespace

UvmCollector::UvmCollector() {
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
}

UvmCollector::~UvmCollector() { detach(); }

void UvmCollector::detach() { destroy_links(links_); }

// Empty on success, else why not.
std::string UvmCollector::try_kprobes() {
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

std::string UvmCollector::try_fentry() {
  {
    std::unique_ptr<uvm_bpf, SkelDeleter> probe(uvm_bpf__open());
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
  only(skel_.get(), keep);
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
std::string UvmCollector::owner_of(uint64_t addr) {
  for (pid_t pid : list_pids()) {
    auto maps = read_file_opt("/proc/" + std::to_string(pid) + "/maps");
    if (!maps || maps->find("nvidia-uvm") == std::string::npos) continue;
    for (auto& m : parse_maps(*maps))
      if (addr >= m.start && addr < m.end) return std::to_string(pid) + " (" + proc_comm(pid) + ")";
  }
  return "";
}

UvmSnapshot UvmCollector::snapshot() {
  UvmSnapshot s;
  for (uint32_t i = 0; i < GS_UVM_COUNTERS; i++) s.counters[i] = percpu_sum(bpf_map__fd(skel_->maps.counters), i);
  int fd = bpf_map__fd(skel_->maps.thrashing);
  for_each_entry<uint64_t, gs_uvm_thrash_val>(fd, [&](uint64_t k, const gs_uvm_thrash_val& v) {
    s.thrashing.push_back({k, v.count, v.last_pid});
  });
  for (auto& t : s.thrashing) bpf_map_delete_elem(fd, &t.address);
  std::sort(s.thrashing.begin(), s.thrashing.end(), [](auto& a, auto& b) { return a.count > b.count; });
  return s;
}

}  // namespace gpuscope
