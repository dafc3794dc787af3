// The text of the error a call throws, for tests that check what a message says:
//
//   const std::string why = error_of([&] { pool.submit(...).get(); });
//   EXPECT_NE(why.find("no retries left"), std::string::npos) << why;
#pragma once

#include <exception>
#include <string>

namespace fibra_test {

/// What `f()` threw (its what()), or "" if it threw nothing: no message is found in that.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace fibra_test
