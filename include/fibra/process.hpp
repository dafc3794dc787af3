// fibra/process.hpp: fibra::Process, multiprocessing.Process made cluster-wide (Fiber's Process):
// a registered function run in a process of its own on one of a pool's workers.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "fibra/actor.hpp"
#include "fibra/detail/call_checks.hpp"
#include "fibra/detail/codec.hpp"
#include "fibra/detail/registry.hpp"
#include "fibra/error.hpp"
#include "fibra/pool.hpp"
#include "fibra/resources.hpp"

namespace fibra {

/// @brief How a Process is placed and named.
struct ProcessOptions {
  /// The pool whose worker runs it (it must outlive the process); nullptr: fibra::default_pool().
  Pool* pool = nullptr;
  /// Runs on a worker that offers at least this much (docs/resources.md).
  Resources resources;
  /// What messages call it ("": its function's name).
  std::string name;
};

namespace detail {

/// What a process's function did: 0 returned, 1 threw (its exception's type and message).
using ProcessOutcome = std::tuple<long, std::string, std::string>;

/// The actor that runs a Process: one per process, which runs one function and ends.
class ProcessHost {
 public:
  /// Asks for its lane at once (executor_wants_lane): its function's calls on queues and pipes
  /// then find their ring open.
  ProcessHost();
  /// Its pid and host, which Process::pid() and host() report.
  std::pair<long, std::string> where();
  /// Runs registered function `fn` (its id) on `args`, encoded as a submit encodes them.
  ProcessOutcome run(std::uint64_t fn, std::string args);
};
bool register_process_host() noexcept;
inline const bool process_host_registered = register_process_host();

/// The exit code of a process whose actor died, from the reason its agent gave ("was killed by
/// signal 9 (Killed)" gives -9, "exited with status 3" gives 3; a lost worker gives -9).
int exit_code_of_death(const std::string& why) noexcept;

}  // namespace detail

/// @brief A function run in a process of its own, as Python's multiprocessing.Process: it starts
/// on a worker of the default pool chosen by placement and resources (as an actor is), and is
/// joined, polled, terminated or killed from the driver.
/// @code
///   void produce(fibra::Queue<long> q, long n);   // FIBRA_REMOTE(produce)
///   fibra::Process writer(produce, q, 100000L);
///   writer.start();
///   writer.join();
///   if (writer.exitcode() != 0) std::cerr << writer.error()->what();
/// @endcode
/// Its value, if the function returns one, is not kept (as in Python); pass a Queue or a Pipe to
/// send results back. A Process still running when its pool ends (or the program) is ended with
/// it: none outlives the driver.
class Process {
 public:
  /// @brief A process that will run `fn(args...)` once started; the arguments are encoded now.
  template <class R, class... P, class... Args>
  explicit Process(R (*fn)(P...), Args&&... args) : Process(ProcessOptions{}, fn, std::forward<Args>(args)...) {}
  template <class R, class... P, class... Args>
  Process(const ProcessOptions& options, R (*fn)(P...), Args&&... args) : s_(std::make_shared<State>()) {
    static_assert(sizeof...(P) == sizeof...(Args),
                  "fibra: Process got a different number of arguments than the "
                  "function takes");
    static_assert(detail::check_signature<R, P...>());
    const auto& entry = detail::function_by_address(reinterpret_cast<const void*>(fn), "Process");
    s_->fn = entry.id;
    s_->name = options.name.empty() ? entry.name : options.name;
    s_->resources = options.resources;
    s_->pool = options.pool;
    detail::Writer w(s_->args);
    detail::encode(w, std::tuple<detail::stored_t<P>...>(std::forward<Args>(args)...));
  }
  // A lambda, a function object or a member function lands here, where a static_assert says so in
  // fibra's words instead of "no matching function" (detail::refuse_function).
  template <class F, class... Args>
  requires detail::callable_object<F>
  explicit Process(F&&, Args&&...) { detail::refuse_function<F, false>(); }
  template <class F, class... Args>
  requires detail::callable_object<F> Process(const ProcessOptions&, F&&, Args&&...) {
    detail::refuse_function<F, false>();
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  Process(Process&&) noexcept = default;
  Process& operator=(Process&&) noexcept = default;

  /// @brief Starts it: its process is made on a worker, and runs the function.
  /// @throws ConfigError if it was started before, inside a task (Processes are the driver's), or
  /// no worker can offer its resources.
  void start();
  /// @brief Waits until it ends.
  void join();
  /// @brief Waits at most `timeout`: whether it ended.
  template <class Rep, class Period>
  bool join(std::chrono::duration<Rep, Period> timeout) {
    return join_for(std::chrono::duration<double>(timeout).count());
  }
  /// @brief Started and not yet ended.
  bool is_alive() const;
  /// @brief Once it ended: 0 if the function returned, 1 if it threw, -N if its process was killed
  /// by signal N (-9 too if its worker was lost), N if it exited with status N; nothing before.
  std::optional<int> exitcode() const;
  /// @brief What it threw (exit code 1), or why its process died; nothing otherwise.
  std::optional<RemoteError> error() const;
  /// @brief Ends it: SIGTERM, then SIGKILL if it has not ended within 2 s. Its exit code is -15
  /// (or -9). Nothing happens to one that ended.
  void terminate();
  /// @brief Ends it at once with SIGKILL (exit code -9).
  void kill();
  /// @brief Its process's pid, once it runs (waits for its start; 0 if it ended before that).
  /// @throws ConfigError before start().
  long pid() const;
  /// @brief The host it runs on, once it runs (waits for its start; "" if it ended before that).
  std::string host() const;
  /// @brief What messages call it: its ProcessOptions::name, or its function's name.
  const std::string& name() const { return state().name; }

 private:
  bool join_for(double seconds);
  void signal(int sig);
  std::pair<long, std::string> where() const;
  struct State {
    std::uint64_t fn = 0;
    std::string name;
    Resources resources;
    Pool* pool = nullptr;
    std::string args;
    Actor<detail::ProcessHost> host;
    Future<std::pair<long, std::string>> where;
    Future<detail::ProcessOutcome> outcome;
    std::shared_ptr<detail::PoolCore> core;  // of its actor, which terminate() and kill() signal
    std::uint64_t actor = 0;
    bool started = false;
  };
  State& state() const;  // throws ConfigError for a moved-from Process
  std::shared_ptr<State> s_;
};

}  // namespace fibra
