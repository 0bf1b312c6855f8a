// The container resolver (src/core/containers.h): cgroup path shapes of each runtime, cgroup
// driver and cgroup version (most taken from real /proc/PID/cgroup files), and fake kubelet,
// runtime-state and cgroup trees in a temporary directory.
#include "core/containers.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "core/system.h"

namespace fs = std::filesystem;
using gpuscope::CgroupMatch;
using gpuscope::ContainerInfo;
using gpuscope::ContainerPaths;
using gpuscope::ContainerResolver;
using gpuscope::ContainerRuntime;
using gpuscope::parse_cgroup_path;
using gpuscope::parse_proc_cgroup;
using gpuscope::relevant_cgroup_line;
using R = ContainerRuntime;

namespace {

// A 64-hex id starting with `head` (distinct heads give distinct short ids).
std::string mkid(std::string head) {
  while (head.size() < 64) head += "0123456789abcdef"[head.size() % 16];
  return head;
}

struct PathCase {
  const char* path;
  R runtime;
  const char* id;
  const char* pod_uid;
};

}  // namespace

TEST(ContainersParse, EveryRuntimeDriverAndVersion) {
  const PathCase cases[] = {
      // containerd, systemd driver (cgroup v1 and v2 write the same path; Bottlerocket)
      {"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poddd1bf9d1_241d_47f5_8e25_12de83135812.slice/"
       "cri-containerd-f45298cd514d1930c4fe3afc4412e59547f7e3148fddd22ca33cefce046eb830.scope",
       R::kContainerd, "f45298cd514d1930c4fe3afc4412e59547f7e3148fddd22ca33cefce046eb830",
       "dd1bf9d1-241d-47f5-8e25-12de83135812"},
      // containerd, systemd driver, a Guaranteed pod (no QoS slice)
      {"/kubepods.slice/kubepods-pod0a3c5c1e_4b3a_4f6e_9d61_2f1d1b7e9a10.slice/"
       "cri-containerd-5dd96d5394ca930a854a390ea46f7515a8bc930123eb3251ba20f2708a38fc61.scope",
       R::kContainerd, "5dd96d5394ca930a854a390ea46f7515a8bc930123eb3251ba20f2708a38fc61",
       "0a3c5c1e-4b3a-4f6e-9d61-2f1d1b7e9a10"},
      // containerd 1.2, cgroupfs driver: a bare id (kUnknown until the runtime's state says)
      {"/kubepods/besteffort/poda36d0c1d-0b26-4451-8d80-9c195e004afa/"
       "5dd96d5394ca930a854a390ea46f7515a8bc930123eb3251ba20f2708a38fc61",
       R::kUnknown, "5dd96d5394ca930a854a390ea46f7515a8bc930123eb3251ba20f2708a38fc61",
       "a36d0c1d-0b26-4451-8d80-9c195e004afa"},
      // containerd 1.4 with a systemd cgroupsPath taken literally by the cgroupfs driver
      {"/system.slice/containerd.service/kubepods-besteffort-pod2105e389_7471_476e_a50f_6074cef29bbd.slice:"
       "cri-containerd:d3d8ccf5cca91931c6285c1d7472c413dd5a7700fddc0aa9f89a9ac7008b003e",
       R::kContainerd, "d3d8ccf5cca91931c6285c1d7472c413dd5a7700fddc0aa9f89a9ac7008b003e",
       "2105e389-7471-476e-a50f-6074cef29bbd"},
      // CRI-O 1.19, systemd driver
      {"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod8ca306fa_3c03_47fa_97dd_19979c345572.slice/"
       "crio-d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607.scope",
       R::kCrio, "d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607",
       "8ca306fa-3c03-47fa-97dd-19979c345572"},
      // CRI-O 1.17, a static pod (its UID is a 32-hex hash of the manifest)
      {"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod487a0dc6dccaeefbcfedba7a7ce1ca18.slice/"
       "crio-7a1fd6fe8cdfbd44dc78c4cc85dad7031eaab4365801684cad0aabdeaf863f9e.scope",
       R::kCrio, "7a1fd6fe8cdfbd44dc78c4cc85dad7031eaab4365801684cad0aabdeaf863f9e",
       "487a0dc6dccaeefbcfedba7a7ce1ca18"},
      // CRI-O, cgroupfs driver
      {"/kubepods/burstable/pod8ca306fa-3c03-47fa-97dd-19979c345572/"
       "crio-d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607",
       R::kCrio, "d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607",
       "8ca306fa-3c03-47fa-97dd-19979c345572"},
      // CRI-O on cgroup v2 with crun: the processes are in a sub-cgroup of the scope
      {"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8ca306fa_3c03_47fa_97dd_19979c345572.slice/"
       "crio-d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607.scope/container",
       R::kCrio, "d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607",
       "8ca306fa-3c03-47fa-97dd-19979c345572"},
      // dockershim / cri-dockerd, systemd driver
      {"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod045b1e35_7f13_11e7_ac42_0050568ffca0.slice/"
       "docker-b5b6f2da8008be266864f896f93789762b2ce50792114a5c5f2cc3315af0bc70.scope",
       R::kDocker, "b5b6f2da8008be266864f896f93789762b2ce50792114a5c5f2cc3315af0bc70",
       "045b1e35-7f13-11e7-ac42-0050568ffca0"},
      // a process in a sub-cgroup of a cgroupfs container (kube-proxy)
      {"/kubepods/besteffort/podf8a694f2-7c08-11e9-98da-000c29077430/"
       "c04e0a88a1de067f25bece337d4dbb897396e0b623c2a65330850fc9823f1903/kube-proxy",
       R::kUnknown, "c04e0a88a1de067f25bece337d4dbb897396e0b623c2a65330850fc9823f1903",
       "f8a694f2-7c08-11e9-98da-000c29077430"},
      // Docker, systemd driver (CentOS, and any cgroup v2 host)
      {"/system.slice/docker-9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d.scope", R::kDocker,
       "9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d", ""},
      // Docker, cgroupfs driver (Ubuntu)
      {"/docker/31cb02944da7a12196a193cf0e0f6c226d7c453a1db62e65ba98287593a2ee30", R::kDocker,
       "31cb02944da7a12196a193cf0e0f6c226d7c453a1db62e65ba98287593a2ee30", ""},
      // docker-in-docker (RancherOS): the inner container
      {"/docker/a9a5ad238e59234193ee7ec3fcff5e735b3708ea1068826952255b69e3cfa413/docker/"
       "ec08435e04266c5ba381fccbb829f626d11d8ddf5f8f547263c7a2d79ab4787a",
       R::kDocker, "ec08435e04266c5ba381fccbb829f626d11d8ddf5f8f547263c7a2d79ab4787a", ""},
      // Docker with --cgroup-parent=/ (Debian)
      {"/4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970", R::kUnknown,
       "4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970", ""},
      // Podman rootful, systemd driver, crun's sub-cgroup
      {"/machine.slice/libpod-3b3dcf3f4e1e3c1b1e0d8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c.scope/container",
       R::kPodman, "3b3dcf3f4e1e3c1b1e0d8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c", ""},
      // Podman in a pod (the pod's slice holds no pod UID of Kubernetes)
      {"/machine.slice/machine-libpod_pod_8f3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b.slice/"
       "libpod-3b3dcf3f4e1e3c1b1e0d8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c.scope",
       R::kPodman, "3b3dcf3f4e1e3c1b1e0d8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c", ""},
      // Podman rootless
      {"/user.slice/user-1000.slice/user@1000.service/user.slice/"
       "libpod-3b3dcf3f4e1e3c1b1e0d8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c.scope",
       R::kPodman, "3b3dcf3f4e1e3c1b1e0d8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c", ""},
      // Podman, cgroupfs driver
      {"/libpod_parent/libpod-3b3dcf3f4e1e3c1b1e0d8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c", R::kPodman,
       "3b3dcf3f4e1e3c1b1e0d8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c", ""},
      // the runtimes' monitors are not their containers
      {"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod8ca306fa_3c03_47fa_97dd_19979c345572.slice/"
       "crio-conmon-d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607.scope",
       R::kNone, "", "8ca306fa-3c03-47fa-97dd-19979c345572"},
      {"/machine.slice/libpod-conmon-3b3dcf3f4e1e3c1b1e0d8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c.scope", R::kNone,
       "", ""},
      // host processes
      {"/", R::kNone, "", ""},
      {"/user.slice/user-1000.slice/session-2.scope", R::kNone, "", ""},
      {"/system.slice/containerd.service", R::kNone, "", ""},
      {"/init.scope", R::kNone, "", ""},
      {"/process_api/7e493caa492fdbc5c3457d4c2ac13e2d", R::kNone, "", ""},
      // not quite ids: 63 and 65 digits, upper case
      {"/docker/31cb02944da7a12196a193cf0e0f6c226d7c453a1db62e65ba98287593a2ee3", R::kNone, "", ""},
      {"/docker/31cb02944da7a12196a193cf0e0f6c226d7c453a1db62e65ba98287593a2ee300", R::kNone, "", ""},
      {"/docker/31CB02944DA7A12196A193CF0E0F6C226D7C453A1DB62E65BA98287593A2EE30", R::kNone, "", ""},
  };
  for (auto& c : cases) {
    SCOPED_TRACE(c.path);
    CgroupMatch m = parse_cgroup_path(c.path);
    EXPECT_EQ(m.runtime, c.runtime);
    EXPECT_EQ(m.container_id, c.id);
    EXPECT_EQ(m.pod_uid, c.pod_uid);
    EXPECT_EQ(m.kubepods, std::string_view(c.path).find("kubepods") != std::string_view::npos);
  }
}

