// gpuscope run -- CMD: runs CMD with libgpuscope-cupti.so injected (CUDA_INJECTION64_PATH), so
// that gpuscope kernels and gpuscope timeline get its GPU time. No BPF here.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "core/cli.h"
#include "core/output.h"
#include "core/system.h"
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

int run_run(const RunOptions& o) {
  if (o.cmd.empty()) throw UsageError("run: name a command after --, e.g. gpuscope run -- python3 train.py");
  std::string lib = o.lib.empty() ? cupti_lib_beside_self() : o.lib;
  if (access(lib.c_str(), R_OK) != 0)
    throw UsageError(lib + ": " + strerror(errno) + " (build it beside gpuscope, or name it with --cupti-lib)");
  if (lib[0] != '/') {
    char* abs = realpath(lib.c_str(), nullptr);
    if (abs) lib = abs;
    free(abs);
  }
  setenv("CUDA_INJECTION64_PATH", lib.c_str(), 1);
  if (o.flush_ms) setenv("GPUSCOPE_CUPTI_FLUSH_MS", std::to_string(o.flush_ms).c_str(), 1);
  if (o.always) setenv("GPUSCOPE_CUPTI_ALWAYS", "1", 1);
  pid_t child = fork();
  if (child < 0) throw std::runtime_error(std::string("fork: ") + strerror(errno));
  if (child == 0) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    std::vector<char*> argv;
    for (auto& a : o.cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    fprintf(stderr, "gpuscope: %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  // Ctrl-C, SIGTERM and -d reach the command as SIGTERM; its exit status is ours.
  StopControl stop(o.common.duration_s);
  bool sent = false;
  int status = 0;
  for (;;) {
    pid_t r = waitpid(child, &status, WNOHANG);
    if (r == child) break;
    if (r < 0 && errno != EINTR) throw std::runtime_error(std::string("waitpid: ") + strerror(errno));
    if (!sent && stop.should_stop()) {
      kill(child, SIGTERM);
      sent = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (o.common.json) {
    Writer w;
    JsonLine(w.buf()).str("type", "summary").num("pid", child).num("exit_code", code).str("library", lib).end();
  }
  return code;
}

}  // namespace

void register_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();  // held by the command registry until exit
  auto* cmd =
      app.add_subcommand("run", "Run a command with libgpuscope-cupti.so injected (GPU time for kernels, timeline)");
  add_common_flags(cmd, o->common);
  cmd->add_option("--cupti-lib", o->lib, "The library to inject (default: libgpuscope-cupti.so beside gpuscope)");
  add_number(cmd, "--flush-ms", o->flush_ms, "How often the library hands records over (default 100)", "milliseconds",
             1, 60000);
  cmd->add_flag("--always", o->always, "Record from the start, before any gpuscope attaches");
  cmd->add_option("cmd", o->cmd, "The command and its arguments, after --")->expected(-1);
  cmd->footer(
      "EXAMPLES:\n"
      "  gpuscope run -- python3 train.py\n"
      "  gpuscope run --flush-ms 50 -- ./app   # then: gpuscope kernels -c app, gpuscope timeline -c app");
  add_command(cmd, [o] { return run_run(*o); });
}

}  // namespace gpuscope
