// src/task_side.hpp: what code that runs in both roles asks of the executor when it runs inside a
// task. fibra::submit, fibra::put, a Queue's calls and actors' handles are written once (src/driver/,
// src/calls/) and run in the driver and in tasks alike; in a task they go through the executor,
// which registers its side here as it starts (executor_main). The driver's code reaches the
// executor through this interface only: src/driver/ includes nothing from src/executor/, nor the
// reverse (layout.roles_apart), and neither links a symbol of the other (layout.roles_linked_apart).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fibra/detail/core.hpp"
#include "transport/wire.hpp"

namespace fibra::detail {

class TaskSide {
 public:
  virtual ~TaskSide() = default;
  /// The core through which tasks submit work and call actors (uid 0: the pool that runs this
  /// executor; else the pool of an actor).
  virtual std::shared_ptr<PoolCore> core(std::uint64_t uid) = 0;
  /// A Queue's, Pipe's or Event's call, sent to the driver (whose channels hold them) and waited
  /// for as any call of a task.
  virtual wire::ChannelReply channel_call(wire::ChannelCall call) = 0;
  /// fibra::put in a task (see executor/objects.hpp): the stored object, or nullptr where the
  /// Future must hold the value.
  virtual std::shared_ptr<const StoredObject> store_object(std::string& encoded) = 0;
  /// This process will call channels (it runs a Process): its lane is asked for now.
  virtual void want_lane() noexcept = 0;
  /// Waits, at most `most`, until the driver reads this process's channel calls from its lane.
  virtual void await_ring(std::chrono::milliseconds most) noexcept = 0;
  /// The codec's spill_large (fibra/detail/codec.hpp): a large block of a result frame written
  /// straight into the shared memory the frame is bound for.
  virtual bool spill_large(std::string& out, const void* p, std::size_t n) = 0;
};

/// The executor's side; nullptr in the driver and in agents.
TaskSide* task_side() noexcept;
/// Called once, by executor_main, before it runs anything.
void register_task_side(TaskSide& side) noexcept;

/// Who holds a lock of fibra/sync.hpp in this process: the task this thread runs now (a task run on
/// top of a waiting one, on the same thread, is another holder), else the thread itself. Unique in
/// the process.
std::uint64_t lock_holder() noexcept;
/// A task runs on this thread: a holder of its own until it returns.
class HolderScope {
 public:
  HolderScope() noexcept;
  ~HolderScope();
  HolderScope(const HolderScope&) = delete;
  HolderScope& operator=(const HolderScope&) = delete;

 private:
  std::uint64_t was_;
};

/// True in an executor (a worker process that runs user functions).
inline bool in_executor() noexcept { return task_side() != nullptr; }

}  // namespace fibra::detail
