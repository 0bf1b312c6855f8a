#include "core/containers.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <optional>
#include <ranges>
#include <regex>

#include <nlohmann/json.hpp>

#include "core/system.h"

namespace gpuscope {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool is_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}
bool is_id(std::string_view s) { return s.size() == 64 && is_hex(s); }

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (auto part : s | std::views::split(sep)) out.emplace_back(part.begin(), part.end());
  return out;
}

std::optional<struct stat> stat_dir(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return std::nullopt;
  return st;
}

std::vector<fs::directory_entry> list_dir(const std::string& dir) {
  std::vector<fs::directory_entry> v;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) v.push_back(*it);
  return v;
}

json read_json(const std::string& path) {
  auto text = read_file_opt(path);
  if (!text) return json();
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? json() : j;
}

const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

std::string string_at(const json& j, const char* key) {
  const json* v = member(j, key);
  return v && v->is_string() ? v->get<std::string>() : "";
}

void set_if_empty(std::string& field, const std::string& value) {
  if (field.empty()) field = value;
}

// dockershim's and CRI-O's names: k8s_<container>_<pod>_<namespace>_<uid>_<attempt>.
bool from_k8s_name(std::string_view name, ContainerInfo& c) {
  auto parts = split(name, '_');
  if (parts.size() != 6 || parts[0] != "k8s") return false;
  if (parts[1] == "POD")
    c.sandbox = true;
  else
    set_if_empty(c.name, std::string(parts[1]));
  set_if_empty(c.pod, std::string(parts[2]));
  set_if_empty(c.ns, std::string(parts[3]));
  set_if_empty(c.pod_uid, std::string(parts[4]));
  return true;
}

bool from_docker(const std::string& root, ContainerInfo& c) {
  json j = read_json(root + "/containers/" + c.container_id + "/config.v2.json");
  if (!j.is_object()) return false;
  const json* cfg = member(j, "Config");
  const json* labels = cfg ? member(*cfg, "Labels") : nullptr;
  if (labels) {
    c.sandbox = string_at(*labels, "io.kubernetes.docker.type") == "podsandbox";
    if (!c.sandbox) set_if_empty(c.name, string_at(*labels, "io.kubernetes.container.name"));
    set_if_empty(c.pod, string_at(*labels, "io.kubernetes.pod.name"));
    set_if_empty(c.ns, string_at(*labels, "io.kubernetes.pod.namespace"));
    set_if_empty(c.pod_uid, string_at(*labels, "io.kubernetes.pod.uid"));
  }
  std::string name = string_at(j, "Name");
  if (!name.empty() && name[0] == '/') name.erase(0, 1);
  if (!from_k8s_name(name, c) && !c.sandbox) set_if_empty(c.name, name);
  return true;
}

bool from_containerd(const std::string& state, ContainerInfo& c, bool* moby) {
  for (auto& ns : list_dir(state + "/io.containerd.runtime.v2.task")) {
    json j = read_json(ns.path().string() + "/" + c.container_id + "/config.json");
    if (!j.is_object()) continue;
    *moby = ns.path().filename() == "moby";
    const json* a = member(j, "annotations");
    if (!a) return true;
    c.sandbox = string_at(*a, "io.kubernetes.cri.container-type") == "sandbox";
    if (!c.sandbox) set_if_empty(c.name, string_at(*a, "io.kubernetes.cri.container-name"));
    set_if_empty(c.pod, string_at(*a, "io.kubernetes.cri.sandbox-name"));
    set_if_empty(c.ns, string_at(*a, "io.kubernetes.cri.sandbox-namespace"));
    set_if_empty(c.pod_uid, string_at(*a, "io.kubernetes.cri.sandbox-uid"));
    set_if_empty(c.name, string_at(*a, "nerdctl/name"));
    return true;
  }
  return false;
}

// Returns whether the name is CRI-O's (k8s_...), through *crio.
bool from_storage(const std::vector<std::string>& roots, ContainerInfo& c, bool* crio) {
  for (auto& root : roots)
    for (auto& d : list_dir(root)) {
      if (!d.path().filename().string().ends_with("-containers")) continue;
      for (const char* file : {"containers.json", "volatile-containers.json"}) {
        json list = read_json(d.path().string() + "/" + file);
        if (!list.is_array()) continue;
        for (auto& e : list) {
          if (string_at(e, "id") != c.container_id) continue;
          const json* names = member(e, "names");
          std::string name = names && names->is_array() && !names->empty() && (*names)[0].is_string()
                                 ? (*names)[0].get<std::string>()
                                 : "";
          *crio = from_k8s_name(name, c);
          if (!*crio) set_if_empty(c.name, name);
          return true;
        }
      }
    }
  return false;
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string detect_v2_root(const std::string& root) {
  std::error_code ec;
  if (fs::exists(root + "/cgroup.controllers", ec)) return root;
  if (fs::exists(root + "/unified/cgroup.controllers", ec)) return root + "/unified";
  return root;
}

}  // namespace

