#pragma once
// Runs gpuscope and workload programs as real processes and parses what gpuscope prints.
#include <signal.h>
#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
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
// What `read` returns once two reads 300 ms apart agree (after 30 tries, the last).
std::string settled(const std::function<std::string()>& read);
// Keys of every BPF hash map `holder` holds (found through /proc/PID/fdinfo), by map name, read
// as the u32 every per-process key of gpuscope begins with: its pid.
std::map<std::string, std::vector<uint32_t>> pids_in_maps(pid_t holder);

// What the gpuscope runs between its construction and list() left of BPF behind them: the
// programs, links and maps made in between (the kernel's ids only grow) that no live process
// holds, by an fd or through a link or program it holds, once the kernel has freed what was
// closed: a pin, or an attachment that outlived its process. Other gpuscopes running beside the
// test hold theirs, and pins under another test process's /sys/fs/bpf/gstest-PID-N are its own.
class BpfLeftovers {
 public:
  BpfLeftovers();
  // One line per object left ("prog 812 ml_enter", "map 90 gpu_meta pinned at /sys/fs/bpf/x"),
  // "" when none.
  std::string list() const;

 private:
  uint32_t prog0_, map0_, link0_;
};

struct Reply {
  int status = 0;
  std::string body;
};

// METHOD path (with `body`, when not empty) to 127.0.0.1:port as HTTP/1.0; status 0 when no
// answer came.
Reply http_request(int port, const std::string& method, const std::string& path, const std::string& body = "");
Reply http_get(int port, const std::string& path);

// One sample of a scrape: its labels and value.
struct Sample {
  std::map<std::string, std::string> labels;
  double value;
};

// The samples of `name` in Prometheus text (label values here hold no escaped quotes).
std::vector<Sample> samples(const std::string& text, const std::string& name);
// Samples whose labels include every one of `want`.
std::vector<Sample> where(const std::vector<Sample>& v, const std::map<std::string, std::string>& want);
// The value of the one sample of `name` whose labels include all of `want`; -1 if not exactly one.
double value_of(const std::string& text, const std::string& name, const std::map<std::string, std::string>& want);
// The sum of every sample of `name` matching `want`; -1 when none does. For the per-name totals,
// split by container: a process gone before its cgroup was read has container "" (unknown), one
// read on the host "host".
double sum_of(const std::string& text, const std::string& name, const std::map<std::string, std::string>& want);

// A workload name only this test process uses: a link to `target` named <prefix><pid> (comm is
// the link's name), in /tmp/gs-<tag>-<pid>, which goes with it.
class Workload {
 public:
  Workload(const std::string& tag, const std::string& prefix, const std::string& target = standin_app());
  ~Workload();
  const std::string& comm() const { return comm_; }
  const std::string& path() const { return path_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_, comm_, path_;
};

// standin_app through the workload's link, holding 6777 bytes of device memory from a first
// SIGUSR1 to a second ("--wait-usr1 1 prestart 3"); constructed once it is ready.
class Holder : public Process {
 public:
  explicit Holder(const Workload& w) : Process({w.path(), "--wait-usr1", "1", "prestart", "3"}) { ready_pid(*this); }
  // The first SIGUSR1; whether it said it allocated.
  bool allocate() {
    signal(SIGUSR1);
    return wait_for("allocated");
  }
};

// gpuscope agent --json on a free loopback port, scoped by -c to the workload's name, on the
// stand-in libraries; unless `extra` names them, --interval 0.2 and a --bridge-pin-dir where no
// bridge is.
class Agent {
 public:
  Agent(const Workload& w, std::vector<std::string> extra = {}, const std::vector<std::string>& env = {});
  int port() const { return port_; }
  Process& proc() { return *p_; }
  std::string metrics() { return http_get(port_, "/metrics").body; }
  json api(const std::string& path) { return json::parse(http_get(port_, path).body); }
  // Scrapes until pred holds for a scrape (returned), or "" after timeout_s.
  std::string until(const std::function<bool(const std::string&)>& pred, double timeout_s = 20);
  int stop();  // SIGINT; its exit code

 private:
  std::unique_ptr<Process> p_;
  int port_ = 0;
};

}  // namespace gstest
