// An actor's calls on threads of their own (call_threads.hpp).
#include "executor/call_threads.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <system_error>
#include <thread>

#include "executor/channel_calls.hpp"
#include "executor/objects.hpp"
#include "executor/results.hpp"
#include "executor/state.hpp"

namespace fibra::detail::exec {

bool CallThreads::take(Inbox::Batch& b) {
  if (b.slot >= 0 || !actor_slot().object) return false;
  const std::vector<wire::TaskView> peek = wire::parse_tasks(b.bytes);
  if (peek.empty() || peek[0].header.actor == 0 || peek[0].header.concurrency <= 1) return false;
  const std::size_t most = std::min<std::size_t>(peek[0].header.concurrency, max_actor_concurrency);
  std::lock_guard lk(mu_);
  if (threads_ == 0 && !start_thread()) return false;  // no thread to be had: its calls run one by one
  auto bytes = std::make_shared<const std::string>(std::move(b.bytes));
  for (auto& t : wire::parse_tasks(*bytes)) {
    for (const auto& r : t.header.objects) ++objects_[r.id];
    waiting_.push_back({bytes, std::move(t)});
  }
  keep_objects();
  while (threads_ < most && threads_ < waiting_.size() + running_.size() && start_thread()) {
  }
  cv_.notify_all();
  return true;
}

void CallThreads::keep_objects_in_use() {
  std::lock_guard lk(mu_);
  keep_objects();
}

bool CallThreads::start_thread() {
  try {
    std::thread([this] { serve(); }).detach();  // lives as long as the process
  } catch (const std::system_error& e) {
    std::fprintf(stderr, "fibra: an actor's process could not start a thread for its calls (%s); %zu run them\n",
                 e.what(), threads_);
    return false;
  }
  ++threads_;
  return true;
}

void CallThreads::serve() {
  watch_stack();  // a stack overflow in a call is reported as such
  std::string results;
  RunControl ctl;
  std::vector<ItemFailure> failures;
  Mailbox& box = *g_executor.box;
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return !waiting_.empty(); });
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    const wire::TaskView t = running_.back().view;
    show_oldest(box);
    lk.unlock();
    results.assign(wire::begin_results(static_cast<std::int64_t>(::getpid())));
    {
      RunningBatch running;
      FrameSpill spill(results, false);
      with_own_puts([&] { run_chunk(t, box, results, spill, ctl, failures); });
    }
    // What it printed goes to the agent before its result does.
    std::fflush(stdout);
    std::fflush(stderr);
    send_frame(g_executor.sock, results);
    lk.lock();
    std::erase_if(running_, [&](const Call& c) { return c.view.header.chunk == t.header.chunk; });
    for (const auto& r : t.header.objects)
      if (auto o = objects_.find(r.id); o != objects_.end() && --o->second <= 0) objects_.erase(o);
    show_oldest(box);
    if (results.capacity() > lane::large_kept) std::string().swap(results);
  }
}

void CallThreads::show_oldest(Mailbox& box) {
  if (running_.empty()) {
    box.chunk.store(0, std::memory_order_release);
    return;
  }
  const wire::TaskHeader& h = running_.front().view.header;
  if (box.chunk.load(std::memory_order_relaxed) == h.chunk) return;
  box.item.store(0, std::memory_order_relaxed);
  box.timeout_s.store(h.timeout_s, std::memory_order_relaxed);
  box.chunk.store(h.chunk, std::memory_order_release);
}

void CallThreads::keep_objects() {
  std::set<std::uint64_t> ids;
  for (const auto& [id, calls] : objects_) ids.insert(id);
  executor_keep_objects(ids);
}

CallThreads g_call_threads;

void keep_objects_in_use() { g_call_threads.keep_objects_in_use(); }

}  // namespace fibra::detail::exec