std::string_view runtime_name(ContainerRuntime r) {
  switch (r) {
    case ContainerRuntime::kNone: return kHostName;
    case ContainerRuntime::kContainerd: return "containerd";
    case ContainerRuntime::kCrio: return "cri-o";
    case ContainerRuntime::kDocker: return "docker";
    case ContainerRuntime::kPodman: return "podman";
    case ContainerRuntime::kUnknown: break;
  }
  return "unknown";
}

std::string ContainerInfo::display() const {
  if (!resolved) return "";
  if (!in_container) return std::string(kHostName);
  return name.empty() ? short_id() : name;
}

bool ContainerInfo::matches(std::string_view ref) const {
  if (ref.empty() || !in_container) return false;
  if (ref == container_id || ref == name) return true;
  return ref.size() >= kShortIdLen && ref.size() < 64 && is_hex(ref) && container_id.starts_with(ref);
}

bool id_prefix_ambiguous(const std::vector<ContainerInfo>& known, std::string_view ref) {
  if (ref.size() < kShortIdLen || ref.size() >= 64 || !is_hex(ref)) return false;
  std::string first;
  for (auto& c : known) {
    if (!c.container_id.starts_with(ref)) continue;
    if (first.empty())
      first = c.container_id;
    else if (c.container_id != first)
      return true;
  }
  return false;
}

CgroupMatch parse_cgroup_path(std::string_view path) {
  // The systemd driver writes the UID with '_' for '-'; a static pod's UID is 32 hex digits.
  static const std::regex pod_re(
      "(?:^|-)pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})"
      "(?=$|\\.slice|:)");
  static const std::pair<std::string_view, ContainerRuntime> prefixes[] = {
      {"cri-containerd-", ContainerRuntime::kContainerd},
      {"crio-", ContainerRuntime::kCrio},
      {"docker-", ContainerRuntime::kDocker},
      {"libpod-", ContainerRuntime::kPodman},
      {"nerdctl-", ContainerRuntime::kContainerd}};
  CgroupMatch m;
  std::string_view prev;
  for (std::string_view seg : split(path, '/')) {
    if (seg.starts_with("kubepods")) m.kubepods = true;
    std::smatch pm;
    std::string s(seg);
    if (m.container_id.empty() && seg.find("pod") != std::string_view::npos && std::regex_search(s, pm, pod_re)) {
      m.pod_uid = pm[1];
      std::replace(m.pod_uid.begin(), m.pod_uid.end(), '_', '-');
    }
    std::string_view v = seg;
    if (v.ends_with(".scope")) v.remove_suffix(6);
    // A systemd-style cgroupsPath ("<slice>:<prefix>:<id>") taken literally by cgroupfs.
    if (auto last = v.rfind(':'); last != std::string_view::npos) {
      auto first = v.find(':');
      s = std::string(v.substr(first + 1, last - first - 1)) + "-" + std::string(v.substr(last + 1));
      v = s;
    }
    ContainerRuntime rt = ContainerRuntime::kNone;
    std::string_view id;
    if (v.starts_with("crio-conmon-") || v.starts_with("libpod-conmon-")) {
      // the runtime's monitor beside the container, on the host
    } else if (is_id(v)) {
      id = v;
      rt = prev == "docker" ? ContainerRuntime::kDocker : ContainerRuntime::kUnknown;
    } else {
      for (auto& [prefix, r] : prefixes)
        if (v.starts_with(prefix) && is_id(v.substr(prefix.size()))) {
          id = v.substr(prefix.size());
          rt = r;
        }
    }
    if (!id.empty()) {
      m.container_id = id;
      m.runtime = rt;
    }
    prev = seg;
  }
  return m;
}

std::vector<CgroupLine> parse_proc_cgroup(std::string_view text) {
  std::vector<CgroupLine> lines;
  for (std::string_view line : split(text, '\n')) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front()))) line.remove_prefix(1);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.remove_suffix(1);
    auto a = line.find(':');
    auto b = a == std::string_view::npos ? a : line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    lines.push_back({std::string(line.substr(a + 1, b - a - 1)), std::string(line.substr(b + 1))});
  }
  return lines;
}

