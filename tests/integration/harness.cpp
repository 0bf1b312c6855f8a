#include "harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
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

std::string settled(const std::function<std::string()>& read) {
  std::string a = read(), b;
  for (int i = 0; i < 30; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    b = read();
    if (a == b) break;
    a = b;
  }
  return a;
}

namespace {

enum class Kind { prog, map, link };
using Ids = std::map<Kind, std::set<uint32_t>>;

uint32_t highest_id(int (*next)(uint32_t, uint32_t*)) {
  uint32_t id = 0, n = 0;
  while (next(id, &n) == 0) id = n;
  return id;
}

// The ids an fd's fdinfo names: a link's names its program too, which it holds.
void fdinfo_ids(const std::string& path, Ids& out) {
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    for (auto [key, kind] : {std::pair{"prog_id:", Kind::prog}, {"map_id:", Kind::map}, {"link_id:", Kind::link}})
      if (line.rfind(key, 0) == 0)
        out[kind].insert(static_cast<uint32_t>(strtoul(line.c_str() + strlen(key), nullptr, 10)));
  }
}

Ids held_by_processes() {
  Ids held;
  DIR* proc = opendir("/proc");
  while (dirent* p = proc ? readdir(proc) : nullptr) {
    if (!isdigit(static_cast<unsigned char>(p->d_name[0]))) continue;
    std::string dir = std::string("/proc/") + p->d_name + "/fdinfo";
    DIR* d = opendir(dir.c_str());
    while (dirent* e = d ? readdir(d) : nullptr)
      if (e->d_name[0] != '.') fdinfo_ids(dir + "/" + e->d_name, held);
    if (d) closedir(d);
  }
  if (proc) closedir(proc);
  return held;
}

// What each file under `dir` pins, by kind and id.
void pins(const std::string& dir, std::map<std::pair<Kind, uint32_t>, std::string>& out) {
  DIR* d = opendir(dir.c_str());
  while (dirent* e = d ? readdir(d) : nullptr) {
    std::string name = e->d_name, path = dir + "/" + name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      pins(path, out);
      continue;
    }
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0) continue;
    Ids ids;
    fdinfo_ids("/proc/self/fdinfo/" + std::to_string(fd), ids);
    close(fd);
    for (Kind k : {Kind::link, Kind::map, Kind::prog})
      if (!ids[k].empty()) {
        out[{k, *ids[k].begin()}] = path;
        break;
      }
  }
  if (d) closedir(d);
}

bool another_tests_pin(const std::string& path) {
  static const std::regex dir("^/sys/fs/bpf/gstest-([0-9]+)-[0-9]+/");
  std::smatch m;
  return std::regex_search(path, m, dir) && std::stol(m[1]) != getpid();
}

}  // namespace

BpfLeftovers::BpfLeftovers()
    : prog0_(highest_id(bpf_prog_get_next_id)),
      map0_(highest_id(bpf_map_get_next_id)),
      link0_(highest_id(bpf_link_get_next_id)) {}

std::string BpfLeftovers::list() const {
  const uint32_t prog1 = highest_id(bpf_prog_get_next_id), map1 = highest_id(bpf_map_get_next_id),
                 link1 = highest_id(bpf_link_get_next_id);
  auto once = [&] {
    Ids held = held_by_processes();
    std::map<std::pair<Kind, uint32_t>, std::string> pinned;
    pins("/sys/fs/bpf", pinned);
    std::string out;
    auto report = [&](Kind k, uint32_t id, const std::string& what) {
      auto p = pinned.find({k, id});
      std::string at = p == pinned.end() ? "" : p->second;
      if (held[k].count(id) || another_tests_pin(at)) return;
      out += what + (at.empty() ? "" : " pinned at " + at) + "\n";
    };
    // Links first: a held link holds its program, and a held program its maps.
    for (uint32_t id = link0_; bpf_link_get_next_id(id, &id) == 0 && id <= link1;) {
      int fd = bpf_link_get_fd_by_id(id);
      if (fd < 0) continue;
      bpf_link_info info{};
      uint32_t len = sizeof info;
      if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) {
        if (held[Kind::link].count(id)) held[Kind::prog].insert(info.prog_id);
        report(Kind::link, id, "link " + std::to_string(id) + " (prog " + std::to_string(info.prog_id) + ")");
      }
      close(fd);
    }
    for (uint32_t id = prog0_; bpf_prog_get_next_id(id, &id) == 0 && id <= prog1;) {
      int fd = bpf_prog_get_fd_by_id(id);
      if (fd < 0) continue;
      uint32_t maps[64];
      bpf_prog_info info{};
      info.nr_map_ids = 64;
      info.map_ids = reinterpret_cast<uintptr_t>(maps);
      uint32_t len = sizeof info;
      if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) {
        if (held[Kind::prog].count(id))
          for (uint32_t i = 0; i < std::min(info.nr_map_ids, 64u); i++) held[Kind::map].insert(maps[i]);
        report(Kind::prog, id, "prog " + std::to_string(id) + " " + info.name);
      }
      close(fd);
    }
    for (uint32_t id = map0_; bpf_map_get_next_id(id, &id) == 0 && id <= map1;) {
      int fd = bpf_map_get_fd_by_id(id);
      if (fd < 0) continue;
      bpf_map_info info{};
      uint32_t len = sizeof info;
      if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0)
        report(Kind::map, id, "map " + std::to_string(id) + " " + info.name);
      close(fd);
    }
    return out;
  };
  // The kernel frees the objects of a process that exited after an RCU grace period.
  return settled(once);
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

