#include "core/where.h"

#include <algorithm>

#include "core/system.h"

namespace gpuscope {

WhereView::WhereView(const Scope& scope, bool wide)
    : containers_(scope.containers), kubernetes_(wide || scope.containers->kubernetes_readable()) {
  cols_.push_back({"CONTAINER", -16});
  if (kubernetes_) {
    cols_.push_back({"POD", -24});
    cols_.push_back({"NAMESPACE", -16});
  }
}

const ContainerInfo& WhereView::of(pid_t pid, uint64_t cgroup_id) {
  auto it = seen_.find(pid);
  if (it != seen_.end()) return it->second;
  // A view lives as long as its command; the pids it shows are bounded only by the workload.
  if (seen_.size() >= ProcessContainers::kMaxProcesses) seen_.clear();
  ContainerInfo c = containers_->of(pid);
  if (!c.resolved && cgroup_id) c = containers_->of_cgroup(pid, cgroup_id);
  if (!c.resolved) {
    static const ContainerInfo unknown;
    return unknown;  // not kept: a later event of the pid may find it
  }
  return seen_.emplace(pid, std::move(c)).first->second;
}

void WhereView::cells_of(pid_t pid, std::vector<std::string>& out, uint64_t cgroup_id) {
  const ContainerInfo& c = of(pid, cgroup_id);
  auto dash = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
  out.push_back(dash(c.display()));
  if (kubernetes_) {
    out.push_back(dash(c.pod));
    out.push_back(dash(c.ns));
  }
}

void WhereView::put_header(fmt::memory_buffer& out) const {
  for (auto& c : cols_) fmt::format_to(std::back_inserter(out), "{:<{}} ", c.name, -c.width);
}

void WhereView::put_cells(fmt::memory_buffer& out, pid_t pid, uint64_t cgroup_id) {
  cells_.clear();
  cells_of(pid, cells_, cgroup_id);
  for (size_t i = 0; i < cells_.size(); i++)
    fmt::format_to(std::back_inserter(out), "{:<{}} ", cells_[i], -cols_[i].width);
}

Table WhereView::table(std::vector<Table::Column> cols, size_t at) const {
  cols.insert(cols.begin() + static_cast<std::ptrdiff_t>(std::min(at, cols.size())), cols_.begin(), cols_.end());
  return Table(std::move(cols));
}

std::vector<std::string> WhereView::row(std::vector<std::string> cells, size_t at, pid_t pid) {
  std::vector<std::string> mine;
  cells_of(pid, mine);
  cells.insert(cells.begin() + static_cast<std::ptrdiff_t>(std::min(at, cells.size())), mine.begin(), mine.end());
  return cells;
}

void WhereView::process(JsonLine& j, pid_t pid, std::string_view comm, uint64_t cgroup_id) {
  const ContainerInfo& c = of(pid, cgroup_id);
  put_process_fields(j, static_cast<uint32_t>(pid), comm.empty() ? std::string_view(comm_of(pid)) : comm, c);
}

const std::string& WhereView::comm_of(pid_t pid) {
  auto it = comms_.find(pid);
  if (it != comms_.end()) return it->second;
  if (comms_.size() >= ProcessContainers::kMaxProcesses) comms_.clear();
  std::string c = proc_comm(pid);
  if (c.empty()) {
    static const std::string gone;
    return gone;  // not kept, as in of()
  }
  return comms_.emplace(pid, std::move(c)).first->second;
}

void put_process_fields(JsonLine& j, uint32_t pid, std::string_view comm, const ContainerInfo& c) {
  j.num("pid", pid).str("comm", comm);
  j.str("container", c.display()).str("container_id", c.container_id).str("pod", c.pod).str("namespace", c.ns);
}

}  // namespace gpuscope
