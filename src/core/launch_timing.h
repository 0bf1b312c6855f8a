#pragma once
// Shared between two capabilities, so kept here rather than in either: the kernels collector's
// launch programs can time launch rows into latency's maps (latency/latency_time.bpf.h), and
// then one program per launch serves both collectors.
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace gpuscope {

// Another object's launch programs that can time launch rows into latency's maps.
struct LaunchTimingHost {
  std::map<std::string, int> maps;  // latency's maps by name, made by the host's object
  std::vector<bool> rows;           // the rows its programs can time (GS_API_COUNT entries)
  // Starts timing `rows` (a subset of rows), one launch in `sample`.
  std::function<void(const std::vector<bool>& rows, unsigned sample)> time;
};

}  // namespace gpuscope
