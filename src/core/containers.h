#pragma once
// Which container, pod and namespace a process runs in, from files only: no runtime API, no
// credentials, no network. docs/scoping.md lists what each runtime layout gives.
//
// 1. The cgroup path (/proc/PID/cgroup) gives the container id and runtime, and under Kubernetes
//    the pod UID. The last segment that names a container wins (docker-in-docker names the inner
//    one), and segments below it (a sub-cgroup made inside the container) change nothing:
//      systemd driver   .../kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope
//                       crio-<id>.scope, docker-<id>.scope, libpod-<id>.scope (podman)
//      cgroupfs driver  /kubepods/burstable/pod<uid>/<id>, /kubepods/pod<uid>/crio-<id>,
//                       /docker/<id>, /libpod_parent/libpod-<id>
//      mixed            .../kubepods-besteffort-pod<uid>.slice:cri-containerd:<id>
//    crio-conmon-<id>.scope and libpod-conmon-<id>.scope hold the runtime's monitor, not the
//    container. A bare <id> is Docker's under /docker, else whichever runtime's state on disk
//    holds it, else containerd's under /kubepods, else kUnknown. The cgroup v2 line (0::) is
//    used when it names a container, else the first v1 line (any controller) that does.
// 2. The runtime's state on disk, where readable, names the container (and, for a Kubernetes
//    container, its pod, namespace and whether it is the pod's sandbox, the pause container):
//      Docker          <docker_root>/containers/<id>/config.v2.json: .Name, .Config.Labels
//      containerd      <containerd_state>/io.containerd.runtime.v2.task/<ns>/<id>/config.json:
//                      the CRI's io.kubernetes.cri.* annotations, nerdctl's nerdctl/name
//      Podman, CRI-O   <storage root>/<driver>-containers/{containers,volatile-containers}.json:
//                      .names[0]; CRI-O's are k8s_<container>_<pod>_<namespace>_<uid>_<attempt>
// 3. Under Kubernetes, the kubelet's log directories:
//      <pods_dir>/<namespace>_<pod>_<uid>/<container>/<N>.log  namespace and pod, by pod UID
//      <containers_log_dir>/<pod>_<namespace>_<container>-<id>.log  all three, by container id
//    (none of the three names may hold '_', so the splits are exact). The container's name is
//    taken from, in order: the containers_log_dir entry for its id; the runtime's state; a
//    container directory under the pod's whose N.log is a link into the runtime's log of that
//    id (dockershim); the pod's only container directory, unless the runtime's state says the
//    id is the sandbox. Otherwise it stays empty, and display() shows the short id.
//
// A process in no container is the host: in_container false, display() "host".
// Results are cached per cgroup directory (its inode: on cgroup v2 the id that BPF's
// bpf_get_current_cgroup_id() returns) and dropped when the directory goes (forget_gone()).
// Not thread-safe.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpuscope {

enum class ContainerRuntime { kNone, kContainerd, kCrio, kDocker, kPodman, kUnknown };

// "containerd", "cri-o", "docker", "podman", "unknown"; "host" for kNone.
std::string_view runtime_name(ContainerRuntime r);

inline constexpr std::string_view kHostName = "host";
inline constexpr size_t kShortIdLen = 12;

struct ContainerInfo {
  bool resolved = false;  // false: the process's cgroup could not be read (it is gone); all else empty
  bool in_container = false;
  uint64_t cgroup_id = 0;  // the process's cgroup v2 directory inode; 0 where there is none
  ContainerRuntime runtime = ContainerRuntime::kNone;
  std::string container_id;  // 64 hex digits
  std::string name;          // the container's name; empty where nothing on disk names it
  std::string pod, ns, pod_uid;
  bool sandbox = false;  // the pod's sandbox (pause) container, by the runtime's state

  bool host() const { return resolved && !in_container; }
  bool kubernetes() const { return !pod_uid.empty() || !pod.empty(); }
  std::string short_id() const { return container_id.substr(0, kShortIdLen); }
  // The name, else the short id; "host" on the host; "" when unresolved.
  std::string display() const;
  // `ref` is the full id, an id prefix of 12 to 63 hex digits, or the name.
  bool matches(std::string_view ref) const;
  bool in_pod(std::string_view pod_name) const { return !pod_name.empty() && pod == pod_name; }
  bool in_namespace(std::string_view name) const { return !name.empty() && ns == name; }
};

// An id prefix `ref` matching two different containers among `known` (a filter refuses it).
bool id_prefix_ambiguous(const std::vector<ContainerInfo>& known, std::string_view ref);

// What a cgroup path alone says (rule 1 above); runtime kUnknown for a bare id not under /docker.
struct CgroupMatch {
  ContainerRuntime runtime = ContainerRuntime::kNone;
  std::string container_id;
  std::string pod_uid;  // with dashes, as the kubelet's directories spell it
  bool kubepods = false;
  bool in_container() const { return !container_id.empty(); }
};
CgroupMatch parse_cgroup_path(std::string_view path);

// One line of /proc/PID/cgroup: "0::/path" (v2) or "4:memory:/path", "1:name=systemd:/path" (v1).
struct CgroupLine {
  std::string controllers;  // "" for v2
  std::string path;
  bool v2() const { return controllers.empty(); }
};
std::vector<CgroupLine> parse_proc_cgroup(std::string_view text);
// The line that says where the process is: v2 when it names a container, else the first v1
// line that does, else v2, else the first line; nullptr when there is none.
const CgroupLine* relevant_cgroup_line(const std::vector<CgroupLine>& lines);

