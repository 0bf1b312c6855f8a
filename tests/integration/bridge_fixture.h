#pragma once
// What the tests that run a real `gpuscope bridge` on the NVML stand-in share: a test-private
// bpffs directory for its pins, and the stand-in's answers file.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <istream>
#include <iterator>
#include <string>

#include "bridge/bridge_maps.h"
#include "core/system.h"

namespace gstest {

inline const char* const kBridgePins[] = {GPU_PIN_META, GPU_PIN_DEVICE, GPU_PIN_PER_PID, GPU_PIN_PER_PID_PER_DEVICE};

// A fresh directory on bpffs for one test's pins, removed with them afterwards.
struct PinDir {
  std::string path;
  PinDir() {
    static int n = 0;
    EXPECT_TRUE(gpuscope::ensure_bpffs());
    path = "/sys/fs/bpf/gstest-" + std::to_string(getpid()) + "-" + std::to_string(n++);
    mkdir(path.c_str(), 0700);
  }
  ~PinDir() {
    for (auto* p : kBridgePins) unlink((path + "/" + p).c_str());
    rmdir(path.c_str());
  }
  std::string pin(const char* name) const { return path + "/" + name; }
  int entries() const {
    namespace fs = std::filesystem;
    return static_cast<int>(std::distance(fs::directory_iterator(path), fs::directory_iterator()));
  }
};

// The stand-in's answers, replaced by rename so the stand-in never reads half a file.
struct StandinFile {
  std::string path;
  StandinFile() {
    static int n = 0;
    path = "/tmp/gstest-nvml-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".txt";
  }
  ~StandinFile() { unlink(path.c_str()); }
  void write(const std::string& text) const {
    std::string tmp = path + ".new";
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, path);
  }
  std::string env() const { return "NVML_STANDIN_FILE=" + path; }
};

// Folded stacks (flamegraph.pl's input) of the starvation fixture's burner thread, each line
// "starv_fixture;burner;FRAMES WEIGHT": how many, their total weight and that of the stacks
// through the fixture's known function.
struct BurnerFolded {
  int lines = 0;
  uint64_t total = 0, known = 0;
};
inline void read_burner_folded(std::istream& in, BurnerFolded* f) {
  for (std::string line; std::getline(in, line); f->lines++) {
    auto sp = line.rfind(' ');
    ASSERT_NE(sp, std::string::npos) << line;
    uint64_t w = std::stoull(line.substr(sp + 1));
    f->total += w;
    EXPECT_EQ(line.rfind("starv_fixture;burner;", 0), 0u) << line;
    if (line.find("fixture::preprocess_burn(void*)") != std::string::npos) f->known += w;
  }
}

}  // namespace gstest
