// What the two stores of waits share (ChannelStore in channels.cpp, SyncStore in sync_store.cpp):
// the answers gathered under the store's lock and given once it is released (WaitStore), and the
// timer thread that sleeps until the earliest deadline and expires what is due (start_wait_timer).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/log.hpp"
#include "driver/channels.hpp"
#include "transport/wire.hpp"

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

/// The lock, the deadlines and the answers of a store whose calls may wait (Store: the store itself,
/// whose `expire` and `run_ready` its timer thread calls). Waiter has `done` (a
/// ChannelStore::Done, empty once answered), `timed`, `at` (its entry in `deadlines`) and a
/// `Deadlines` type (a multimap of time points to weak pointers of waiters).
template <class Waiter, class Store>
struct WaitStore {
  using Completion = std::pair<ChannelStore::Done, std::pair<std::exception_ptr, wire::ChannelReply>>;

  std::mutex mu;
  std::condition_variable timer_cv;
  bool timer_started = false;
  typename Waiter::Deadlines deadlines;
  std::vector<Completion> ready;  // under mu; given once it is released
  // (Moved as the vector grows, never copied: a reply may hold 100 MB of items.)
  static_assert(std::is_nothrow_move_constructible_v<Completion>);

  /// Under mu: queues `done`'s answer. Built in place: `push_back({done, {e, r}})` made the inner
  /// pair a temporary and then copied it (a braced list picks pair's `const T&` constructor), a
  /// copy of every item a get took (100 MB: 60 ms of B8's pipe round trip, twice).
  void answer(ChannelStore::Done done, std::exception_ptr e, wire::ChannelReply r) {
    ready.emplace_back(std::piecewise_construct, std::forward_as_tuple(std::move(done)),
                       std::forward_as_tuple(std::move(e), std::move(r)));
  }

  /// Under mu: `w` is answered (once; its deadline goes).
  void finish(const std::shared_ptr<Waiter>& w, std::exception_ptr e, wire::ChannelReply r = {}) {
    if (!w->done) return;
    if (w->timed) deadlines.erase(w->at);
    w->timed = false;
    answer(std::move(w->done), std::move(e), std::move(r));
    w->done = nullptr;
  }
  /// Under mu: `w` waits at most `timeout_s` (none if < 0), the timer thread started if need be.
  void time(const std::shared_ptr<Waiter>& w, double timeout_s) {
    if (timeout_s < 0) return;
    using Clock = std::chrono::steady_clock;
    const auto at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(std::min(timeout_s, 1e9)));
    w->at = deadlines.emplace(at, w);
    w->timed = true;
    start_wait_timer(static_cast<Store&>(*this));
    timer_cv.notify_one();
  }
  /// Under mu: `w` no longer waits for its deadline.
  void untime(const std::shared_ptr<Waiter>& w) {
    if (w->timed) deadlines.erase(w->at);
    w->timed = false;
  }
  /// Under mu: a call that did not wait is answered.
  void finish(ChannelStore::Done& done, std::exception_ptr e, wire::ChannelReply r = {}) {
    answer(std::move(done), std::move(e), std::move(r));
  }
  /// Never under mu: gives the answers taken from `ready`; one that throws is logged, naming
  /// `whose` caller it was ("a queue's").
  static void give(std::vector<Completion>& answers, const char* whose) {
    for (auto& [done, outcome] : answers) {
      try {
        if (done) done(std::move(outcome.first), std::move(outcome.second));
      } catch (const std::exception& e) {
        log::error("fibra: answering {} caller: {}", whose, e.what());
      }
    }
  }
};

}  // namespace fibra::detail
