#pragma once
// NVML's critical events for the errors collector, from an event set of its own: NVML gives each
// process (and each set) every event, so this works beside any bridge, ours in the same process
// or another's holding the pins. A thread waits on the set and hands each event to
// ErrorsCollector::add_nvml_event.
#include <atomic>
#include <memory>
#include <string>
#include <thread>

namespace gpuscope {

class ErrorsCollector;
namespace nvml {
class Library;
class Events;
}  // namespace nvml

class ErrorsNvml {
 public:
  // Loads `path` and registers the critical events of every device; an NVML that cannot load
  // throws UsageError (with its reason), one without event support is said once by nvml::Events
  // and waits for nothing.
  ErrorsNvml(const std::string& path, ErrorsCollector& errors, bool verbose);
  ~ErrorsNvml();
  bool active() const;

 private:
  std::unique_ptr<nvml::Library> lib_;
  std::unique_ptr<nvml::Events> events_;
  std::atomic<bool> stop_{false};
  std::thread waiter_;
};

}  // namespace gpuscope
