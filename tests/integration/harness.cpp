#include "harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <bpf/bpf.h>
#include <dirent.h>

#include <cstring>
#include <fstream>
#include <set>

namespace gstest {

static std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

static std::string temp_path(const char* tag) {
  static int n = 0;
  return "/tmp/gstest-" + std::to_string(getpid()) + "-" + std::to_string(n++) + "-" + tag;
}

Process::Process(const std::vector<std::string>& argv, const std::vector<std::string>& env)
    : out_path_(temp_path("out")), err_path_(temp_path("err")) {
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    int o = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int in = open("/dev/null", O_RDONLY);
    dup2(in, 0);
    dup2(o, 1);
    dup2(e, 2);
    for (auto& kv : env) putenv(strdup(kv.c_str()));
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
}

Process::~Process() {
  if (!reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  unlink(out_path_.c_str());
  unlink(err_path_.c_str());
}

bool Process::wait_for(const std::string& needle, double timeout_s, bool on_stderr) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if ((on_stderr ? err() : out()).find(needle) != std::string::npos) return true;
    if (!reaped_ && waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
    if (reaped_) return (on_stderr ? err() : out()).find(needle) != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

void Process::signal(int sig) {
  if (!reaped_) kill(pid_, sig);
}

int Process::wait(int timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (!reaped_) {
    if (waitpid(pid_, &status_, WNOHANG) == pid_) {
      reaped_ = true;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status_, 0);
      reaped_ = true;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
}

std::string Process::out() const { return slurp(out_path_); }
std::string Process::err() const { return slurp(err_path_); }

Result run(const std::vector<std::string>& argv, const std::vector<std::string>& env, int timeout_s) {
  Process p(argv, env);
  Result r;
  r.exit_code = p.wait(timeout_s);
  r.out = p.out();
  r.err = p.err();
  return r;
}

static std::vector<std::string> trace_argv(std::vector<std::string> args) {
  std::vector<std::string> v{gpuscope_bin(), "trace", "--json"};
  v.insert(v.end(), args.begin(), args.end());
  return v;
}

Trace::Trace(std::vector<std::string> args) : p_(trace_argv(std::move(args))) {
  if (!p_.wait_for("tracing", 30, true)) throw std::runtime_error("gpuscope trace did not start: " + p_.err());
}

std::vector<json> Trace::stop() {
  p_.signal(SIGINT);
  int rc = p_.wait(30);
  if (rc != 0) throw std::runtime_error("gpuscope trace exited " + std::to_string(rc) + ": " + p_.err());
  return parse_lines(p_.out());
}

std::vector<json> parse_lines(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

std::vector<json> select(const std::vector<json>& ev, pid_t pid, const std::string& api, const std::string& phase,
                         const std::string& layer) {
  std::vector<json> out;
  for (auto& e : ev) {
    if (!e.contains("api")) continue;
    if (pid > 0 && e["pid"].get<int>() != pid) continue;
    if (!api.empty() && e["api"] != api) continue;
    if (!phase.empty() && e["phase"] != phase) continue;
    if (!layer.empty() && e["layer"] != layer) continue;
    out.push_back(e);
  }
  return out;
}

pid_t ready_pid(Process& p) {
  if (!p.wait_for("ready pid=", 20)) throw std::runtime_error("workload did not start: " + p.err());
  auto s = p.out();
  return static_cast<pid_t>(std::stol(s.substr(s.find("ready pid=") + 10)));
}

static std::string bpf_state_once() {
  auto a = run({"bpftool", "prog", "list"});
  auto b = run({"bpftool", "link", "list"});
  auto c = run({"ls", "-R", "/sys/fs/bpf"});
  return a.out + "\n--\n" + b.out + "\n--\n" + c.out;
}

// The kernel frees programs of exited processes after an RCU grace period; a state counts
// once two reads 300 ms apart agree.
std::string bpf_state() {
  std::string a = bpf_state_once(), b;
  for (int i = 0; i < 30; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    b = bpf_state_once();
    if (a == b) break;
    a = b;
  }
  return a;
}

bool truncated_copy(const std::string& from, const std::string& to, size_t bytes) {
  std::ifstream in(from, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() <= bytes) return false;
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(bytes));
  return out.good();
}

std::string gpuscope_bin() { return GPUSCOPE_BIN; }
std::string build_dir() { return GPUSCOPE_BUILD_DIR; }
std::string standin_app() { return STANDIN_APP; }
std::string standin_lib_dir() { return STANDIN_LIB_DIR; }
std::string calls_shared() { return CUDA_FIXTURE_DIR "/calls_shared"; }
std::string calls_static() { return CUDA_FIXTURE_DIR "/calls_static"; }
std::string cuda_runtime_lib() { return CUDA_RUNTIME_LIB; }

std::map<std::string, std::vector<uint32_t>> pids_in_maps(pid_t holder) {
  std::map<std::string, std::vector<uint32_t>> out;
  std::string dir = "/proc/" + std::to_string(holder) + "/fdinfo";
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  std::set<uint32_t> ids;
  while (dirent* e = readdir(d)) {
    std::ifstream f(dir + "/" + e->d_name);
    for (std::string line; std::getline(f, line);)
      if (line.rfind("map_id:", 0) == 0) ids.insert(static_cast<uint32_t>(std::stoul(line.substr(7))));
  }
  closedir(d);
  for (uint32_t id : ids) {
    int fd = bpf_map_get_fd_by_id(id);
    if (fd < 0) continue;
    bpf_map_info info{};
    uint32_t len = sizeof info;
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 &&
        (info.type == BPF_MAP_TYPE_HASH || info.type == BPF_MAP_TYPE_LRU_HASH) && info.key_size >= 4) {
      auto& v = out[info.name];
      std::vector<uint8_t> key(info.key_size), next(info.key_size);
      const void* cur = nullptr;
      while (bpf_map_get_next_key(fd, cur, next.data()) == 0) {
        uint32_t pid;
        memcpy(&pid, next.data(), 4);
        v.push_back(pid);
        key = next;
        cur = key.data();
      }
    }
    close(fd);
  }
  return out;
}

}  // namespace gstest
