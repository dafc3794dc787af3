// src/calls/process_host.cpp: the actor that runs a fibra::Process (fibra/process.hpp), in its own
// process on a worker. Its methods run in an executor, and the driver names them (registered by
// address, as any actor's): so it is here, where both roles may reach it, and asks the executor
// what it needs through src/task_side.hpp.
#include <unistd.h>

#include <climits>
#include <string>

#include "fibra/process.hpp"
#include "task_side.hpp"

namespace fibra::detail {

ProcessHost::ProcessHost() {
  if (TaskSide* t = task_side()) t->want_lane();
}

std::pair<long, std::string> ProcessHost::where() {
  char host[HOST_NAME_MAX + 1] = {};
  ::gethostname(host, sizeof host - 1);
  return {static_cast<long>(::getpid()), host};
}

ProcessOutcome ProcessHost::run(std::uint64_t fn, std::string args) {
  if (TaskSide* t = task_side()) t->await_ring(std::chrono::milliseconds(10));
  const FunctionEntry* e = function_by_id(fn);
  if (!e || !e->run_tuple)
    return {1, "fibra::ConfigError",
            "fibra: this worker has no registered function of id " + std::to_string(fn) +
                "; are the driver and its workers the same build?"};
  std::string out;
  ItemFailure fail;
  Cursor cursor{0};
  const RunControl plain;
  if (e->run_tuple(args, 1, out, fail, cursor, plain)) return {0, "", ""};
  return {1, fail.type, fail.message};
}

bool register_process_host() noexcept {
  static const bool done = ActorClass<ProcessHost>::add() &&
                           ActorMethod<ProcessHost, &ProcessHost::where>::add("fibra::detail::ProcessHost::where") &&
                           ActorMethod<ProcessHost, &ProcessHost::run>::add("fibra::detail::ProcessHost::run");
  return done;
}

}  // namespace fibra::detail
