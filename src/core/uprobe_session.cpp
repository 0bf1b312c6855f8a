#include "core/uprobe_session.h"

#include <bpf/bpf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <unordered_set>

#include <fmt/format.h>

#include "core/proc_maps.h"
#include "core/session.h"
#include "session.skel.h"

namespace gpuscope {

bool uprobe_sessions_allowed() {
  const char* env = getenv("GPUSCOPE_UPROBE_SESSION");
  return !(env && strcmp(env, "0") == 0);
}

std::vector<bool> rows_where(const std::function<bool(const gs_api_desc&)>& pred) {
  std::vector<bool> rows(GS_API_COUNT);
  for (unsigned i = 0; i < GS_API_COUNT; i++) rows[i] = pred(api_desc(i));
  return rows;
}

namespace {

// Every symbol of the selected rows, variants included, each file offset once, the row as
// cookie.
UprobeMultiTarget sites_of(const CudaObject& obj, const std::vector<bool>& rows) {
  UprobeMultiTarget t;
  std::unordered_set<uint64_t> offsets;
  for (unsigned i = 0; i < GS_API_COUNT; i++) {
    if (!rows[i]) continue;
    for (const char* suf : kApiVariantSuffixes) {
      const ElfSymbol* sym = obj.symbols->find(std::string(api_symbol(i)) + suf);
      if (!sym || !offsets.insert(sym->file_offset).second) continue;
      t.offsets.push_back(sym->file_offset);
      t.cookies.push_back(i);
    }
  }
  return t;
}

struct AttachTally {
  size_t sites = 0;     // probe sites attached
  size_t failures = 0;  // probe sites that could not be
  std::string err;      // the last error
};

// One uprobe_multi link when `multi`, else one link per site.
void attach_sites(bpf_program* prog, const UprobeMultiTarget& t, bool multi, std::vector<Link>& links,
                  AttachTally& tally) {
  if (multi) {
    if (Link l = attach_uprobe_multi(prog, t, &tally.err)) {
      links.push_back(std::move(l));
      tally.sites += t.offsets.size();
    } else {
      tally.failures += t.offsets.size();
    }
    return;
  }
  for (size_t i = 0; i < t.offsets.size(); i++) {
    if (Link l = attach_uprobe(prog, {t.path, t.offsets[i], t.pid, t.cookies[i], t.retprobe}, &tally.err)) {
      links.push_back(std::move(l));
      tally.sites++;
    } else {
      tally.failures++;
    }
  }
}

void destroy_session(session_bpf* s) { session_bpf__destroy(s); }

}  // namespace

UprobeSession::UprobeSession(Scope scope, bool verbose)
    : scope_(std::move(scope)), verbose_(verbose), skel_(nullptr, destroy_session) {}

UprobeSession::~UprobeSession() {
  detach();
  for (size_t i = 0; i < libraries_.size(); i++) remove_library(i);
}

void UprobeSession::add(std::vector<SiteProbe> probes, bool multi, std::function<void(const CudaObject&)> on_attached) {
  clients_.push_back({std::move(probes), multi, std::move(on_attached)});
}

// Any row of the table makes a file a CUDA object (so that `--lib libcuda.so.1` is accepted
// while only runtime rows are selected); attach() probes only the selected rows.
bool UprobeSession::wanted(std::string_view sym) const {
  for (unsigned i = 0; i < GS_API_COUNT; i++) {
    std::string_view base = api_symbol(i);
    if (sym.substr(0, base.size()) != base) continue;
    std::string_view rest = sym.substr(base.size());
    for (const char* suf : kApiVariantSuffixes)
      if (rest == suf) return true;
  }
  return false;
}

size_t UprobeSession::attach_through(const CudaObject& obj, const std::string& path, std::string* err) {
  std::vector<Placement> ps;
  for (auto& c : clients_)
    for (auto& p : c.probes) {
      UprobeMultiTarget t = sites_of(obj, p.rows);
      if (t.offsets.empty()) continue;
      t.retprobe = p.retprobe;
      t.session = p.session;
      ps.push_back({p.prog, c.multi, std::move(t)});
    }
  return attach_placements(ps, path, links_, stats_.attach_failures, err);
}

size_t UprobeSession::attach_placements(std::vector<Placement>& ps, const std::string& path, std::vector<Link>& links,
                                        size_t& failures, std::string* err) {
  size_t attached = 0;
  const size_t first_link = links.size(), failures_before = failures;
  const std::vector<pid_t> pids = scope_.pids.empty() ? std::vector<pid_t>{-1} : scope_.pids;
  // Return probes go in before entry probes: a call entered between the two would otherwise
  // keep its entry without its return for good (a depth that never comes back to zero, and a
  // thread whose later launches all look nested).
  for (int pass = 0; pass < 2; pass++)
    for (auto& p : ps) {
      if ((pass == 0) != (p.sites.retprobe && !p.sites.session)) continue;
      p.sites.path = path;
      for (pid_t pid : pids) {
        p.sites.pid = pid;
        AttachTally tally;
        attach_sites(p.prog, p.sites, p.multi, links, tally);
        attached += tally.sites;
        failures += tally.failures;
        if (!tally.err.empty()) *err = tally.err;
      }
    }
  // The process that lent its path exited part way through (say, entry probes attached, exit
  // probes not): a half-probed object would keep entries without exits for good, so what was
  // attached is undone, and the object is attached whole through another path or a later scan.
  if (attached > 0 && failures > failures_before && access(path.c_str(), F_OK) != 0) {
    links.erase(links.begin() + static_cast<std::ptrdiff_t>(first_link), links.end());
    attached = 0;
  }
  return attached;
}

size_t UprobeSession::add_library(LibraryClient c) {
  libraries_.push_back(std::make_unique<Library>());
  libraries_.back()->client = std::move(c);
  return libraries_.size() - 1;
}

const ElfSymbols* UprobeSession::attach_library_file(Library& lib, const std::string& path, dev_t dev, ino_t ino,
                                                     std::string* err) {
  auto [it, fresh] = lib.files.try_emplace({dev, ino});
  if (!fresh) {
    if (!it->second) *err = "not the library: a site is missing";
    return it->second.get();
  }
  std::shared_ptr<const ElfSymbols> syms;
  try {
    auto want = [&](std::string_view n) {
      return std::any_of(lib.client.sites.begin(), lib.client.sites.end(), [&](auto& s) { return s.symbol == n; });
    };
    syms = std::make_shared<const ElfSymbols>(ElfSymbols::read(path, want, lib.client.objects));
  } catch (const std::exception& e) {
    lib.files.erase(it);  // its process may have gone with the path: another offers it again
    *err = e.what();
    return nullptr;
  }
  std::vector<Placement> ps;
  for (auto& s : lib.client.sites) {
    const ElfSymbol* sym = syms->find(s.symbol);
    if (!sym && s.optional) continue;
    if (!sym) {
      *err = "not the library: no " + s.symbol;
      return nullptr;  // stays null: the file has no such site
    }
    auto same = std::find_if(ps.begin(), ps.end(), [&](const Placement& p) {
      return lib.client.multi && p.prog == s.prog && p.sites.retprobe == s.retprobe;
    });
    if (same == ps.end()) {
      UprobeMultiTarget t;
      t.retprobe = s.retprobe;
      ps.push_back({s.prog, lib.client.multi, std::move(t)});
      same = ps.end() - 1;
    }
    same->sites.offsets.push_back(sym->file_offset);
    same->sites.cookies.push_back(s.cookie);
  }
  size_t failures = 0;
  if (attach_placements(ps, path, lib.links, failures, err) == 0) {
    lib.files.erase(it);  // tried again at the next scan that finds it
    return nullptr;
  }
  it->second = std::move(syms);
  return it->second.get();
}

bool UprobeSession::attach_library(size_t lib, const std::string& path, std::string* err) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    *err = strerror(errno);
    return false;
  }
  return attach_library_file(*libraries_[lib], path, st.st_dev, st.st_ino, err) != nullptr;
}