TEST(ContainersParse, ProcCgroupLinesOfV1V2AndHybridHosts) {
  // cgroup v1 only (cri-o 1.19): every controller line names the container; rdma does not.
  auto v1 = parse_proc_cgroup(
      "12:devices:/kubepods.slice/kubepods-besteffort.slice/"
      "kubepods-besteffort-pod8ca306fa_3c03_47fa_97dd_19979c345572.slice/"
      "crio-d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607.scope\n"
      "6:rdma:/\n"
      "2:net_cls,net_prio:/kubepods.slice/kubepods-besteffort.slice/"
      "kubepods-besteffort-pod8ca306fa_3c03_47fa_97dd_19979c345572.slice/"
      "crio-d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607.scope\n");
  ASSERT_EQ(v1.size(), 3u);
  EXPECT_EQ(v1[1].controllers, "rdma");
  EXPECT_EQ(v1[1].path, "/");
  ASSERT_NE(relevant_cgroup_line(v1), nullptr);
  EXPECT_EQ(relevant_cgroup_line(v1)->controllers, "devices");

  // A hybrid host whose containers live in the v1 hierarchies (the v2 line says "/").
  auto hybrid = parse_proc_cgroup(
      "9:name=systemd:/\n4:memory:/docker/31cb02944da7a12196a193cf0e0f6c226d7c453a1db62e65ba98287593a2ee30\n0::/\n");
  ASSERT_EQ(hybrid.size(), 3u);
  EXPECT_TRUE(hybrid[2].v2());
  EXPECT_EQ(relevant_cgroup_line(hybrid)->controllers, "memory");

  // The v2 line wins when it names the container.
  auto v2 = parse_proc_cgroup(
      "1:name=systemd:/\n0::/system.slice/docker-9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d"
      ".scope\n");
  EXPECT_TRUE(relevant_cgroup_line(v2)->v2());

  // A host process: the v2 line, else the first.
  EXPECT_TRUE(relevant_cgroup_line(parse_proc_cgroup("1:cpu:/\n0::/init.scope\n"))->v2());
  EXPECT_EQ(relevant_cgroup_line(parse_proc_cgroup("3:cpuset:/\n1:cpu:/\n"))->controllers, "cpuset");

  // A path with colons in it is kept whole; lines that do not fit are skipped.
  auto colons = parse_proc_cgroup(
      "11:pids:/system.slice/containerd.service/kubepods-besteffort-pod2105e389_7471_476e_a50f_6074cef29bbd.slice:"
      "cri-containerd:d3d8ccf5cca91931c6285c1d7472c413dd5a7700fddc0aa9f89a9ac7008b003e\nnonsense\n\n7:x\n");
  ASSERT_EQ(colons.size(), 1u);
  EXPECT_TRUE(
      colons[0].path.ends_with(":cri-containerd:d3d8ccf5cca91931c6285c1d7472c413dd5a7700fddc0aa9f89a9ac7008b003e"));
  EXPECT_TRUE(parse_proc_cgroup("").empty());
  EXPECT_EQ(relevant_cgroup_line({}), nullptr);
}

