// gpuscope run -- CMD: runs CMD with libgpuscope-cupti.so injected (CUDA_INJECTION64_PATH), so
// that gpuscope kernels and gpuscope timeline get its GPU time. No BPF here.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "core/cli.h"
#include "core/clock.h"
#include "core/host_needs.h"
#include "core/output.h"
#include "core/system.h"
#include "core/where.h"
#include "gputime/gputime_collector.h"

namespace gpuscope {

namespace {

struct RunOptions {
  CommonFlags common;
  std::string lib;
  unsigned flush_ms = 0;
  bool always = false;
  std::vector<std::string> cmd;
};

// The library to inject, as an absolute path: the command may change directory.
std::string library_path(const RunOptions& o) {
  std::string lib = o.lib.empty() ? cupti_lib_beside_self() : o.lib;
  if (access(lib.c_str(), R_OK) != 0)
    throw UsageError(lib + ": " + strerror(errno) + " (build it beside gpuscope, or name it with --cupti-lib)");
  if (lib[0] != '/') {
    char* abs = realpath(lib.c_str(), nullptr);
    if (abs) lib = abs;
    free(abs);
  }
  return lib;
}

// Signals a user sends the command through us; INT and TERM end it (wait_for).
volatile sig_atomic_t pending[3];
const int forwarded[3] = {SIGHUP, SIGUSR1, SIGUSR2};

void catch_forwarded() {
  struct sigaction sa {};
  sa.sa_handler = [](int sig) {
    for (int i = 0; i < 3; i++)
      if (forwarded[i] == sig) pending[i] = 1;
  };
  sigemptyset(&sa.sa_mask);
  for (int sig : forwarded) sigaction(sig, &sa, nullptr);
}

pid_t spawn(const std::vector<std::string>& cmd) {
  const pid_t self = getpid();
  pid_t child = fork();
  if (child < 0) throw std::runtime_error(std::string("fork: ") + strerror(errno));
  if (child > 0) return child;
  for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGHUP, SIGUSR1, SIGUSR2}) signal(sig, SIG_DFL);
  // Killed with us (kill -9 included): a command left running would hold the GPU unseen.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != self) _exit(128 + SIGTERM);  // we died before the line above
  std::vector<char*> argv;
  for (auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  fprintf(stderr, "gpuscope: %s: %s\n", argv[0], strerror(errno));
  _exit(127);
}

// Ctrl-C, SIGTERM and -d reach the command as SIGTERM, and SIGKILL kKillAfter later if it is
// still running; returns its exit status, ours.
int wait_for(pid_t child, const RunOptions& o) {
  constexpr auto kKillAfter = std::chrono::seconds(10);
  StopControl stop(o.common.duration_s);
  std::optional<std::chrono::steady_clock::time_point> termed;
  bool killed = false;
  int status = 0;
  for (;;) {
    pid_t r = waitpid(child, &status, WNOHANG);
    if (r == child) break;
    if (r < 0 && errno != EINTR) throw std::runtime_error(std::string("waitpid: ") + strerror(errno));
    for (int i = 0; i < 3; i++)
      if (pending[i]) {
        pending[i] = 0;
        kill(child, forwarded[i]);
      }
    if (!termed && stop.should_stop()) {
      kill(child, SIGTERM);
      termed = std::chrono::steady_clock::now();
    }
    if (termed && !killed && std::chrono::steady_clock::now() - *termed >= kKillAfter) {
      fprintf(stderr, "gpuscope: run: %s still running 10 s after SIGTERM: SIGKILL\n", o.cmd[0].c_str());
      kill(child, SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int run_run(const RunOptions& o) {
  if (o.cmd.empty()) throw UsageError("run: name a command after --, e.g. gpuscope run -- python3 train.py");
  const std::string lib = library_path(o);
  setenv("CUDA_INJECTION64_PATH", lib.c_str(), 1);
  if (o.flush_ms) setenv("GPUSCOPE_CUPTI_FLUSH_MS", std::to_string(o.flush_ms).c_str(), 1);
  if (o.always) setenv("GPUSCOPE_CUPTI_ALWAYS", "1", 1);
  catch_forwarded();
  const pid_t child = spawn(o.cmd);
  const int code = wait_for(child, o);
  if (o.common.json) {
    Writer w;
    JsonLine j(w.buf());
    j.record("summary", realtime_ns());
    // The command has gone: it ran in our cgroup, under the name exec gives it.
    const std::string comm = std::filesystem::path(o.cmd[0]).filename().string().substr(0, 15);
    put_process_fields(j, static_cast<uint32_t>(child), comm, WhereView(Scope{}).of(getpid()));
    j.num("exit_code", code).str("library", lib).end();
  }
  return code;
}

}  // namespace

void register_run(CLI::App& app) {
  auto [cmd, o] = new_command<RunOptions>(
      app, "run", "Run a command with libgpuscope-cupti.so injected (GPU time for kernels, timeline)", run_run);
  cmd->add_option("--cupti-lib", o->lib, "The library to inject (default: libgpuscope-cupti.so beside gpuscope)");
  add_number(cmd, "--flush-ms", o->flush_ms, "How often the library hands records over (default 100)", "milliseconds",
             1, 60000);
  cmd->add_flag("--always", o->always, "Record from the start, before any gpuscope attaches");
  cmd->add_option("cmd", o->cmd, "The command and its arguments, after --")->expected(-1)->type_name("COMMAND");
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope run -- python3 train.py\n"
      "  gpuscope run --flush-ms 50 -- ./app   # then: gpuscope kernels -c app, gpuscope timeline -c app");
}
GPUSCOPE_COMMAND(register_run, 120);
GPUSCOPE_NEEDS(run, 130, {}, {});  // starts a command: needs nothing of the host

}  // namespace gpuscope
