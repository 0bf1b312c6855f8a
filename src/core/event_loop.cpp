#include "core/event_loop.h"

#include <malloc.h>
#include <sys/epoll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <time.h>

namespace gpuscope {

EventLoop::Clock::duration seconds_to_duration(double s) {
  return std::chrono::duration_cast<EventLoop::Clock::duration>(std::chrono::duration<double>(s));
}

EventLoop::EventLoop(double duration_s) : stop_(duration_s), epoll_(epoll_create1(EPOLL_CLOEXEC)) {
  if (!epoll_) throw std::runtime_error(std::string("epoll: ") + strerror(errno));
}

void EventLoop::watch(RingBuffer& rb) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = rbs_.size();
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, rb.epoll_fd(), &ev) != 0)
    throw std::runtime_error(std::string("epoll_ctl: ") + strerror(errno));
  rbs_.push_back(&rb);
}

void EventLoop::every(double period_s, std::function<void()> fn) {
  auto p = seconds_to_duration(period_s);
  timers_.push_back({p, Clock::now() + p, std::move(fn)});
}

void EventLoop::run() {
  // Start-up (the kernel's BTF parsed for each BPF object, symbol tables read, NVML brought up)
  // leaves megabytes freed across the heap, resident for good unless handed back here, once.
  malloc_trim(0);
  for (auto& t : timers_) t.next = Clock::now() + t.period;
  // Signals interrupt epoll_wait; the cap bounds how late a signal that arrives just before
  // the wait is noticed.
  constexpr auto kMaxWait = std::chrono::milliseconds(100);
  epoll_event evs[16];
  Clock::time_point woke{};
  while (!stopped()) {
    auto now = Clock::now();
    // With a gap set, records that arrive sooner wait in their buffers and are read together.
    if (gap_ > Clock::duration::zero() && now < woke + gap_) {
      auto until = woke + gap_;
      for (auto& t : timers_) until = std::min(until, t.next);
      if (now < until) {
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(until - now).count();
        timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
        nanosleep(&ts, nullptr);  // a signal ends it early
        now = Clock::now();
      }
    }
    auto wait = Clock::duration(kMaxWait);
    for (auto& t : timers_) wait = std::min(wait, std::max(Clock::duration::zero(), t.next - now));
    if (stop_.deadline()) wait = std::min(wait, std::max(Clock::duration::zero(), *stop_.deadline() - now));
    int ms = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count());
    int n = epoll_wait(epoll_.get(), evs, 16, ms);
    if (n < 0 && errno != EINTR) throw std::runtime_error(std::string("epoll_wait: ") + strerror(errno));
    woke = Clock::now();
    // Producers may submit without waking us: every buffer is read on every wake-up.
    for (RingBuffer* rb : rbs_) rb->drain();
    now = Clock::now();
    for (size_t i = 0; i < timers_.size() && !stopped(); i++) {
      Timer& t = timers_[i];
      if (now < t.next) continue;
      t.fn();
      t.next += t.period;
      if (t.next < now) t.next = now + t.period;  // fell behind: skip, don't burst
    }
    for (auto& f : wakeup_) f();
  }
}

}  // namespace gpuscope