TEST(ContainersParse, DisplayAndMatching) {
  ContainerInfo c;
  EXPECT_EQ(c.display(), "") << "unresolved";
  EXPECT_FALSE(c.host());
  c.resolved = true;
  EXPECT_EQ(c.display(), "host");
  EXPECT_TRUE(c.host());
  EXPECT_FALSE(c.matches("host")) << "--host is its own filter";
  EXPECT_EQ(gpuscope::runtime_name(c.runtime), "host");

  c.in_container = true;
  c.container_id = mkid("a1b2c3d4e5f6");
  c.runtime = R::kContainerd;
  EXPECT_EQ(c.display(), "a1b2c3d4e5f6");
  EXPECT_EQ(c.short_id(), "a1b2c3d4e5f6");
  c.name = "trainer";
  c.pod = "train-0";
  c.ns = "ml";
  EXPECT_EQ(c.display(), "trainer");
  EXPECT_FALSE(c.host());
  EXPECT_TRUE(c.matches("trainer"));
  EXPECT_TRUE(c.matches(c.container_id));
  EXPECT_TRUE(c.matches("a1b2c3d4e5f6"));
  EXPECT_TRUE(c.matches(c.container_id.substr(0, 63)));
  EXPECT_FALSE(c.matches("a1b2c3d4e5f")) << "under 12 digits";
  EXPECT_FALSE(c.matches("A1B2C3D4E5F6"));
  EXPECT_FALSE(c.matches("a1b2c3d4e5f7"));
  EXPECT_FALSE(c.matches("train"));
  EXPECT_FALSE(c.matches(""));
  EXPECT_TRUE(c.in_pod("train-0"));
  EXPECT_FALSE(c.in_pod("train"));
  EXPECT_TRUE(c.in_namespace("ml"));
  EXPECT_FALSE(c.in_namespace(""));
  EXPECT_EQ(gpuscope::runtime_name(c.runtime), "containerd");
  EXPECT_EQ(gpuscope::runtime_name(R::kCrio), "cri-o");

  ContainerInfo d = c;
  d.container_id = mkid("a1b2c3d4e5f6ff");
  EXPECT_TRUE(gpuscope::id_prefix_ambiguous({c, d}, "a1b2c3d4e5f6"));
  EXPECT_FALSE(gpuscope::id_prefix_ambiguous({c, d}, "a1b2c3d4e5f6ff"));
  EXPECT_FALSE(gpuscope::id_prefix_ambiguous({c, c}, "a1b2c3d4e5f6")) << "one container in two cgroups";
  EXPECT_FALSE(gpuscope::id_prefix_ambiguous({c, d}, "trainer"));
}

TEST(ContainersParse, PathsUnderAnotherRoot) {
  ContainerPaths p = ContainerPaths{}.under("/host/");
  EXPECT_EQ(p.proc_root, "/host/proc");
  EXPECT_EQ(p.cgroup_root, "/host/sys/fs/cgroup");
  EXPECT_EQ(p.pods_dir, "/host/var/log/pods");
  EXPECT_EQ(p.containers_log_dir, "/host/var/log/containers");
  EXPECT_EQ(p.docker_root, "/host/var/lib/docker");
  EXPECT_EQ(p.containerd_state, "/host/run/containerd");
  EXPECT_EQ(p.storage_roots.at(1), "/host/run/containers/storage");
}

// Fake /proc, /sys/fs/cgroup (v2), /var/log and runtime state under a temporary root.
class Containers : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("gs-containers-" + std::to_string(getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    paths_ = ContainerPaths{}.under(root_.string());
    write(paths_.cgroup_root + "/cgroup.controllers", "cpu memory pids\n");
  }
  void TearDown() override { fs::remove_all(root_); }

  static void write(const std::string& path, const std::string& text) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << text;
  }
  // A cgroup v2 directory; returns its id.
  uint64_t cgroup(const std::string& path) {
    fs::create_directories(paths_.cgroup_root + path);
    struct stat st;
    EXPECT_EQ(stat((paths_.cgroup_root + path).c_str(), &st), 0);
    return st.st_ino;
  }
  // A process in the v2 cgroup `path` (the directory made too).
  uint64_t process(pid_t pid, const std::string& path) {
    write(paths_.proc_root + "/" + std::to_string(pid) + "/cgroup", "0::" + path + "\n");
    return cgroup(path);
  }
  // The kubelet's directories for one container of a pod.
  void kubelet_logs(const std::string& ns, const std::string& pod, const std::string& uid, const std::string& ctr,
                    const std::string& id, bool containers_link = true) {
    std::string dir = paths_.pods_dir + "/" + ns + "_" + pod + "_" + uid + "/" + ctr;
    write(dir + "/0.log", "");
    if (containers_link) {
      fs::create_directories(paths_.containers_log_dir);
      fs::create_symlink(dir + "/0.log",
                         paths_.containers_log_dir + "/" + pod + "_" + ns + "_" + ctr + "-" + id + ".log");
    }
  }
  static std::string systemd_pod(const std::string& uid) {
    std::string u = uid;
    std::replace(u.begin(), u.end(), '-', '_');
    return "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u + ".slice";
  }

  fs::path root_;
  ContainerPaths paths_;
};

