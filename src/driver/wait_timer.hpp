// The timer thread of a store of waits (ChannelStore in channels.cpp, SyncStore in sync_store.cpp):
// it sleeps until the earliest deadline, expires under the store's lock what is due (Store::expire),
// and runs the answers gathered once the lock is released (Store::run_ready).
#pragma once

#include <chrono>
#include <mutex>
#include <thread>

namespace fibra::detail {

/// Starts `store`'s timer thread, once (at its first timed wait). It lives as long as the process,
/// as the stores do. Store has: `mu`, `timer_cv`, `timer_started`, `deadlines` (a multimap of time
/// points to weak pointers of waiters with a `timed` flag), `expire(waiter)` and `run_ready(lock)`.
template <class Store>
void start_wait_timer(Store& store) {
  if (store.timer_started) return;
  store.timer_started = true;
  std::thread([&store] {
    using Clock = std::chrono::steady_clock;
    std::unique_lock lk(store.mu);
    for (;;) {
      if (store.deadlines.empty()) {
        store.timer_cv.wait(lk);
        continue;
      }
      if (const auto first = store.deadlines.begin()->first; Clock::now() < first) {
        store.timer_cv.wait_until(lk, first);
        continue;
      }
      while (!store.deadlines.empty() && store.deadlines.begin()->first <= Clock::now()) {
        auto w = store.deadlines.begin()->second.lock();
        store.deadlines.erase(store.deadlines.begin());
        if (!w) continue;
        w->timed = false;
        store.expire(w);
      }
      store.run_ready(lk);
      lk.lock();
    }
  }).detach();
}

}  // namespace fibra::detail