const CgroupLine* relevant_cgroup_line(const std::vector<CgroupLine>& lines) {
  const CgroupLine* v2 = nullptr;
  for (auto& l : lines)
    if (l.v2()) v2 = &l;
  if (v2 && parse_cgroup_path(v2->path).in_container()) return v2;
  for (auto& l : lines)
    if (!l.v2() && parse_cgroup_path(l.path).in_container()) return &l;
  if (v2) return v2;
  return lines.empty() ? nullptr : &lines[0];
}

ContainerPaths ContainerPaths::under(const std::string& root) const {
  std::string r = root;
  while (!r.empty() && r.back() == '/') r.pop_back();
  ContainerPaths p = *this;
  for (auto* s :
       {&p.proc_root, &p.cgroup_root, &p.pods_dir, &p.containers_log_dir, &p.docker_root, &p.containerd_state})
    *s = r + *s;
  for (auto& s : p.storage_roots) s = r + s;
  return p;
}

void ContainerPaths::set_pods_dir(const std::string& dir) {
  pods_dir = dir;
  while (pods_dir.size() > 1 && pods_dir.back() == '/') pods_dir.pop_back();
  size_t slash = pods_dir.find_last_of('/');
  containers_log_dir = (slash == std::string::npos ? std::string(".") : pods_dir.substr(0, slash)) + "/containers";
}

void ContainerPaths::set_runtime_root(const std::string& root) {
  ContainerPaths moved = ContainerPaths{}.under(root);
  docker_root = moved.docker_root;
  containerd_state = moved.containerd_state;
  storage_roots = moved.storage_roots;
}

ContainerResolver::ContainerResolver(ContainerPaths paths, size_t max_entries)
    : paths_(std::move(paths)), max_entries_(std::max<size_t>(max_entries, 1)) {
  v2_root_ = detect_v2_root(paths_.cgroup_root);
}

bool ContainerResolver::kubernetes_readable() const {
  std::error_code ec;
  fs::directory_iterator it(paths_.pods_dir, ec);
  return !ec;
}

ContainerInfo ContainerResolver::resolve(pid_t pid) {
  auto text = read_file_opt(paths_.proc_root + "/" + std::to_string(pid) + "/cgroup");
  if (!text) return {};
  return resolve_cgroup_text(*text);
}

ContainerInfo ContainerResolver::resolve_cgroup_text(std::string_view proc_cgroup) {
  try {
    return resolve_lines(parse_proc_cgroup(proc_cgroup));
  } catch (const std::exception&) {
    return {};
  }
}

std::string ContainerResolver::v1_dir(const CgroupLine& line) const {
  std::string all = line.controllers;
  if (all.starts_with("name=")) all.erase(0, 5);
  std::vector<std::string> candidates{all};
  for (auto c : split(line.controllers, ',')) candidates.emplace_back(c.starts_with("name=") ? c.substr(5) : c);
  for (auto& c : candidates)
    if (!c.empty() && stat_dir(paths_.cgroup_root + "/" + c)) return paths_.cgroup_root + "/" + c + line.path;
  return "";
}

ContainerInfo ContainerResolver::resolve_lines(const std::vector<CgroupLine>& lines) {
  const CgroupLine* rel = relevant_cgroup_line(lines);
  if (!rel) return {};
  uint64_t cgroup_id = 0;
  for (auto& l : lines)
    if (l.v2())
      if (auto st = stat_dir(v2_root_ + l.path)) cgroup_id = st->st_ino;
  std::string dir = rel->v2() ? v2_root_ + rel->path : v1_dir(*rel);
  auto st = dir.empty() ? std::nullopt : stat_dir(dir);
  ContainerInfo info;
  if (!st) {
    info = describe(parse_cgroup_path(rel->path));
  } else {
    Key key{st->st_dev, st->st_ino};
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      it->second.last_use = ++use_seq_;
      info = it->second.info;
    } else {
      info = remember(key, dir, describe(parse_cgroup_path(rel->path)));
    }
  }
  info.cgroup_id = cgroup_id;
  return info;
}