const std::string kUid1 = "6f1c7e52-1d4b-4d0e-9a57-3b0f6c1e2d11";
const std::string kUid2 = "0b9e5f3a-8c2d-4e71-b6a4-7d2c9e1f4a22";

TEST_F(Containers, KubernetesNamesFromTheKubeletsLogDirectories) {
  const std::string a = mkid("aaaa00000001"), b = mkid("bbbb00000002"), c = mkid("cccc00000003");
  kubelet_logs("ml", "train-0", kUid1, "trainer", a);
  kubelet_logs("ml", "train-0", kUid1, "sidecar", b);
  kubelet_logs("web", "front-7d9f", kUid2, "nginx", c);
  auto ida = process(101, systemd_pod(kUid1) + "/cri-containerd-" + a + ".scope");
  process(102, systemd_pod(kUid1) + "/cri-containerd-" + b + ".scope");
  process(103, "/kubepods/burstable/pod" + kUid2 + "/" + c);  // cgroupfs driver

  ContainerResolver r(paths_);
  ContainerInfo ia = r.resolve(101);
  EXPECT_TRUE(ia.resolved);
  EXPECT_TRUE(ia.in_container);
  EXPECT_EQ(ia.cgroup_id, ida);
  EXPECT_EQ(ia.runtime, R::kContainerd);
  EXPECT_EQ(ia.container_id, a);
  EXPECT_EQ(ia.name, "trainer");
  EXPECT_EQ(ia.pod, "train-0");
  EXPECT_EQ(ia.ns, "ml");
  EXPECT_EQ(ia.pod_uid, kUid1);
  EXPECT_EQ(ia.display(), "trainer");
  EXPECT_EQ(r.resolve(102).name, "sidecar");
  ContainerInfo ic = r.resolve(103);
  EXPECT_EQ(ic.name, "nginx");
  EXPECT_EQ(ic.pod, "front-7d9f");
  EXPECT_EQ(ic.ns, "web");
  EXPECT_EQ(ic.runtime, R::kContainerd) << "a bare id under /kubepods that no runtime's state holds";
  EXPECT_TRUE(r.kubernetes_readable());
}

TEST_F(Containers, APodsOnlyContainerDirectoryNamesItButNotItsSandbox) {
  const std::string app = mkid("dddd00000004"), pause = mkid("eeee00000005");
  kubelet_logs("default", "solo", kUid1, "app", app, /*containers_link=*/false);
  process(201, systemd_pod(kUid1) + "/cri-containerd-" + app + ".scope");
  process(202, systemd_pod(kUid1) + "/cri-containerd-" + pause + ".scope");
  write(paths_.containerd_state + "/io.containerd.runtime.v2.task/k8s.io/" + pause + "/config.json",
        R"({"ociVersion":"1.1.0","annotations":{"io.kubernetes.cri.container-type":"sandbox",
            "io.kubernetes.cri.sandbox-name":"solo","io.kubernetes.cri.sandbox-namespace":"default",
            "io.kubernetes.cri.sandbox-uid":")" +
            kUid1 + R"("}})");
  ContainerResolver r(paths_);
  ContainerInfo ia = r.resolve(201);
  EXPECT_EQ(ia.name, "app");
  EXPECT_EQ(ia.pod, "solo");
  EXPECT_FALSE(ia.sandbox);
  ContainerInfo ip = r.resolve(202);
  EXPECT_TRUE(ip.sandbox);
  EXPECT_EQ(ip.name, "");
  EXPECT_EQ(ip.pod, "solo");
  EXPECT_EQ(ip.display(), pause.substr(0, 12));
}

TEST_F(Containers, DockershimLogLinksNameTheContainerOfTheirId) {
  const std::string a = mkid("ffff00000006"), b = mkid("abab00000007");
  for (auto& [ctr, id] : {std::pair{"first", a}, std::pair{"second", b}}) {
    std::string dir = paths_.pods_dir + "/ml_legacy_" + kUid1 + "/" + ctr;
    fs::create_directories(dir);
    fs::create_symlink(paths_.docker_root + "/containers/" + id + "/" + id + "-json.log", dir + "/0.log");
  }
  process(301, systemd_pod(kUid1) + "/docker-" + b + ".scope");
  ContainerResolver r(paths_);
  ContainerInfo i = r.resolve(301);
  EXPECT_EQ(i.runtime, R::kDocker);
  EXPECT_EQ(i.name, "second");
  EXPECT_EQ(i.pod, "legacy");
  EXPECT_EQ(i.ns, "ml");
}

TEST_F(Containers, ContainerdStateNamesWithoutTheKubelet) {
  const std::string k = mkid("cdcd00000008"), n = mkid("cdcd00000009");
  write(paths_.containerd_state + "/io.containerd.runtime.v2.task/k8s.io/" + k + "/config.json",
        R"({"annotations":{"io.kubernetes.cri.container-type":"container","io.kubernetes.cri.container-name":"worker",
            "io.kubernetes.cri.sandbox-name":"batch-x","io.kubernetes.cri.sandbox-namespace":"jobs"}})");
  write(paths_.containerd_state + "/io.containerd.runtime.v2.task/default/" + n + "/config.json",
        R"({"annotations":{"nerdctl/name":"cuda-dev"}})");
  process(401, systemd_pod(kUid2) + "/cri-containerd-" + k + ".scope");
  process(402, "/default/" + n);  // nerdctl, cgroupfs driver: a bare id under its namespace
  ContainerResolver r(paths_);
  ContainerInfo ik = r.resolve(401);
  EXPECT_EQ(ik.name, "worker");
  EXPECT_EQ(ik.pod, "batch-x");
  EXPECT_EQ(ik.ns, "jobs");
  EXPECT_EQ(ik.pod_uid, kUid2);
  EXPECT_FALSE(r.kubernetes_readable()) << "no pods dir in this tree";
  ContainerInfo in = r.resolve(402);
  EXPECT_EQ(in.runtime, R::kContainerd);
  EXPECT_EQ(in.name, "cuda-dev");
  EXPECT_FALSE(in.kubernetes());
}

