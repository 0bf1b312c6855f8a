#pragma once
// The one event loop every subcommand runs: ring buffers are consumed as records arrive
// (one epoll over all of them), periodic work runs on its timers, and SIGINT, SIGTERM or the
// -d deadline end it.
#include <chrono>
#include <functional>
#include <vector>

#include "core/bpf.h"
#include "core/fd.h"
#include "core/system.h"

namespace gpuscope {

// Seconds as a steady_clock duration; callers have validated the range.
std::chrono::steady_clock::duration seconds_to_duration(double s);

class EventLoop {
 public:
  using Clock = std::chrono::steady_clock;
  explicit EventLoop(double duration_s);
  // Records of `rb` are handed to its callback as soon as they arrive. rb must outlive run().
  void watch(RingBuffer& rb);
  // fn runs every `period_s` seconds, the first time one period after run() starts.
  void every(double period_s, std::function<void()> fn);
  // Also runs fn after each wake-up (records consumed or a timer due): for work that must
  // follow new records closely.
  void after_wakeup(std::function<void()> fn) { wakeup_.push_back(std::move(fn)); }
  // At least `s` seconds between wake-ups for records (timers still run on time): a storm of
  // records is read in batches. 0 (the default): each record wakes the loop.
  void set_min_wakeup_gap(double s) { gap_ = seconds_to_duration(s); }
  // Until a signal, the deadline, or stop().
  void run();
  void stop() { stopped_ = true; }
  bool stopped() const { return stopped_ || stop_.should_stop(); }

 private:
  struct Timer {
    Clock::duration period;
    Clock::time_point next;
    std::function<void()> fn;
  };
  StopControl stop_;
  Fd epoll_;
  std::vector<RingBuffer*> rbs_;
  std::vector<Timer> timers_;
  std::vector<std::function<void()>> wakeup_;
  bool stopped_ = false;
  Clock::duration gap_{};
};

}  // namespace gpuscope
