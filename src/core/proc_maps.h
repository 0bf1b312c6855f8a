#pragma once
// The one /proc/PID/maps parser: discovery, the symbolizer and kernels naming all read
// mappings through it, keyed by (device, inode) so that two containers with different files at
// the same path never share an entry.
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuscope {

struct MapEntry {
  uint64_t start = 0, end = 0;  // [start, end) in the process
  uint64_t file_offset = 0;     // offset in the file of `start`
  dev_t dev = 0;                // makedev(major, minor) of the file's device
  ino_t ino = 0;                // 0: anonymous, [vdso], [heap], ...
  bool readable = false, writable = false, executable = false;
  bool deleted = false;  // the path ended in " (deleted)" (stripped from `path`)
  std::string path;      // as the process sees it; may be empty or "[...]"
  bool is_file() const { return ino != 0 && !path.empty() && path[0] == '/'; }
};

// One line of /proc/PID/maps; nullopt when it does not parse. Never reads past `line`.
std::optional<MapEntry> parse_maps_line(std::string_view line);
// Every line of a maps file's text.
std::vector<MapEntry> parse_maps(std::string_view text);
// /proc/PID/maps read now (empty when the process is gone or it cannot be read).
std::vector<MapEntry> read_proc_maps(pid_t pid);
// The mapping holding addr; nullptr when none does.
const MapEntry* mapping_at(const std::vector<MapEntry>& maps, uint64_t addr);
// Only executable file mappings, in address order: what probes and symbols are looked up in.
std::vector<MapEntry> read_exec_file_maps(pid_t pid);

}  // namespace gpuscope