TEST_F(Containers, DockerConfigNamesItsContainers) {
  const std::string s = mkid("d0d000000010"), f = mkid("d0d000000011"), k = mkid("d0d000000012"),
                    p = mkid("d0d000000013");
  write(
      paths_.docker_root + "/containers/" + s + "/config.v2.json",
      R"({"StreamConfig":{},"State":{"Running":true,"Pid":4242},"ID":")" + s +
          R"(","Path":"python3","Config":{"Hostname":"3f2c","Labels":{}},"Name":"/happy_turing","Driver":"overlay2"})");
  write(paths_.docker_root + "/containers/" + f + "/config.v2.json", R"({"ID":")" + f + R"(","Name":"/llm-serve"})");
  write(paths_.docker_root + "/containers/" + k + "/config.v2.json",
        R"({"Name":"/k8s_infer_infer-5c7_serving_)" + kUid1 + R"(_0","Config":{"Labels":{
            "io.kubernetes.container.name":"infer","io.kubernetes.pod.name":"infer-5c7",
            "io.kubernetes.pod.namespace":"serving","io.kubernetes.pod.uid":")" +
            kUid1 + R"(","io.kubernetes.docker.type":"container"}}})");
  write(paths_.docker_root + "/containers/" + p + "/config.v2.json",
        R"({"Name":"/k8s_POD_infer-5c7_serving_)" + kUid1 + R"(_0","Config":{"Labels":{
            "io.kubernetes.docker.type":"podsandbox"}}})");
  process(501, "/system.slice/docker-" + s + ".scope");
  process(502, "/docker/" + f);
  process(503, "/kubepods/pod" + kUid1 + "/" + k);  // dockershim, cgroupfs driver
  process(504, "/kubepods/pod" + kUid1 + "/" + p);
  ContainerResolver r(paths_);
  ContainerInfo is = r.resolve(501);
  EXPECT_EQ(is.runtime, R::kDocker);
  EXPECT_EQ(is.name, "happy_turing");
  EXPECT_FALSE(is.kubernetes());
  EXPECT_EQ(r.resolve(502).name, "llm-serve");
  ContainerInfo ik = r.resolve(503);
  EXPECT_EQ(ik.runtime, R::kDocker) << "a bare id that Docker's state holds";
  EXPECT_EQ(ik.name, "infer");
  EXPECT_EQ(ik.pod, "infer-5c7");
  EXPECT_EQ(ik.ns, "serving");
  ContainerInfo ip = r.resolve(504);
  EXPECT_TRUE(ip.sandbox);
  EXPECT_EQ(ip.name, "");
  EXPECT_EQ(ip.pod, "infer-5c7");
}

TEST_F(Containers, PodmanAndCrioStorageNamesTheirContainers) {
  const std::string web = mkid("babe00000014"), tmp = mkid("babe00000015"), crio = mkid("babe00000016");
  write(paths_.storage_roots[0] + "/overlay-containers/containers.json",
        R"([{"id":")" + web + R"(","names":["web"],"image":"e4720093a3c1","layer":"9d8a",
             "metadata":"{\"image-name\":\"docker.io/library/nginx:latest\",\"name\":\"web\"}",
             "created":"2024-05-01T10:00:00Z","flags":{"MountLabel":""}},
            {"id":")" +
            crio + R"(","names":["k8s_decoder_asr-0_speech_)" + kUid2 + R"(_1"],"image":"77aa"}])");
  write(paths_.storage_roots[1] + "/overlay-containers/volatile-containers.json",
        R"([{"id":")" + tmp + R"(","names":["rm-me"]}])");
  process(601, "/machine.slice/libpod-" + web + ".scope/container");
  process(602, "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + tmp + ".scope");
  process(603, systemd_pod(kUid2) + "/crio-" + crio + ".scope");
  ContainerResolver r(paths_);
  ContainerInfo iw = r.resolve(601);
  EXPECT_EQ(iw.runtime, R::kPodman);
  EXPECT_EQ(iw.name, "web");
  EXPECT_EQ(r.resolve(602).name, "rm-me");
  ContainerInfo ic = r.resolve(603);
  EXPECT_EQ(ic.runtime, R::kCrio);
  EXPECT_EQ(ic.name, "decoder");
  EXPECT_EQ(ic.pod, "asr-0");
  EXPECT_EQ(ic.ns, "speech");
}

TEST_F(Containers, UnnamedContainersShowTheirShortId) {
  const std::string id = mkid("c0ffee000017");
  process(701, "/system.slice/cri-containerd-" + id + ".scope");
  ContainerResolver r(paths_);
  ContainerInfo i = r.resolve(701);
  EXPECT_TRUE(i.in_container);
  EXPECT_EQ(i.name, "");
  EXPECT_EQ(i.display(), "c0ffee000017");
}

TEST_F(Containers, HostProcessesAndProcessesGone) {
  auto id = process(801, "/user.slice/user-1000.slice/session-3.scope");
  write(paths_.proc_root + "/802/cgroup", "0::/\n");
  ContainerResolver r(paths_);
  ContainerInfo h = r.resolve(801);
  EXPECT_TRUE(h.resolved);
  EXPECT_TRUE(h.host());
  EXPECT_FALSE(h.in_container);
  EXPECT_EQ(h.cgroup_id, id);
  EXPECT_EQ(h.runtime, R::kNone);
  EXPECT_EQ(h.display(), "host");
  EXPECT_EQ(h.container_id, "");
  EXPECT_TRUE(r.resolve(802).host());
  ContainerInfo gone = r.resolve(803);
  EXPECT_FALSE(gone.resolved);
  EXPECT_FALSE(gone.host());
  EXPECT_EQ(gone.display(), "");
}