ContainerInfo ContainerResolver::describe(const CgroupMatch& m) {
  ContainerInfo c;
  c.resolved = true;
  if (!m.in_container()) return c;
  c.in_container = true;
  c.container_id = m.container_id;
  c.pod_uid = m.pod_uid;
  c.runtime = m.runtime;
  name_from_state(c, m.runtime == ContainerRuntime::kUnknown);
  if (c.runtime == ContainerRuntime::kUnknown && m.kubepods) c.runtime = ContainerRuntime::kContainerd;
  if (m.kubepods || c.kubernetes()) name_from_kubelet(c);
  return c;
}

void ContainerResolver::name_from_state(ContainerInfo& c, bool bare_id) const {
  bool moby = false, crio = false;
  ContainerRuntime found = ContainerRuntime::kNone;
  if (from_docker(paths_.docker_root, c))
    found = ContainerRuntime::kDocker;
  else if (from_containerd(paths_.containerd_state, c, &moby))
    found = moby ? ContainerRuntime::kDocker : ContainerRuntime::kContainerd;
  else if (from_storage(paths_.storage_roots, c, &crio))
    found = crio ? ContainerRuntime::kCrio : ContainerRuntime::kPodman;
  if (bare_id && found != ContainerRuntime::kNone) c.runtime = found;
}

void ContainerResolver::name_from_kubelet(ContainerInfo& c) const {
  std::string pod_dir;
  if (!c.pod_uid.empty())
    for (auto& e : list_dir(paths_.pods_dir)) {
      std::string n = e.path().filename().string();
      auto parts = split(n, '_');
      if (parts.size() != 3 || parts[2] != c.pod_uid) continue;
      c.ns = parts[0];
      c.pod = parts[1];
      pod_dir = e.path().string();
      break;
    }
  const std::string tail = "-" + c.container_id + ".log";
  for (auto& e : list_dir(paths_.containers_log_dir)) {
    std::string n = e.path().filename().string();
    if (!n.ends_with(tail)) continue;
    auto parts = split(std::string_view(n).substr(0, n.size() - tail.size()), '_');
    if (parts.size() != 3) continue;
    set_if_empty(c.pod, std::string(parts[0]));
    set_if_empty(c.ns, std::string(parts[1]));
    c.name = parts[2];
    return;
  }
  if (!c.name.empty() || pod_dir.empty()) return;
  auto ctrs = list_dir(pod_dir);
  std::erase_if(ctrs, [](const fs::directory_entry& e) {
    std::error_code ec;
    return !e.is_directory(ec);
  });
  for (auto& d : ctrs)
    for (auto& f : list_dir(d.path().string())) {
      std::error_code ec;
      if (!f.is_symlink(ec)) continue;
      if (fs::read_symlink(f.path(), ec).string().find(c.container_id) != std::string::npos) {
        c.name = d.path().filename().string();
        return;
      }
    }
  if (ctrs.size() == 1 && !c.sandbox) c.name = ctrs[0].path().filename().string();
}

const ContainerInfo& ContainerResolver::remember(const Key& key, std::string dir, ContainerInfo info) {
  if (cache_.size() >= max_entries_) forget_gone();
  if (cache_.size() >= max_entries_) {
    auto oldest = std::min_element(cache_.begin(), cache_.end(),
                                   [](auto& a, auto& b) { return a.second.last_use < b.second.last_use; });
    cache_.erase(oldest);
  }
  auto& e = cache_[key];
  e = {std::move(info), std::move(dir), ++use_seq_};
  return e.info;
}