// Where the resolver reads. Tests point these into a temporary tree.
struct ContainerPaths {
  std::string proc_root = "/proc";
  std::string cgroup_root = "/sys/fs/cgroup";  // v2 is here, or at unified/ on a hybrid host
  std::string pods_dir = "/var/log/pods";
  std::string containers_log_dir = "/var/log/containers";
  std::string docker_root = "/var/lib/docker";
  std::string containerd_state = "/run/containerd";
  // containers/storage graph and run roots (Podman's and CRI-O's).
  std::vector<std::string> storage_roots = {"/var/lib/containers/storage", "/run/containers/storage"};

  // The same paths below `root`, for a host filesystem mounted elsewhere (e.g. /host).
  ContainerPaths under(const std::string& root) const;
  // The kubelet's pod log directory `dir`, with its containers/ log links beside it (--pods-dir).
  void set_pods_dir(const std::string& dir);
  // The runtimes' state below `root` as on a host: root/var/lib/docker, root/run/containerd,
  // root/var/lib/containers/storage, root/run/containers/storage (--runtime-root).
  void set_runtime_root(const std::string& root);
  static ContainerPaths with_pods_dir(const std::string& dir) {
    ContainerPaths p;
    p.set_pods_dir(dir);
    return p;
  }
};

class ContainerResolver {
 public:
  explicit ContainerResolver(ContainerPaths paths = {}, size_t max_entries = 4096);

  // Never throws; unreadable sources leave their fields empty.
  ContainerInfo resolve(pid_t pid);
  // The same from /proc/PID/cgroup's text.
  ContainerInfo resolve_cgroup_text(std::string_view proc_cgroup);
  // From a cgroup v2 id (a BPF event's); the v2 tree is walked on a miss, at most once per
  // `walk_interval_ms`. resolved false when no directory has that id.
  ContainerInfo resolve_cgroup_id(uint64_t cgroup_id);
  // Every cgroup v2 directory in a container, nested ones included, from a walk of the tree:
  // the set of cgroup ids a BPF filter on a container needs.
  std::vector<ContainerInfo> containers();

  // Drops the entries whose cgroup directory is gone (or was made anew), and those of
  // containers not yet named, to be read again (a kubelet log directory may come later).
  // Returns how many went.
  size_t forget_gone();
  size_t cache_size() const { return cache_.size(); }
  // The kubelet's pod log directory can be listed (--pod and -n need it).
  bool kubernetes_readable() const;
  const ContainerPaths& paths() const { return paths_; }
  const std::string& cgroup2_root() const { return v2_root_; }
  void set_walk_interval_ms(int ms) { walk_interval_ms_ = ms; }

 private:
  using Key = std::pair<uint64_t, uint64_t>;  // the directory's st_dev, st_ino
  struct Entry {
    ContainerInfo info;
    std::string dir;
    uint64_t last_use = 0;
  };
  ContainerInfo resolve_lines(const std::vector<CgroupLine>& lines);
  ContainerInfo describe(const CgroupMatch& m);
  void name_from_state(ContainerInfo& c, bool bare_id) const;
  void name_from_kubelet(ContainerInfo& c) const;
  const ContainerInfo& remember(const Key& key, std::string dir, ContainerInfo info);
  std::string v1_dir(const CgroupLine& line) const;
  void walk_v2(std::vector<std::pair<uint64_t, std::string>>* dirs);

  ContainerPaths paths_;
  size_t max_entries_;
  std::string v2_root_;
  int walk_interval_ms_ = 1000;
  int64_t last_walk_ms_ = -1;
  uint64_t use_seq_ = 0;
  std::map<Key, Entry> cache_;
  std::map<uint64_t, std::string> v2_dirs_;  // cgroup id -> path below v2_root_, from the last walk
};

// The container of each process for a command's collectors and views: resolved when a process
// is first asked for and kept for its life, so that a process that has exited by the time its
// events are shown keeps its names. Thread-safe (the agent's HTTP thread asks too).
class ProcessContainers {
 public:
  explicit ProcessContainers(ContainerPaths paths = {}, int64_t keep_gone_ms = kKeepGoneMs)
      : resolver_(std::move(paths)), keep_gone_ms_(keep_gone_ms) {}
  ContainerInfo of(pid_t pid);
  // Resolves the process anew (after an exec it may have moved) and keeps that.
  ContainerInfo refresh(pid_t pid);
  // A process gone before it was asked for, by the cgroup v2 id its events carry.
  ContainerInfo of_cgroup(pid_t pid, uint64_t cgroup_id);
  void forget(pid_t pid);
  // Drops processes gone for keep_gone_ms (their last events may still be on their way to a
  // view) and cgroups gone (ContainerResolver::forget_gone).
  void sweep();
  std::vector<ContainerInfo> containers();
  bool kubernetes_readable() const;
  const ContainerPaths& paths() const { return resolver_.paths(); }
  // Where cgroup v2 is mounted, when it is (the ids BPF sees are its directories' inodes).
  bool has_cgroup_v2() const;
  size_t processes() const;
  size_t cgroups() const;

  static constexpr size_t kMaxProcesses = 65536;
  static constexpr int64_t kKeepGoneMs = 10000;

 private:
  struct Known {
    ContainerInfo info;
    int64_t gone_ms = 0;  // when a sweep first found the process gone
  };
  mutable std::mutex mu_;
  ContainerResolver resolver_;
  int64_t keep_gone_ms_;
  std::unordered_map<pid_t, Known> by_pid_;
};

}  // namespace gpuscope
