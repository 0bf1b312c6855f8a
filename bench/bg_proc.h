#pragma once
// A gpuscope command in the background, stdout discarded; ready once `needle` shows on
// stderr; stopped with SIGINT on destruction.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <string>
#include <vector>

class BgProc {
 public:
  BgProc(std::vector<std::string> argv, const std::string& needle) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ == 0) {
      int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 1);
      dup2(fds[1], 2);
      close(fds[0]);
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
    close(fds[1]);
    std::string err;
    char c;
    while (err.find(needle) == std::string::npos && read(fds[0], &c, 1) == 1) err += c;
    close(fds[0]);
    if (err.find(needle) == std::string::npos) throw std::runtime_error("gpuscope did not start: " + err);
  }
  ~BgProc() {
    kill(pid_, SIGINT);
    waitpid(pid_, nullptr, 0);
  }

 private:
  pid_t pid_;
};
