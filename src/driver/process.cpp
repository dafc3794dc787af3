// fibra::Process in the driver (fibra/process.hpp): an actor of its own (detail::ProcessHost) that
// runs one function; its handle is let go once the call is made, so that the process ends when
// the function does.
#include "fibra/process.hpp"

#include "task_side.hpp"
#include "fibra/tasks.hpp"

#include <csignal>
#include <cstdlib>
#include <string>

namespace fibra {
namespace detail {

int exit_code_of_death(const std::string& why) noexcept {
  auto number_after = [&](const char* words) -> std::optional<int> {
    const auto at = why.find(words);
    if (at == std::string::npos) return std::nullopt;
    return std::atoi(why.c_str() + at + std::char_traits<char>::length(words));
  };
  if (auto sig = number_after("killed by signal ")) return -*sig;
  if (auto status = number_after("exited with status ")) return *status;
  return -SIGKILL;  // its worker was lost, or its pool ended under it
}

}  // namespace detail

Process::State& Process::state() const {
  if (!s_) throw ConfigError("fibra: this Process was moved from; use the Process it was moved to");
  return *s_;
}

void Process::start() {
  state();
  if (detail::in_executor())
    throw ConfigError("fibra: Process " + s_->name +
                      " was started inside a task; start Processes from the driver (a task can start an actor, "
                      "or put work in a Queue that a Process started by the driver reads)");
  if (s_->started)
    throw ConfigError("fibra: Process " + s_->name + " was started already (a Process starts once, as in Python)");
  ActorOptions options;
  options.resources = s_->resources;
  options.pool = s_->pool;
  s_->host = Actor<detail::ProcessHost>::start(options);
  s_->where = s_->host.call(&detail::ProcessHost::where);
  s_->outcome = s_->host.call(&detail::ProcessHost::run, s_->fn, std::move(s_->args));
  s_->core = s_->host.h_->core;
  s_->actor = s_->host.h_->id;
  s_->host = {};  // the process ends when the function does
  s_->started = true;
}

void Process::join() {
  if (!state().started) throw ConfigError("fibra: Process " + s_->name + " was joined before start()");
  s_->outcome.wait();
}

bool Process::join_for(double seconds) {
  if (!state().started) throw ConfigError("fibra: Process " + s_->name + " was joined before start()");
  return s_->outcome.wait_for(std::chrono::duration<double>(std::max(0.0, seconds)));
}

bool Process::is_alive() const { return state().started && !s_->outcome.ready(); }

std::optional<int> Process::exitcode() const {
  if (!state().started || !s_->outcome.ready()) return std::nullopt;
  try {
    return static_cast<int>(std::get<0>(s_->outcome.get()));
  } catch (const ActorDied& e) {
    return detail::exit_code_of_death(e.cause().empty() ? e.what() : e.cause());
  } catch (const std::exception&) {
    return -SIGKILL;
  }
}

std::optional<RemoteError> Process::error() const {
  if (!state().started || !s_->outcome.ready() || exitcode() == 0) return std::nullopt;
  RemoteSite site;
  site.function = s_->name;
  try {
    const auto& [code, type, message] = s_->outcome.get();
    if (code == 0) return std::nullopt;
    return RemoteError("fibra: Process " + s_->name + " threw " + type + ": " + message, type, message, site);
  } catch (const RemoteError& e) {
    return e;
  } catch (const ActorDied& e) {  // its process ended: say how, of the user's function, as a task's crash does
    const std::string& how = e.cause().empty() ? std::string("its process ended") : e.cause();
    const bool signalled = how.rfind("was killed by signal ", 0) == 0,
               exited = how.rfind("exited with status ", 0) == 0;
    return RemoteError("fibra: Process " + s_->name + (signalled || exited ? " " : " ended: ") + how,
                       signalled ? "signal"
                       : exited  ? "exit"
                                 : "lost",
                       how, site);
  } catch (const std::exception& e) {
    return RemoteError(e.what(), "", "", site);
  }
}

void Process::signal(int sig) {
  if (!state().started) throw ConfigError("fibra: Process " + s_->name + " was ended before start()");
  if (s_->outcome.ready()) return;
  s_->core->signal_actor(s_->actor, sig);
}

void Process::terminate() { signal(SIGTERM); }
void Process::kill() { signal(SIGKILL); }

std::pair<long, std::string> Process::where() const {
  if (!state().started) throw ConfigError("fibra: Process " + s_->name + " has no process before start()");
  try {
    return s_->where.get();
  } catch (const ActorDied&) {  // it ended before it could say where it ran
    return {0, ""};
  }
}

long Process::pid() const { return where().first; }
std::string Process::host() const { return where().second; }

}  // namespace fibra
