#include "core/system.h"

#include <dirent.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace gpuscope {

bool has_capability(int cap) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (cap < 0 || cap >= 64 || syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[cap / 32].effective >> (cap % 32)) & 1u;
}

bool has_bpf_privileges() {
  return has_capability(kCapSysAdmin) || (has_capability(kCapBpf) && has_capability(kCapPerfmon));
}

void require_bpf_privileges() {
  if (!has_bpf_privileges())
    throw UsageError("missing privileges: need CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN (run as root)");
}

bool pid_exists(pid_t pid) {
  if (pid <= 0) return false;
  struct stat st;
  return stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0;
}

bool process_running(pid_t pid) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM)) return false;
  auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  auto p = stat.rfind(')');
  return p == std::string::npos || p + 2 >= stat.size() || (stat[p + 2] != 'Z' && stat[p + 2] != 'X');
}

std::optional<std::string> read_file_opt(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string read_file(const std::string& path) { return read_file_opt(path).value_or(""); }

std::string proc_comm(pid_t pid) {
  auto s = read_file("/proc/" + std::to_string(pid) + "/comm");
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

std::vector<pid_t> list_pids() {
  std::vector<pid_t> pids;
  DIR* d = opendir("/proc");
  if (!d) return pids;
  while (dirent* e = readdir(d)) {
    char* end;
    long v = strtol(e->d_name, &end, 10);
    if (*end == '\0' && v > 0) pids.push_back(static_cast<pid_t>(v));
  }
  closedir(d);
  return pids;
}

static bool fs_magic_is(const char* dir, long magic) {
  struct statfs sfs;
  return statfs(dir, &sfs) == 0 && static_cast<long>(sfs.f_type) == magic;
}

bool is_bpffs(const std::string& dir) { return fs_magic_is(dir.c_str(), BPF_FS_MAGIC); }

bool ensure_bpffs(std::string* why) {
  if (is_bpffs("/sys/fs/bpf")) return true;
  if (mount("bpf", "/sys/fs/bpf", "bpf", 0, nullptr) == 0) return true;
  if (why) *why = std::string("cannot mount bpffs on /sys/fs/bpf: ") + strerror(errno);
  return false;
}

bool ensure_tracefs(std::string* why) {
  if (fs_magic_is("/sys/kernel/tracing", TRACEFS_MAGIC)) return true;
  if (mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, nullptr) == 0) return true;
  if (why) *why = std::string("cannot mount tracefs on /sys/kernel/tracing: ") + strerror(errno);
  return false;
}

static void on_signal(int) { StopControl::signalled().store(true); }

std::atomic<bool>& StopControl::signalled() {
  static std::atomic<bool> flag{false};
  return flag;
}

void StopControl::install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

StopControl::StopControl(double duration_s) {
  if (duration_s > 0)
    deadline_ = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                       std::chrono::duration<double>(duration_s));
}

bool StopControl::should_stop() const {
  if (signalled().load()) return true;
  return deadline_ && std::chrono::steady_clock::now() >= *deadline_;
}

std::string_view ProcessNames::name(uint32_t pid, uint32_t tid, std::string_view thread) {
  if (names_.size() > 65536) names_.clear();  // bounded: pids of exited processes go eventually
  auto it = names_.find(pid);
  if (pid == tid) {
    if (it == names_.end())
      it = names_.emplace(pid, std::string(thread)).first;
    else if (it->second != thread)
      it->second.assign(thread);
    return it->second;
  }
  if (it != names_.end()) return it->second;
  std::string n = proc_comm(static_cast<pid_t>(pid));
  if (n.empty()) n.assign(thread);
  return names_.emplace(pid, std::move(n)).first->second;
}

const std::string& CgroupNames::path(uint64_t id) {
  auto it = names_.find(id);
  if (it != names_.end()) return it->second;
  // A new container appears rarely; rescan at most once a second.
  auto now = std::chrono::steady_clock::now();
  if (now - last_scan_ > std::chrono::seconds(1)) {
    last_scan_ = now;
    rescan();
    it = names_.find(id);
    if (it != names_.end()) return it->second;
  }
  return names_.emplace(id, "").first->second;
}

// bpf_get_current_cgroup_id() is the cgroup v2 id; on hybrid hosts v2 is not at /sys/fs/cgroup.
static std::string cgroup2_root() {
  FILE* f = fopen("/proc/self/mounts", "re");
  if (!f) return "/sys/fs/cgroup";
  char dev[256], dir[1024], type[64];
  std::string root = "/sys/fs/cgroup";
  while (fscanf(f, "%255s %1023s %63s %*[^\n]", dev, dir, type) == 3) {
    if (strcmp(type, "cgroup2") == 0) {
      root = dir;
      break;
    }
  }
  fclose(f);
  return root;
}

void CgroupNames::rescan() {
  namespace fs = std::filesystem;
  static const fs::path root = cgroup2_root();
  std::error_code ec;
  struct stat st;
  if (stat(root.c_str(), &st) == 0) names_[st.st_ino] = "/";
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (!it->is_directory(ec)) continue;
    if (stat(it->path().c_str(), &st) == 0) names_[st.st_ino] = "/" + fs::relative(it->path(), root, ec).string();
  }
}

void check_output_file(std::string_view flag, const std::string& path) {
  auto bad = [&](const std::string& why) {
    std::string shown = path.size() > 200 ? path.substr(0, 200) + "..." : path;
    return UsageError(fmt::format("{} {}: {}", flag, shown, why));
  };
  if (path.empty()) throw bad("needs a file name");
  std::error_code ec;
  std::filesystem::path real = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  if (ec) throw bad(ec.message());
  struct stat st {};
  if (stat(real.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) throw bad("not a regular file");
  std::string dir = real.parent_path().string();
  struct statfs fs {};
  if (statfs(dir.c_str(), &fs) != 0) throw bad(strerror(errno));
  if (fs.f_type == PROC_SUPER_MAGIC || fs.f_type == SYSFS_MAGIC) throw bad("/proc and /sys take no output file");
  if (access(dir.c_str(), W_OK) != 0) throw bad(strerror(errno));
  if (access(real.c_str(), F_OK) == 0 && access(real.c_str(), W_OK) != 0) throw bad(strerror(errno));
}

void write_file_atomic(const std::string& name, std::string_view data) {
  // Through a symlink to the file it names: renaming over the link would replace the link.
  std::error_code ec;
  std::string path = std::filesystem::weakly_canonical(name, ec).string();
  if (ec) path = name;
  std::string tmp = path + ".XXXXXX";
  int fd = mkstemp(tmp.data());
  if (fd < 0) throw std::runtime_error(fmt::format("cannot write {}: {}", name, strerror(errno)));
  int err = 0;
  for (size_t at = 0; at < data.size() && !err;) {
    ssize_t n = write(fd, data.data() + at, data.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      err = n < 0 ? errno : ENOSPC;
    else
      at += static_cast<size_t>(n);
  }
  // Some filesystems report a full disk only when the data reaches it.
  if (!err && (fchmod(fd, 0644) != 0 || fsync(fd) != 0)) err = errno;
  if (close(fd) != 0 && !err) err = errno;
  if (!err && rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err) {
    unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("cannot write {}: {}", name, strerror(err)));
  }
}

}  // namespace gpuscope
