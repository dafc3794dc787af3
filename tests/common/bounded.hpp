// Bounded waits for the MPI, tasks, faults and checkpoint suites: a result that never comes fails
// the test with a sentence naming what did not arrive, instead of a hang until ctest's timeout.
//
//   const long v = get_within(pool.apply_async(square, 3), 60s, "square(3)");
//   const auto r = call_within(60s, "map of square over 1000 items", [&] { return pool.map(square, in); });
//
// When a bound runs out, the program ends at once (exit status 1) after printing
//   FAIL: no result within 60 s for square(3) (pool_test.cpp:123)
// on stdout, which every runner of these suites reads as a failure (gtest's own verdict, a ctest
// FAIL_REGULAR_EXPRESSION, or the exit status). The program cannot go on instead: the waiting call
// still runs, on a thread that holds the test's locals, and a pool that lost a result is no pool
// to run the next test on. Nor could a throw end only the test: the tests' own catch blocks and
// EXPECT_THROWs, there for fibra's errors, would take it.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <source_location>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>

namespace fibra_test {

/// @brief Ends the program: `what` did not come within `bound` (see the top of this file).
[[noreturn]] inline void no_result(std::chrono::seconds bound, std::string_view what, std::source_location where) {
  std::string_view file = where.file_name();
  if (const auto slash = file.rfind('/'); slash != std::string_view::npos) file.remove_prefix(slash + 1);
  std::printf("\nFAIL: no result within %lld s for %.*s (%.*s:%u)\n", static_cast<long long>(bound.count()),
              static_cast<int>(what.size()), what.data(), static_cast<int>(file.size()), file.data(),
              static_cast<unsigned>(where.line()));
  std::fflush(nullptr);
  std::_Exit(1);
}

/// @brief Waits at most `bound` for a fibra::Future (or a copy of one); ends the program naming
///        `what` if it is not there by then.
template <class Future>
void wait_within(const Future& future, std::chrono::seconds bound, std::string_view what,
                 std::source_location where = std::source_location::current()) {
  if (!future.wait_for(bound)) no_result(bound, what, where);
}

/// @brief `future.get()` once it is there, waiting at most `bound`: the value, or the call's error
///        thrown as get() throws it.
template <class Future>
decltype(auto) get_within(Future&& future, std::chrono::seconds bound, std::string_view what,
                          std::source_location where = std::source_location::current()) {
  wait_within(future, bound, what, where);
  return std::forward<Future>(future).get();
}

/// @brief Runs a call that blocks (a map, a loop over an imap, a join) on a thread of its own and
///        waits at most `bound` for it: its value, or its exception rethrown here.
template <class Call>
std::invoke_result_t<Call&> call_within(std::chrono::seconds bound, std::string_view what, Call&& call,
                                        std::source_location where = std::source_location::current()) {
  std::packaged_task<std::invoke_result_t<Call&>()> task(std::ref(call));
  auto result = task.get_future();
  std::thread(std::move(task)).detach();  // left running only when the program is about to end
  if (result.wait_for(bound) != std::future_status::ready) no_result(bound, what, where);
  return result.get();
}

}  // namespace fibra_test