Reply http_request(int port, const std::string& method, const std::string& path, const std::string& body) {
  Reply r;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return r;
  }
  std::string req = method + " " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n";
  if (!body.empty()) req += "Content-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  (void)!write(fd, req.data(), req.size());
  std::string all;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) all.append(buf, static_cast<size_t>(n));
  close(fd);
  size_t sp = all.find(' '), hdr = all.find("\r\n\r\n");
  if (sp == std::string::npos || hdr == std::string::npos) return r;
  r.status = std::stoi(all.substr(sp + 1, 3));
  r.body = all.substr(hdr + 4);
  return r;
}

Reply http_get(int port, const std::string& path) { return http_request(port, "GET", path); }

std::vector<Sample> samples(const std::string& text, const std::string& name) {
  std::vector<Sample> out;
  static const std::regex lab(R"re((\w+)="((?:[^"\\]|\\.)*)")re");
  // A label value as Prometheus reads it: \\, \" and \n are its only escapes.
  auto unescape = [](const std::string& v) {
    std::string o;
    for (size_t i = 0; i < v.size(); i++) o += v[i] != '\\' ? v[i] : v[++i] == 'n' ? '\n' : v[i];
    return o;
  };
  std::istringstream ss(text);
  for (std::string line; std::getline(ss, line);) {
    if (line.rfind(name, 0) != 0) continue;
    size_t rest = name.size();
    if (rest < line.size() && line[rest] != '{' && line[rest] != ' ') continue;
    Sample s;
    size_t close = line.rfind(' ');
    s.value = std::stod(line.substr(close + 1));
    if (line[rest] == '{') {
      std::string ls = line.substr(rest + 1, line.rfind('}') - rest - 1);
      for (auto it = std::sregex_iterator(ls.begin(), ls.end(), lab); it != std::sregex_iterator(); ++it)
        s.labels[(*it)[1]] = unescape((*it)[2]);
    }
    out.push_back(s);
  }
  return out;
}

std::vector<Sample> where(const std::vector<Sample>& v, const std::map<std::string, std::string>& want) {
  std::vector<Sample> out;
  for (auto& s : v) {
    bool ok = true;
    for (auto& [k, x] : want) ok = ok && s.labels.count(k) && s.labels.at(k) == x;
    if (ok) out.push_back(s);
  }
  return out;
}

double value_of(const std::string& text, const std::string& name, const std::map<std::string, std::string>& want) {
  auto v = where(samples(text, name), want);
  return v.size() == 1 ? v[0].value : -1;
}

double sum_of(const std::string& text, const std::string& name, const std::map<std::string, std::string>& want) {
  auto v = where(samples(text, name), want);
  if (v.empty()) return -1;
  double s = 0;
  for (auto& x : v) s += x.value;
  return s;
}

Workload::Workload(const std::string& tag, const std::string& prefix, const std::string& target) {
  dir_ = "/tmp/gs-" + tag + "-" + std::to_string(getpid());
  mkdir(dir_.c_str(), 0755);
  comm_ = prefix + std::to_string(getpid() % 1000000);
  path_ = dir_ + "/" + comm_;
  unlink(path_.c_str());
  if (symlink(target.c_str(), path_.c_str()) != 0) throw std::runtime_error("symlink");
}

Workload::~Workload() { (void)system(("rm -rf " + dir_).c_str()); }

static bool names(const std::vector<std::string>& args, const std::string& flag) {
  return std::find(args.begin(), args.end(), flag) != args.end();
}

Agent::Agent(const Workload& w, std::vector<std::string> extra, const std::vector<std::string>& env) {
  std::string lib = standin_lib_dir();
  std::vector<std::string> argv = {
      gpuscope_bin(),          "agent", "--json", "--listen", "127.0.0.1:0", "--lib", lib + "/libcuda.so.1", "--lib",
      lib + "/libcudart.so.13"};
  if (!names(extra, "-c")) argv.insert(argv.end(), {"-c", w.comm()});
  if (!names(extra, "--interval")) argv.insert(argv.end(), {"--interval", "0.2"});
  if (!names(extra, "--bridge-pin-dir")) argv.insert(argv.end(), {"--bridge-pin-dir", w.dir() + "/no-bridge"});
  argv.insert(argv.end(), extra.begin(), extra.end());
  p_ = std::make_unique<Process>(argv, env);
  if (!p_->wait_for("\"type\":\"agent\"", 30)) throw std::runtime_error("agent did not start: " + p_->err());
  port_ = parse_lines(p_->out()).at(0).at("port").get<int>();
}

std::string Agent::until(const std::function<bool(const std::string&)>& pred, double timeout_s) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    std::string m = metrics();
    if (pred(m)) return m;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return "";
}

int Agent::stop() {
  p_->signal(SIGINT);
  return p_->wait(30);
}

}  // namespace gstest