size_t ContainerResolver::forget_gone() {
  size_t n = 0;
  for (auto it = cache_.begin(); it != cache_.end();) {
    auto st = stat_dir(it->second.dir);
    bool gone = !st || Key{st->st_dev, st->st_ino} != it->first;
    auto& c = it->second.info;
    if (gone || (c.in_container && c.name.empty() && !c.sandbox)) {
      it = cache_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

void ContainerResolver::walk_v2(std::vector<std::pair<uint64_t, std::string>>* dirs) {
  last_walk_ms_ = now_ms();
  v2_dirs_.clear();
  auto add = [&](const std::string& abs, std::string rel) {
    if (auto st = stat_dir(abs)) {
      v2_dirs_[st->st_ino] = rel;
      if (dirs) dirs->emplace_back(st->st_ino, std::move(rel));
    }
  };
  add(v2_root_, "/");
  std::error_code ec;
  for (fs::recursive_directory_iterator it(v2_root_, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    std::error_code dec;
    if (it->is_symlink(dec) || !it->is_directory(dec)) continue;
    add(it->path().string(), "/" + it->path().lexically_relative(v2_root_).string());
  }
}

ContainerInfo ContainerResolver::resolve_cgroup_id(uint64_t cgroup_id) {
  try {
    auto root = stat_dir(v2_root_);
    if (!root) return {};
    Key key{root->st_dev, cgroup_id};
    if (auto it = cache_.find(key); it != cache_.end()) {
      it->second.last_use = ++use_seq_;
      ContainerInfo c = it->second.info;
      c.cgroup_id = cgroup_id;
      return c;
    }
    auto d = v2_dirs_.find(cgroup_id);
    if (d == v2_dirs_.end() && (last_walk_ms_ < 0 || now_ms() - last_walk_ms_ >= walk_interval_ms_)) {
      walk_v2(nullptr);
      d = v2_dirs_.find(cgroup_id);
    }
    if (d == v2_dirs_.end()) return {};
    std::string dir = v2_root_ + d->second;
    auto st = stat_dir(dir);
    if (!st || st->st_ino != cgroup_id) return {};
    ContainerInfo c = remember(key, dir, describe(parse_cgroup_path(d->second)));
    c.cgroup_id = cgroup_id;
    return c;
  } catch (const std::exception&) {
    return {};
  }
}

std::vector<ContainerInfo> ContainerResolver::containers() {
  std::vector<ContainerInfo> out;
  try {
    auto root = stat_dir(v2_root_);
    if (!root) return out;
    std::vector<std::pair<uint64_t, std::string>> dirs;
    walk_v2(&dirs);
    for (auto& [ino, rel] : dirs) {
      Key key{root->st_dev, ino};
      ContainerInfo c;
      if (auto it = cache_.find(key); it != cache_.end()) {
        it->second.last_use = ++use_seq_;
        c = it->second.info;
      } else {
        CgroupMatch m = parse_cgroup_path(rel);
        if (!m.in_container()) continue;
        c = remember(key, v2_root_ + rel, describe(m));
      }
      if (!c.in_container) continue;
      c.cgroup_id = ino;
      out.push_back(std::move(c));
    }
  } catch (const std::exception&) {
  }
  return out;
}

ContainerInfo ProcessContainers::of(pid_t pid) {
  std::lock_guard lock(mu_);
  if (auto it = by_pid_.find(pid); it != by_pid_.end()) return it->second.info;
  ContainerInfo c = resolver_.resolve(pid);
  if (!c.resolved) return c;
  if (by_pid_.size() >= kMaxProcesses) std::erase_if(by_pid_, [](auto& e) { return !process_running(e.first); });
  if (by_pid_.size() < kMaxProcesses) by_pid_.emplace(pid, Known{c});
  return c;
}

ContainerInfo ProcessContainers::of_cgroup(pid_t pid, uint64_t cgroup_id) {
  std::lock_guard lock(mu_);
  if (auto it = by_pid_.find(pid); it != by_pid_.end()) return it->second.info;
  ContainerInfo c = resolver_.resolve_cgroup_id(cgroup_id);
  if (c.resolved && by_pid_.size() < kMaxProcesses) by_pid_.emplace(pid, Known{c});
  return c;
}

ContainerInfo ProcessContainers::refresh(pid_t pid) {
  {
    std::lock_guard lock(mu_);
    by_pid_.erase(pid);
  }
  return of(pid);
}

void ProcessContainers::forget(pid_t pid) {
  std::lock_guard lock(mu_);
  by_pid_.erase(pid);
}

void ProcessContainers::sweep() {
  std::lock_guard lock(mu_);
  const int64_t now = now_ms();
  for (auto it = by_pid_.begin(); it != by_pid_.end();) {
    if (!process_running(it->first) && !it->second.gone_ms) it->second.gone_ms = now;
    if (it->second.gone_ms && now - it->second.gone_ms >= keep_gone_ms_)
      it = by_pid_.erase(it);
    else
      ++it;
  }
  resolver_.forget_gone();
}

std::vector<ContainerInfo> ProcessContainers::containers() {
  std::lock_guard lock(mu_);
  return resolver_.containers();
}

bool ProcessContainers::kubernetes_readable() const {
  std::lock_guard lock(mu_);
  return resolver_.kubernetes_readable();
}

bool ProcessContainers::has_cgroup_v2() const {
  std::error_code ec;
  return fs::exists(resolver_.cgroup2_root() + "/cgroup.controllers", ec);
}

size_t ProcessContainers::processes() const {
  std::lock_guard lock(mu_);
  return by_pid_.size();
}

size_t ProcessContainers::cgroups() const {
  std::lock_guard lock(mu_);
  return resolver_.cache_size();
}

}  // namespace gpuscope