TEST_F(Containers, NestedCgroupsResolveToTheirContainer) {
  const std::string id = mkid("ae5ed0000018");
  kubelet_logs("ml", "nested", kUid1, "main", id);
  std::string scope = systemd_pod(kUid1) + "/cri-containerd-" + id + ".scope";
  auto top = process(901, scope);
  auto sub = process(902, scope + "/init.scope/worker");
  ContainerResolver r(paths_);
  ContainerInfo a = r.resolve(901), b = r.resolve(902);
  EXPECT_EQ(b.container_id, id);
  EXPECT_EQ(b.name, "main");
  EXPECT_EQ(b.pod, "nested");
  EXPECT_EQ(a.cgroup_id, top);
  EXPECT_EQ(b.cgroup_id, sub) << "the id BPF reports for the process";
}

TEST_F(Containers, HybridHostResolvesFromTheV1Hierarchy) {
  // v2 at unified/, the container in the memory hierarchy only.
  fs::remove(paths_.cgroup_root + "/cgroup.controllers");
  write(paths_.cgroup_root + "/unified/cgroup.controllers", "");
  const std::string id = mkid("4b1d00000019");
  fs::create_directories(paths_.cgroup_root + "/memory/docker/" + id);
  fs::create_directories(paths_.cgroup_root + "/cpu,cpuacct/docker/" + id);
  write(paths_.docker_root + "/containers/" + id + "/config.v2.json", R"({"Name":"/old-school"})");
  write(paths_.proc_root + "/1001/cgroup",
        "5:cpu,cpuacct:/docker/" + id + "\n4:memory:/docker/" + id + "\n1:name=systemd:/\n0::/\n");
  ContainerResolver r(paths_);
  EXPECT_EQ(r.cgroup2_root(), paths_.cgroup_root + "/unified");
  ContainerInfo i = r.resolve(1001);
  EXPECT_EQ(i.name, "old-school");
  struct stat st;
  ASSERT_EQ(stat((paths_.cgroup_root + "/unified").c_str(), &st), 0);
  EXPECT_EQ(i.cgroup_id, st.st_ino) << "BPF sees the v2 root for every process here";
  EXPECT_EQ(r.cache_size(), 1u) << "keyed by the v1 directory";
  fs::remove_all(paths_.cgroup_root + "/cpu,cpuacct/docker/" + id);
  EXPECT_EQ(r.forget_gone(), 1u);
}

TEST_F(Containers, CachedPerCgroupAndDroppedWhenTheCgroupGoes) {
  const std::string id = mkid("cace00000020");
  const std::string cfg = paths_.docker_root + "/containers/" + id + "/config.v2.json";
  write(cfg, R"({"Name":"/first"})");
  std::string scope = "/system.slice/docker-" + id + ".scope";
  process(1101, scope);
  process(1102, scope);
  ContainerResolver r(paths_);
  EXPECT_EQ(r.resolve(1101).name, "first");
  write(cfg, R"({"Name":"/renamed"})");
  EXPECT_EQ(r.resolve(1102).name, "first") << "the second process of the cgroup is a cache hit";
  EXPECT_EQ(r.cache_size(), 1u);
  EXPECT_EQ(r.forget_gone(), 0u);
  EXPECT_EQ(r.cache_size(), 1u);

  fs::remove(paths_.cgroup_root + scope);
  EXPECT_EQ(r.forget_gone(), 1u);
  EXPECT_EQ(r.cache_size(), 0u);
  ContainerInfo uncached = r.resolve(1101);  // the process's file still names the removed cgroup
  EXPECT_EQ(uncached.name, "renamed");
  EXPECT_EQ(uncached.cgroup_id, 0u);
  EXPECT_EQ(r.cache_size(), 0u) << "nothing to key it by";

  auto fresh = cgroup(scope);
  ContainerInfo again = r.resolve(1101);
  EXPECT_EQ(again.cgroup_id, fresh);
  EXPECT_EQ(r.cache_size(), 1u);
}

TEST_F(Containers, UnnamedEntriesAreReadAgainAfterASweep) {
  const std::string id = mkid("1a7e00000021");
  process(1201, systemd_pod(kUid1) + "/cri-containerd-" + id + ".scope");
  ContainerResolver r(paths_);
  EXPECT_EQ(r.resolve(1201).name, "");
  kubelet_logs("ml", "late", kUid1, "slow-start", id);
  EXPECT_EQ(r.resolve(1201).name, "") << "cached";
  EXPECT_EQ(r.forget_gone(), 1u);
  EXPECT_EQ(r.resolve(1201).name, "slow-start");
}

TEST_F(Containers, TheCacheIsBounded) {
  ContainerResolver r(paths_, 2);
  std::vector<std::string> cfgs;
  for (int i = 0; i < 4; ++i) {
    std::string id = mkid("b0b0000000" + std::to_string(10 + i));
    cfgs.push_back(paths_.docker_root + "/containers/" + id + "/config.v2.json");
    write(cfgs.back(), R"({"Name":"/n)" + std::to_string(i) + R"("})");
    process(1300 + i, "/system.slice/docker-" + id + ".scope");
  }
  EXPECT_EQ(r.resolve(1300).name, "n0");
  EXPECT_EQ(r.resolve(1301).name, "n1");
  EXPECT_EQ(r.resolve(1300).name, "n0");  // 1301's entry is now the least recently used
  EXPECT_EQ(r.resolve(1302).name, "n2");
  EXPECT_EQ(r.cache_size(), 2u);
  for (auto& c : cfgs) write(c, R"({"Name":"/changed"})");
  EXPECT_EQ(r.resolve(1300).name, "n0") << "kept";
  EXPECT_EQ(r.resolve(1301).name, "changed") << "evicted, read again";
  EXPECT_LE(r.cache_size(), 2u);
}

