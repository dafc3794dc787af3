// src/executor/call_threads.hpp: the calls of an actor whose calls run at once
// (ActorOptions::max_concurrency > 1), each on a thread of its own.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "executor/inbox.hpp"
#include "transport/lane.hpp"
#include "transport/wire.hpp"

namespace fibra::detail::exec {

// ---- An actor whose calls run at once (ActorOptions::max_concurrency > 1) ----
// The task thread runs its constructor's batch itself (the driver sends it alone), then hands each
// later call to one of the actor's call threads (as many as its concurrency, started as calls come)
// and goes back to its socket; a call's result goes to the agent as soon as it is done. Such an
// actor's calls come through the agent only (the driver does not use its lane), so that all of
// them can be in the process at once. The mailbox shows the oldest call running: a time limit and
// a crash are told against it. The stored objects of calls waiting or running stay mapped.
class CallThreads {
 public:
  // Takes the batch if it holds calls of such an actor whose object is made (false: run it as any).
  bool take(Inbox::Batch& b);
  // Unmaps the stored objects no call waiting or running takes (an idle task thread's sweep).
  void keep_objects_in_use();

 private:
  struct Call {
    std::shared_ptr<const std::string> batch;  // holds the bytes `view` points into
    wire::TaskView view;
  };

  // One more call thread (under mu_); false if the system gives none now (a limit on threads or
  // memory): the calls go to the threads there are.
  bool start_thread();

  void serve();
  // Under mu_.
  void show_oldest(Mailbox& box);
  // Under mu_.
  void keep_objects();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Call> waiting_;              // in order
  std::deque<Call> running_;              // in the order they began
  std::map<std::uint64_t, int> objects_;  // stored objects the calls waiting or running take: how many
  std::size_t threads_ = 0;
};
extern CallThreads g_call_threads;

}  // namespace fibra::detail::exec
