#pragma once
// What the errors tests share: a file of the test's own, the stand-in app's sticky error, and the
// container the test's own host process shows.
#include <unistd.h>

#include <fstream>
#include <string>

#include "core/containers.h"
#include "harness.h"

namespace gstest {

// A file this test alone writes, gone with it.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& tag, const std::string& text = "")
      : path("/tmp/gs-errors-" + tag + "-" + std::to_string(getpid())) {
    std::ofstream(path) << text;
  }
  void append(const std::string& line) const { std::ofstream(path, std::ios::app) << line << "\n"; }
  ~TempFile() { unlink(path.c_str()); }
};

// The stand-in app through the workload's link: named driver kernels, a good sync, two more
// kernels, and a sync that returns CUDA_ERROR_ILLEGAL_ADDRESS (the 4th launch faults); it lingers
// LINGER_MS after it.
struct StickyApp {
  Process p;
  pid_t pid;
  StickyApp(const Workload& w, long linger_ms)
      : p({w.path(), "sticky", std::to_string(linger_ms)}, {"GPUSCOPE_STANDIN_STICKY_AFTER=4"}), pid(ready_pid(p)) {
    EXPECT_TRUE(p.wait_for("sync rc=700")) << p.out() << p.err();
  }
};

// The container display the test's own host process has: what a stand-in it started has.
inline std::string own_container() {
  gpuscope::ProcessContainers pc;
  return pc.of(getpid()).display();
}

}  // namespace gstest
