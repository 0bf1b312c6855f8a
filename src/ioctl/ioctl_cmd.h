#pragma once
#include <string>
#include <sys/types.h>

#include <vector>

namespace gpuscope {

struct IoctlOptions {
  std::vector<pid_t> pids;
  std::string comm;
  bool events = false;        // one line per ioctl, as it returns
  bool raw_syscalls = false;  // raw_tp sys_enter/sys_exit even where tracefs works
  double interval_s = 0;
  double duration_s = 0;
  bool json = false;
  bool verbose = false;
};

int run_ioctl(const IoctlOptions& opts);

}  // namespace gpuscope