TEST_F(Containers, ResolvesBpfCgroupIdsAndListsContainerCgroups) {
  const std::string a = mkid("1d1d00000022"), b = mkid("1d1d00000023"), c = mkid("1d1d00000024"),
                    d = mkid("1d1d00000025");
  kubelet_logs("ml", "p1", kUid1, "c1", a);
  kubelet_logs("ml", "p1", kUid1, "c2", b);
  kubelet_logs("ml", "p2", kUid2, "c1", c);
  kubelet_logs("ml", "p2", kUid2, "c2", d);
  auto ida = cgroup(systemd_pod(kUid1) + "/cri-containerd-" + a + ".scope");
  cgroup(systemd_pod(kUid1) + "/cri-containerd-" + b + ".scope");
  cgroup(systemd_pod(kUid2) + "/cri-containerd-" + c + ".scope");
  auto idd = cgroup(systemd_pod(kUid2) + "/cri-containerd-" + d + ".scope/sub");
  auto host = cgroup("/system.slice/sshd.service");
  cgroup(systemd_pod(kUid1) + "/crio-conmon-" + a + ".scope");

  ContainerResolver r(paths_);
  r.set_walk_interval_ms(0);
  ContainerInfo ia = r.resolve_cgroup_id(ida);
  EXPECT_EQ(ia.name, "c1");
  EXPECT_EQ(ia.pod, "p1");
  EXPECT_EQ(ia.cgroup_id, ida);
  ContainerInfo id = r.resolve_cgroup_id(idd);
  EXPECT_EQ(id.name, "c2");
  EXPECT_EQ(id.pod, "p2");
  EXPECT_TRUE(r.resolve_cgroup_id(host).host());
  EXPECT_FALSE(r.resolve_cgroup_id(987654321).resolved);

  auto all = r.containers();
  std::map<std::string, int> per_container;
  for (auto& i : all) {
    EXPECT_TRUE(i.in_container);
    EXPECT_NE(i.cgroup_id, 0u);
    per_container[i.pod + "/" + i.name]++;
  }
  // d's scope and its sub-cgroup: a BPF filter on it needs both ids.
  EXPECT_EQ(per_container, (std::map<std::string, int>{{"p1/c1", 1}, {"p1/c2", 1}, {"p2/c1", 1}, {"p2/c2", 2}}));
  auto sel = std::count_if(all.begin(), all.end(), [](auto& i) { return i.in_pod("p2") && i.matches("c2"); });
  EXPECT_EQ(sel, 2);

  fs::remove(paths_.cgroup_root + systemd_pod(kUid2) + "/cri-containerd-" + d + ".scope/sub");
  fs::remove(paths_.cgroup_root + systemd_pod(kUid2) + "/cri-containerd-" + d + ".scope");
  r.forget_gone();
  EXPECT_EQ(r.containers().size(), 3u);
  EXPECT_FALSE(r.resolve_cgroup_id(idd).resolved);
}

TEST_F(Containers, BadInputLeavesFieldsEmpty) {
  const std::string d = mkid("bad000000026"), c = mkid("bad000000027"), p = mkid("bad000000028"),
                    k = mkid("bad000000029");
  write(paths_.docker_root + "/containers/" + d + "/config.v2.json", R"({"Name": "/trunc)");
  write(paths_.containerd_state + "/io.containerd.runtime.v2.task/k8s.io/" + c + "/config.json",
        R"({"annotations":["io.kubernetes.cri.container-name","x"]})");
  write(paths_.storage_roots[0] + "/overlay-containers/containers.json", R"({"id":")" + p + R"(","names":"web"})");
  write(paths_.storage_roots[1] + "/overlay-containers/containers.json",
        R"([{"id":")" + p + R"(","names":[7]}, "junk", 3])");
  fs::create_directories(paths_.pods_dir + "/not-a-pod-dir");
  fs::create_directories(paths_.pods_dir + "/a_b_c_d_" + kUid1);
  fs::create_directories(paths_.containers_log_dir);
  write(paths_.containers_log_dir + "/x_y-" + k + ".log", "");
  process(1401, "/system.slice/docker-" + d + ".scope");
  process(1402, "/system.slice/cri-containerd-" + c + ".scope");
  process(1403, "/machine.slice/libpod-" + p + ".scope");
  process(1404, systemd_pod(kUid1) + "/cri-containerd-" + k + ".scope");
  write(paths_.proc_root + "/1405/cgroup", "garbage without colons\n\n");
  write(paths_.proc_root + "/1406/cgroup", "");
  ContainerResolver r(paths_);
  for (pid_t pid : {1401, 1402, 1403, 1404}) {
    SCOPED_TRACE(pid);
    ContainerInfo i;
    EXPECT_NO_THROW(i = r.resolve(pid));
    EXPECT_TRUE(i.in_container);
    EXPECT_EQ(i.name, "");
    EXPECT_EQ(i.pod, "");
    EXPECT_EQ(i.ns, "");
    EXPECT_EQ(i.display(), i.short_id());
  }
  EXPECT_FALSE(r.resolve(1405).resolved);
  EXPECT_FALSE(r.resolve(1406).resolved);
  EXPECT_FALSE(r.resolve(-1).resolved);

  ContainerPaths nowhere;
  for (auto* s : {&nowhere.proc_root, &nowhere.cgroup_root, &nowhere.pods_dir, &nowhere.containers_log_dir,
                  &nowhere.docker_root, &nowhere.containerd_state})
    *s = (root_ / "missing").string();
  nowhere.storage_roots = {(root_ / "missing").string()};
  ContainerResolver none(nowhere);
  EXPECT_FALSE(none.resolve(1).resolved);
  ContainerInfo i = none.resolve_cgroup_text("0::/system.slice/docker-" + d + ".scope\n");
  EXPECT_TRUE(i.in_container);
  EXPECT_EQ(i.cgroup_id, 0u);
  EXPECT_EQ(none.cache_size(), 0u);
  EXPECT_FALSE(none.resolve_cgroup_id(1).resolved);
  EXPECT_TRUE(none.containers().empty());
  EXPECT_FALSE(none.kubernetes_readable());
}