size_t UprobeSession::library_files(size_t lib) const {
  size_t n = 0;
  for (auto& [_, syms] : libraries_[lib]->files) n += syms != nullptr;
  return n;
}

void UprobeSession::remove_library(size_t lib) {
  Library& l = *libraries_[lib];
  l.removed = true;
  destroy_links(l.links);
  l.links.clear();
  l.files.clear();
}

void UprobeSession::scan_libraries(const std::vector<pid_t>* only) {
  if (std::all_of(libraries_.begin(), libraries_.end(), [](auto& l) { return l->removed; })) return;
  const std::vector<pid_t> pids = only ? *only : scope_.pids.empty() ? list_pids() : scope_.pids;
  const pid_t self = getpid();
  for (pid_t pid : pids) {
    if (pid == self) continue;
    // Most processes map none: the text is searched before it is parsed.
    auto text = read_file_opt("/proc/" + std::to_string(pid) + "/maps");
    if (!text) continue;
    for (auto& lib : libraries_) {
      const std::string& name = lib->client.name;
      if (lib->removed || text->find(name) == std::string::npos) continue;
      if (!scope_.wants(static_cast<uint32_t>(pid), proc_comm(pid))) break;
      for (auto& m : parse_maps(*text)) {
        if (!m.is_file() || m.file_offset != 0 || m.path.find(name) == std::string::npos) continue;
        std::string err;
        const std::string path = "/proc/" + std::to_string(pid) + "/root" + m.path;
        if (const ElfSymbols* syms = attach_library_file(*lib, path, m.dev, m.ino, &err)) {
          lib->client.mapped({pid, m.start, *syms});
          break;
        }
      }
    }
  }
}

