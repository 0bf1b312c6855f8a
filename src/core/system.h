#pragma once
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gpuscope {

// Bad input or an unusable environment: main prints one line and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Capabilities by number (linux/capability.h); kernel headers before 5.8 lack the last two.
inline constexpr int kCapSysAdmin = 21, kCapPerfmon = 38, kCapBpf = 39;
// In the effective set.
bool has_capability(int cap);
// CAP_SYS_ADMIN, or CAP_BPF together with CAP_PERFMON, in the effective set.
bool has_bpf_privileges();
void require_bpf_privileges();

bool pid_exists(pid_t pid);
// Running: neither gone nor an unreaped zombie (which kill(pid, 0) alone calls alive).
bool process_running(pid_t pid);
std::string read_file(const std::string& path);
// An output file named by `flag` (-o, --folded, --svg), checked before anything is attached:
// the file it will really be (symlinks followed) is a regular file or none yet, in a writable
// directory outside /proc and /sys. UsageError otherwise.
void check_output_file(std::string_view flag, const std::string& path);
// Writes `data` to a temporary file beside the file `path` names (symlinks followed), syncs it
// and renames it over that file: a full
// disk or any other failure leaves the old file (or none) and throws with the reason.
void write_file_atomic(const std::string& path, std::string_view data);
std::optional<std::string> read_file_opt(const std::string& path);
std::string proc_comm(pid_t pid);
std::vector<pid_t> list_pids();

// Mounts bpffs / tracefs where missing; returns false (with why) if that is impossible.
bool ensure_bpffs(std::string* why = nullptr);
bool ensure_tracefs(std::string* why = nullptr);
bool is_bpffs(const std::string& dir);

// SIGINT/SIGTERM set the flag; -d sets a deadline. Polling loops ask should_stop().
class StopControl {
 public:
  explicit StopControl(double duration_s);
  bool should_stop() const;
  const std::optional<std::chrono::steady_clock::time_point>& deadline() const { return deadline_; }
  static void install_signal_handlers();
  static std::atomic<bool>& signalled();

 private:
  std::optional<std::chrono::steady_clock::time_point> deadline_;
};

// Process names by pid, read from /proc once and kept: BPF reports only the calling
// thread's name, and the main thread's name is the process's.
class ProcessNames {
 public:
  // `thread` is the caller's name; when tid == pid it is the process name itself.
  std::string_view name(uint32_t pid, uint32_t tid, std::string_view thread);
  void forget(uint32_t pid) { names_.erase(pid); }

 private:
  std::unordered_map<uint32_t, std::string> names_;
};

// Maps cgroup ids (cgroup v2 inode numbers) to paths under /sys/fs/cgroup.
class CgroupNames {
 public:
  const std::string& path(uint64_t id);

 private:
  void rescan();
  std::unordered_map<uint64_t, std::string> names_;
  std::chrono::steady_clock::time_point last_scan_{};
};

}  // namespace gpuscope