// The test process on this machine: whatever it is in, the resolver agrees with /proc/self/cgroup.
TEST(ContainersReal, ThisProcessResolvesConsistently) {
  std::string text = gpuscope::read_file("/proc/self/cgroup");
  ASSERT_FALSE(text.empty());
  auto lines = parse_proc_cgroup(text);
  const gpuscope::CgroupLine* rel = relevant_cgroup_line(lines);
  ASSERT_NE(rel, nullptr);
  CgroupMatch m = parse_cgroup_path(rel->path);

  ContainerResolver r;
  ContainerInfo i = r.resolve(getpid());
  EXPECT_TRUE(i.resolved);
  EXPECT_EQ(i.in_container, m.in_container());
  EXPECT_EQ(i.container_id, m.container_id);
  EXPECT_EQ(i.host(), !m.in_container());
  EXPECT_EQ(i.display().empty(), false);
  if (!m.in_container()) {
    EXPECT_EQ(i.display(), "host");
  }
  for (auto& l : lines) {
    struct stat st;
    if (l.v2() && stat((r.cgroup2_root() + l.path).c_str(), &st) == 0) {
      EXPECT_EQ(i.cgroup_id, st.st_ino);
    }
  }
  EXPECT_EQ(r.resolve(getpid()).container_id, i.container_id) << "a cache hit says the same";
  std::printf("this process: %s (runtime %s, cgroup id %llu, v2 root %s)\n", i.display().c_str(),
              std::string(gpuscope::runtime_name(i.runtime)).c_str(), static_cast<unsigned long long>(i.cgroup_id),
              r.cgroup2_root().c_str());
}

// A real cgroup v2 directory with the kubelet's shape, a child process in it, and a fake kubelet
// log tree: resolved by pid and by cgroup id, then forgotten once the directory is removed.
TEST(ContainersReal, ARealCgroupResolvesAndIsForgottenWhenItGoes) {
  fs::path tmp = fs::temp_directory_path() / ("gs-containers-real-" + std::to_string(getpid()));
  fs::remove_all(tmp);
  ContainerPaths p;
  p.pods_dir = (tmp / "pods").string();
  p.containers_log_dir = (tmp / "containers").string();
  p.docker_root = p.containerd_state = (tmp / "none").string();
  p.storage_roots = {(tmp / "none").string()};
  ContainerResolver r(p);
  r.set_walk_interval_ms(0);
  if (access((r.cgroup2_root() + "/cgroup.procs").c_str(), W_OK) != 0) GTEST_SKIP() << "no writable cgroup v2";

  char tail[13];
  snprintf(tail, sizeof tail, "%012d", static_cast<int>(getpid()));
  const std::string uid = std::string("7e0f9a2b-3c4d-4e5f-8a9b-") + tail, id = mkid(tail);
  std::string u = uid;
  std::replace(u.begin(), u.end(), '-', '_');
  const std::vector<std::string> dirs = {"/gstest-ctr-" + std::string(tail), "/kubepods.slice",
                                         "/kubepods-besteffort.slice", "/kubepods-besteffort-pod" + u + ".slice",
                                         "/cri-containerd-" + id + ".scope"};
  std::vector<std::string> made;
  std::string path;
  for (auto& d : dirs) {
    path += d;
    if (mkdir((r.cgroup2_root() + path).c_str(), 0755) != 0) break;
    made.push_back(r.cgroup2_root() + path);
  }
  auto cleanup = [&] {
    for (auto it = made.rbegin(); it != made.rend(); ++it) rmdir(it->c_str());
    fs::remove_all(tmp);
  };
  if (made.size() != dirs.size()) {
    cleanup();
    GTEST_SKIP() << "cannot make cgroups under " << r.cgroup2_root();
  }
  fs::create_directories(tmp / "pods" / ("ml_trainer-0_" + uid) / "worker");
  fs::create_directories(tmp / "containers");
  std::ofstream(tmp / "containers" / ("trainer-0_ml_worker-" + id + ".log")) << "";

  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  ASSERT_GT(child, 0);
  bool moved = static_cast<bool>(std::ofstream(made.back() + "/cgroup.procs") << child << "\n" << std::flush);
  struct stat st;
  ASSERT_EQ(stat(made.back().c_str(), &st), 0);

  ContainerInfo i = r.resolve(child);
  ContainerInfo by_id = r.resolve_cgroup_id(st.st_ino);
  auto all = r.containers();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  for (auto it = made.rbegin(); it != made.rend(); ++it) rmdir(it->c_str());
  made.clear();

  ASSERT_TRUE(moved);
  EXPECT_TRUE(i.in_container);
  EXPECT_EQ(i.cgroup_id, st.st_ino);
  EXPECT_EQ(i.runtime, R::kContainerd);
  EXPECT_EQ(i.container_id, id);
  EXPECT_EQ(i.pod_uid, uid);
  EXPECT_EQ(i.name, "worker");
  EXPECT_EQ(i.pod, "trainer-0");
  EXPECT_EQ(i.ns, "ml");
  EXPECT_EQ(by_id.name, "worker");
  EXPECT_EQ(std::count_if(all.begin(), all.end(), [&](auto& c) { return c.cgroup_id == st.st_ino; }), 1);

  EXPECT_GE(r.forget_gone(), 1u);
  EXPECT_FALSE(r.resolve_cgroup_id(st.st_ino).resolved);
  auto after = r.containers();
  EXPECT_EQ(std::count_if(after.begin(), after.end(), [&](auto& c) { return c.container_id == id; }), 0);
  cleanup();
}