bool UprobeSession::attach(const CudaObject& obj, bool from_lib) {
  // One file under several names (the linker cache lists libcuda.so.1 and libcuda.so, a
  // driver directory is mounted twice): a second probe on the same inode would count twice.
  if (disc_->settled(obj)) return true;
  size_t wanted_sites = 0;
  for (auto& c : clients_)
    for (auto& p : c.probes) wanted_sites += sites_of(obj, p.rows).offsets.size();
  if (wanted_sites == 0) {  // a CUDA object, but none of the selected rows is in it
    disc_->attached(obj);
    stats_.objects++;
    if (verbose_) fprintf(stderr, "gpuscope: %s (pid %d): 0 probe sites\n", obj.path.c_str(), obj.seen_in);
    return true;
  }
  std::string err;
  std::string path = obj.open_path;
  size_t n = attach_through(obj, path, &err);
  pid_t via = obj.seen_in;
  for (size_t i = 0; n == 0 && i < obj.alternates.size(); i++) {
    stats_.attach_retries++;
    via = obj.alternates[i].first;
    path = obj.alternates[i].second;
    n = attach_through(obj, path, &err);
  }
  // A --lib that fails is reported once, by the UsageError below.
  if (verbose_ || (n == 0 && !err.empty() && !from_lib))
    fprintf(stderr, "gpuscope: %s (pid %d): %zu probe sites%s%s\n", obj.path.c_str(), via, n,
            err.empty() ? "" : ", attach failed: ", err.c_str());
  if (n == 0) {
    if (from_lib) throw UsageError("--lib " + obj.path + ": no probe could be attached (" + err + ")");
    // Every process that lent a path has gone (short-lived ones, or a slow attach): that says
    // nothing against the file, which the next process mapping it offers again. Only failures
    // with the file still reachable count towards giving it up.
    if (access(path.c_str(), F_OK) != 0) {
      stats_.attach_retries++;
      return false;
    }
    if (!disc_->attach_failed(obj)) stats_.objects_given_up++;
    return false;
  }
  disc_->attached(obj);
  stats_.objects++;
  stats_.probes += n;
  for (auto& c : clients_)
    if (c.on_attached) c.on_attached(obj);
  return true;
}

void UprobeSession::open_libs() {
  disc_ = std::make_unique<Discovery>([this](std::string_view n) { return wanted(n); }, scope_.pids);
  libs_.clear();
  for (const auto& lib : scope_.libs) libs_.push_back(disc_->add_path(lib));
}

void UprobeSession::start() {
  scope_.validate();
  if (!disc_) open_libs();

  skel_.reset(session_bpf__open_and_load());
  if (skel_) {
    if (bpf_link* l = bpf_program__attach(skel_->progs.gs_session_exec)) {
      links_.emplace_back(l);
      stats_.exec_hook = true;
    }
    notices_ = std::make_unique<RingBuffer>(bpf_map__fd(skel_->maps.session_events), [this](const void* d, size_t n) {
      if (n < sizeof(gs_session_event)) return;
      const auto pid = static_cast<pid_t>(static_cast<const gs_session_event*>(d)->pid);
      noticed_.push_back(pid);
      // At once, not at the deferred rescan: the BPF side drops its calls until it is admitted,
      // and a short-lived process may be gone by the time its events are shown.
      if (scope_.where.active())
        scope_.admit(pid);
      else if (name_early_)
        scope_.containers->refresh(pid);
    });
  } else if (verbose_) {
    fprintf(stderr, "gpuscope: no exec/dlopen hooks (%s): libraries are found by rescans only\n", strerror(errno));
  }

  for (const auto& obj : libs_) attach(obj, true);
  libs_.clear();
  std::vector<CudaObject> found;
  if (scope_.pids.empty())
    for (auto& obj : disc_->scan_ld_cache()) found.push_back(std::move(obj));
  for (auto& obj : disc_->scan_processes()) found.push_back(std::move(obj));
  std::set<pid_t> initial(scope_.pids.begin(), scope_.pids.end());
  for (const auto& obj : found) {
    if (attach(obj, false) && obj.seen_in > 0) initial.insert(obj.seen_in);
  }
  scan_libraries(nullptr);
  initial_pids_.assign(initial.begin(), initial.end());
  name_processes();
  rescan(nullptr);  // only for the loader hooks: the objects are attached by now
  event_driven_ = stats_.exec_hook && stats_.loader_hooks > 0;
  if (verbose_) fprintf(stderr, "gpuscope: library discovery: %s\n", discovery_mode().c_str());
}

