// fibra's task thread (detail::run_later: what a delivery hands on, such as a task whose Future
// arguments are all in), the threads of map_async calls (detail::run_async_call), and the default
// pool of fibra::submit and fibra::Actor<T>::start.
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "fibra/error.hpp"
#include "fibra/pool.hpp"
#include "fibra/tasks.hpp"
#include "common/log.hpp"
#include "driver/driver.hpp"
#include "task_side.hpp"
#include "common/env.hpp"

namespace fibra::detail {
namespace {

struct TaskThread {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  std::thread thread;
  bool stopped = false;

  void loop() {
    std::unique_lock lk(mu);
    for (;;) {
      cv.wait(lk, [&] { return stopped || !queue.empty(); });
      if (queue.empty()) return;  // stopped, and nothing left
      auto f = std::move(queue.front());
      queue.pop_front();
      lk.unlock();
      run(f);
      lk.lock();
    }
  }

  static void run(std::function<void()>& f) noexcept {
    try {
      f();
    } catch (const std::exception& e) {
      log::error("fibra: a queued task step failed: {}", e.what());
    } catch (...) {
      log::error("fibra: a queued task step failed");
    }
  }
};

// Never destroyed: deliveries may still hand work on while static objects are torn down.
TaskThread& task_thread() {
  static TaskThread* t = new TaskThread;
  return *t;
}

std::mutex g_default_mu;
std::unique_ptr<Pool> g_default_pool;

// The threads of map_async and starmap_async calls, one per call, detached: counted, so that the
// Runtime's end waits for them (their calls fail with PoolClosed once the pools stop).
struct AsyncCalls {
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;  // under mu, as is:
  bool stopped = false;
};
// Never destroyed, as the task thread: a call's thread may end while static objects are torn down.
AsyncCalls& async_calls() {
  static AsyncCalls* a = new AsyncCalls;
  return *a;
}

}  // namespace

void run_later(std::function<void()> f) {
  auto& t = task_thread();
  {
    std::lock_guard lk(t.mu);
    if (!t.stopped) {
      if (!t.thread.joinable()) t.thread = std::thread([&t] { t.loop(); });
      t.queue.push_back(std::move(f));
      t.cv.notify_one();
      return;
    }
  }
  TaskThread::run(f);  // after the Runtime's end: nothing runs concurrently any more
}

void stop_task_thread() noexcept {
  auto& t = task_thread();
  {
    std::lock_guard lk(t.mu);
    t.stopped = true;
  }
  t.cv.notify_all();
  if (t.thread.joinable() && t.thread.get_id() != std::this_thread::get_id()) t.thread.join();
}

void run_async_call(std::function<void()> f) {
  if (in_executor())
    throw ConfigError("fibra: map_async and starmap_async inside a task are not supported yet: call map or starmap");
  auto& a = async_calls();
  {
    std::lock_guard lk(a.mu);
    if (a.stopped) throw PoolClosed("fibra: map_async after the fibra::Runtime ended");
    ++a.running;
  }
  auto body = [&a, f = std::move(f)]() mutable {
    try {
      f();
    } catch (const std::exception& e) {  // only a callback's (the call's own error is its result's)
      log::error("fibra: a callback of map_async or starmap_async threw: {}; its result is set all the same", e.what());
    } catch (...) {
      log::error("fibra: a callback of map_async or starmap_async threw; its result is set all the same");
    }
    std::lock_guard lk(a.mu);
    --a.running;
    a.cv.notify_all();
  };
  try {
    std::thread(std::move(body)).detach();
  } catch (...) {  // no thread to be had
    std::lock_guard lk(a.mu);
    --a.running;
    throw;
  }
}

void stop_async_calls() noexcept {
  auto& a = async_calls();
  std::unique_lock lk(a.mu);
  a.stopped = true;
  // A callback that blocks would hold the Runtime's end for good: it is waited for only so long.
  if (!a.cv.wait_for(lk, std::chrono::seconds(10), [&] { return a.running == 0; }))
    log::warning("fibra: {} map_async calls still run their callbacks 10 s after the pools stopped; not waiting",
                 a.running);
}

void drop_default_pool() noexcept {
  std::unique_ptr<Pool> p;
  {
    std::lock_guard lk(g_default_mu);
    p = std::move(g_default_pool);
  }
  p.reset();  // terminates it: its unfinished futures fail with PoolClosed
}

bool cancel_job(const std::shared_ptr<JobState>& job, bool force) {
  if (in_executor())
    throw ConfigError("fibra::cancel inside a task is not supported yet: cancel in the driver, which holds the queue");
  if (job->delivered() > 0) return false;  // finished (or failed) already
  job->request_cancel();
  const std::uint64_t uid = job->pool_uid();
  if (uid == waiting_for_arguments) {  // never queued now (deps.hpp, queue_unless_cancelled): its error at once
    if (job->claim_cancel_delivery())
      job->deliver({0,
                    1,
                    {},
                    std::make_exception_ptr(TaskCancelled("fibra: " + job->name() +
                                                          " was cancelled (fibra::cancel) while it waited for its "
                                                          "Future arguments")),
                    {}});
    return true;
  }
  if (uid == 0)
    throw ConfigError("fibra::cancel: " + job->name() +
                      " is neither a task (Pool::submit, apply_async, fibra::submit) nor an actor's call: a map's or a "
                      "starmap's call is not cancelled this way");
  const auto core = find_pool(uid);
  return core && core->cancel(job, force);
}

void when_delivered(const std::shared_ptr<JobState>& job, std::function<void()> f) {
  if (in_executor())
    throw ConfigError("fibra: Future::then inside a task is not supported yet: wait for the future there instead");
  // Handed on at the delivery (which runs on a pool's communication thread, under its locks).
  job->on_delivered([f = std::move(f)]() mutable { run_later(std::move(f)); });
}

}  // namespace fibra::detail

namespace fibra {

bool in_task() noexcept { return detail::in_executor(); }

Pool& default_pool(int workers, const PoolOptions& options) {
  if (detail::in_executor()) {  // inside a task: the pool that runs it, reached through the driver
    static Pool own(detail::task_side()->core(0));
    return own;
  }
  std::lock_guard lk(detail::g_default_mu);
  if (detail::g_default_pool) {
    if (workers != 0 && workers != detail::g_default_pool->size())
      throw ConfigError("fibra::default_pool(" + std::to_string(workers) + "): the default pool already runs with " +
                        std::to_string(detail::g_default_pool->size()) +
                        " workers; call default_pool(n) before the first submit or actor to choose its size, or "
                        "resize() it");
    return *detail::g_default_pool;
  }
  int n = workers;
  if (n == 0) {
    n = static_cast<int>(detail::env::number("FIBRA_WORKERS", 0, 1, 100000, true,
                                             "it is the default pool's workers; unset it for one per core"));
  }
  detail::g_default_pool = std::make_unique<Pool>(n, options);
  return *detail::g_default_pool;
}

}  // namespace fibra
