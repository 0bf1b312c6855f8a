#include "errors/errors_nvml.h"

#include <signal.h>

#include "bridge/nvml.h"
#include "errors/errors_collector.h"

namespace gpuscope {

ErrorsNvml::ErrorsNvml(const std::string& path, ErrorsCollector& errors, bool verbose)
    : lib_(std::make_unique<nvml::Library>(path)), events_(std::make_unique<nvml::Events>(*lib_, verbose)) {
  std::vector<GpuDevice> devices;
  for (auto& d : events_->devices()) devices.push_back({static_cast<int>(d.index), d.uuid, d.pci_bus_id});
  errors.set_devices(std::move(devices));
  if (!events_->active()) return;
  // The waiter takes no SIGINT/SIGTERM: the main thread's loop ends on them, then joins it here.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  waiter_ = std::thread([this, &errors] {
    NvmlEventRecord e;
    while (!stop_.load(std::memory_order_relaxed))
      if (events_->wait(250, e))
        errors.add_nvml_event({e.ts_ns, static_cast<int>(e.device), e.uuid, e.pci_bus_id, e.event_type, e.data,
                               e.gpu_instance_id, e.compute_instance_id, nvml_event_name(e.event_type)});
  });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

ErrorsNvml::~ErrorsNvml() {
  stop_ = true;
  if (waiter_.joinable()) waiter_.join();
}

bool ErrorsNvml::active() const { return events_->active(); }

}  // namespace gpuscope
