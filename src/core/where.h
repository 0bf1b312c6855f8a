#pragma once
// The container of a process beside its pid, in every view: the CONTAINER column, and POD and
// NAMESPACE on a Kubernetes node (the kubelet's pod directory readable) or with `wide`; the
// pid, comm, container, container_id, pod and namespace fields of every JSON line about a process
// (docs/json.md).
// Names come from the scope's resolver (core/containers.h), kept per pid for the view's life.
#include <sys/types.h>

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/output.h"
#include "core/scope.h"

namespace gpuscope {

class WhereView {
 public:
  explicit WhereView(const Scope& scope, bool wide = false);
  // With the cgroup v2 id an event carries, a process that has gone is still named.
  const ContainerInfo& of(pid_t pid, uint64_t cgroup_id = 0);
  bool kubernetes() const { return kubernetes_; }
  // CONTAINER, then POD and NAMESPACE where kubernetes().
  const std::vector<Table::Column>& columns() const { return cols_; }
  // The cells of columns(), in order: the name (else the short id), "host", or "-" when the
  // process could not be read.
  void cells_of(pid_t pid, std::vector<std::string>& out, uint64_t cgroup_id = 0);
  // The fields of every JSON line about a process: pid, comm (where not given, read from /proc
  // once and kept, so that a process that has gone is still named), container, container_id,
  // pod, namespace.
  void process(JsonLine& j, pid_t pid, std::string_view comm, uint64_t cgroup_id = 0);
  // The columns' names, and a process's cells, each padded and followed by a space, for views
  // that format their own rows.
  void put_header(fmt::memory_buffer& out) const;
  void put_cells(fmt::memory_buffer& out, pid_t pid, uint64_t cgroup_id = 0);
  // A view's table with columns() inserted before column `at`, and a row of it for `pid`.
  Table table(std::vector<Table::Column> cols, size_t at) const;
  std::vector<std::string> row(std::vector<std::string> cells, size_t at, pid_t pid);

 private:
  std::shared_ptr<ProcessContainers> containers_;
  bool kubernetes_;
  std::vector<Table::Column> cols_;
  std::vector<std::string> cells_;
  std::unordered_map<pid_t, ContainerInfo> seen_;
  std::unordered_map<pid_t, std::string> comms_;
  const std::string& comm_of(pid_t pid);
};

// pid, comm and the four fields of a process's container: container ("host" outside one, ""
// where its cgroup could not be read), container_id, pod, namespace ("" where none).
void put_process_fields(JsonLine& j, uint32_t pid, std::string_view comm, const ContainerInfo& c);

}  // namespace gpuscope
