#pragma once
// The --pin-dir check shared by the bridge (writes pins) and starvation (reads them).
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "core/system.h"

namespace gpuscope {

inline constexpr const char* kDefaultPinDir = "/sys/fs/bpf";

// Throws UsageError unless `dir` is a directory on bpffs (and, for the bridge, writable). The
// default directory gets bpffs mounted when it is missing; any other is taken as it is, since
// mounting over a directory the user named would hide what is there.
inline void check_pin_dir(const std::string& dir, bool writable) {
  if (dir.empty()) throw UsageError("--pin-dir is empty; name a directory on bpffs");
  if (dir == kDefaultPinDir) {
    std::string why;
    if (!ensure_bpffs(&why)) throw UsageError(why);
  }
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || !is_bpffs(dir))
    throw UsageError(fmt::format("--pin-dir {} is not a directory on bpffs", dir));
  if (!writable) return;
  struct statvfs vfs {};
  if (statvfs(dir.c_str(), &vfs) == 0 && (vfs.f_flag & ST_RDONLY))
    throw UsageError(fmt::format("--pin-dir {} is on a read-only bpffs", dir));
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    throw UsageError(fmt::format("--pin-dir {} is not writable: {}", dir, strerror(errno)));
}

}  // namespace gpuscope