void UprobeSession::name_processes() {
  // Named while they run: their events may be shown after they have gone.
  std::vector<pid_t> pids = disc_->take_cuda_pids();
  if (name_early_)
    for (pid_t p : pids) scope_.containers->of(p);
}

void UprobeSession::rescan(const std::vector<pid_t>* only) {
  if (only) {
    for (const auto& obj : disc_->scan_processes(only)) attach(obj, false);
    scan_libraries(only);
  } else if (next_full_ != EventLoop::Clock::time_point{}) {
    scope_.containers->sweep();
    scope_.admit_all();
    for (const auto& obj : disc_->scan_processes()) attach(obj, false);
    scan_libraries(nullptr);
  }
  name_processes();
  if (!skel_) return;
  const std::vector<pid_t> pids = scope_.pids.empty() ? std::vector<pid_t>{-1} : scope_.pids;
  for (const auto& ld : disc_->take_new_loaders())
    for (pid_t pid : pids) {
      std::string err;
      if (Link l = attach_uprobe(skel_->progs.gs_session_dl_change,
                                 {ld.open_path, ld.debug_state_offset, pid, 0, false}, &err)) {
        links_.push_back(std::move(l));
        stats_.loader_hooks++;
      } else if (verbose_) {
        fprintf(stderr, "gpuscope: cannot watch dlopen in %s: %s\n", ld.open_path.c_str(), err.c_str());
      }
    }
}

std::string UprobeSession::discovery_mode() const {
  // With -p the watched pids are few: rescanning them often costs little.
  const bool fast = !scope_.pids.empty() || !event_driven_;
  return fmt::format("{}, {} every {} ({} dynamic-linker hooks, exec hook {})",
                     event_driven_ ? "on exec and dlopen" : "no exec/dlopen hooks",
                     scope_.pids.empty() ? "all processes rescanned" : "the watched pids rescanned",
                     fast ? "400 ms" : "5 s", stats_.loader_hooks, stats_.exec_hook ? "on" : "off");
}

void UprobeSession::refresh() {
  if (notices_) notices_->drain();
  // Deferred, the notices wait for rescan_noticed() (deduplicated: a process noticed at exec
  // and dlopen is scanned once, and one gone by then costs a failed open).
  if (!defer_ || noticed_.size() >= kMaxDeferredNotices) rescan_noticed();
  auto now = EventLoop::Clock::now();
  if (now < next_full_) return;
  const bool fast = !scope_.pids.empty() || !event_driven_;
  bool first = next_full_ == EventLoop::Clock::time_point{};
  next_full_ = now + (fast ? std::chrono::milliseconds(400) : full_period_);
  if (!first) rescan(nullptr);
}

void UprobeSession::rescan_noticed() {
  if (!noticed_.empty()) {
    std::vector<pid_t> pids;
    std::sort(noticed_.begin(), noticed_.end());
    noticed_.erase(std::unique(noticed_.begin(), noticed_.end()), noticed_.end());
    for (pid_t p : noticed_)
      if (scope_.pids.empty() || std::find(scope_.pids.begin(), scope_.pids.end(), p) != scope_.pids.end())
        pids.push_back(p);
    noticed_.clear();
    for (pid_t p : pids) {
      // A new image may be another process's: named anew when it is next asked for.
      if (!name_early_ && !scope_.where.active()) scope_.containers->forget(p);
      for (auto& f : maps_changed_) f(p);
    }
    if (!pids.empty()) rescan(&pids);
  }
}

bool UprobeSession::targets_alive() const {
  if (scope_.pids.empty()) return true;
  for (pid_t p : scope_.pids)
    if (pid_exists(p)) return true;
  return false;
}

void UprobeSession::watch(EventLoop& loop, bool stop_when_gone) {
  if (notices_) loop.watch(*notices_);
  refresh();  // sets the first full-rescan time
  loop.after_wakeup([this, &loop, stop_when_gone] {
    refresh();
    if (stop_when_gone && !targets_alive()) loop.stop();
  });
}

SessionStats UprobeSession::stats() const {
  SessionStats s = stats_;
  if (skel_) s.notices_lost = percpu_sum(bpf_map__fd(skel_->maps.session_drops), GS_SESSION_DROP_EVENTS);
  return s;
}

void UprobeSession::detach() { destroy_links(links_); }

}  // namespace gpuscope
