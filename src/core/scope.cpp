#include "core/scope.h"

#include <algorithm>

#include "core/system.h"

namespace gpuscope {

void Scope::validate() const {
  for (pid_t pid : pids)
    if (!pid_exists(pid)) throw UsageError("pid " + std::to_string(pid) + " does not exist");
}

bool Scope::wants_pid(uint32_t pid) const {
  return pids.empty() || std::find(pids.begin(), pids.end(), static_cast<pid_t>(pid)) != pids.end();
}

bool Scope::wants(uint32_t pid, std::string_view c) const { return wants_pid(pid) && (comm.empty() || comm == c); }

}  // namespace gpuscope
