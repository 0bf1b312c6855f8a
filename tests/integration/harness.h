#pragma once
// Runs gpuscope and workload programs as real processes and parses what gpuscope prints.
#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gstest {

using nlohmann::json;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs argv to completion (with optional extra environment "K=V").
Result run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}, int timeout_s = 60);

// A child process with stdout/stderr captured to files.
class Process {
 public:
  Process(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});
  ~Process();
  pid_t pid() const { return pid_; }
  // Waits until stdout (or stderr) contains `needle`; false on timeout or exit.
  bool wait_for(const std::string& needle, double timeout_s = 20, bool on_stderr = false);
  void signal(int sig);
  int wait(int timeout_s = 60);  // exit code, or 128+signal
  std::string out() const;
  std::string err() const;

 private:
  pid_t pid_ = -1;
  std::string out_path_, err_path_;
  bool reaped_ = false;
  int status_ = 0;
};

// gpuscope trace --json running in the background.
class Trace {
 public:
  explicit Trace(std::vector<std::string> args);
  // Stops it with SIGINT and returns its JSON lines (the summary is the last one).
  std::vector<json> stop();
  Process& proc() { return p_; }

 private:
  Process p_;
};

std::string gpuscope_bin();
std::string build_dir();
std::string standin_app();
std::string standin_lib_dir();
std::string calls_shared();
std::string calls_static();
std::string cuda_runtime_lib();

// Writes the first `bytes` bytes of `from` to `to` (a library cut short); false when `from` has
// no more than that.
bool truncated_copy(const std::string& from, const std::string& to, size_t bytes);

std::vector<json> parse_lines(const std::string& text);
// Events matching pid / api / phase ("" = any).
std::vector<json> select(const std::vector<json>& ev, pid_t pid, const std::string& api, const std::string& phase,
                         const std::string& layer = "");
// Parses "ready pid=N" from a workload's stdout.
pid_t ready_pid(Process& p);
std::string bpf_state();
// Keys of every BPF hash map `holder` holds (found through /proc/PID/fdinfo), by map name, read
// as the u32 every per-process key of gpuscope begins with: its pid.
std::map<std::string, std::vector<uint32_t>> pids_in_maps(pid_t holder);  // bpftool prog + link listing and /sys/fs/bpf contents

}  // namespace gstest
