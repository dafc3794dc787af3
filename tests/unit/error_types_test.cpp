// fibra's error types as they travel (src/common/error_types.hpp): every class that
// include/fibra/error.hpp declares is on the list, is made again as itself from its name, and,
// when its only state is its message, is registered as FIBRA_EXCEPTION types are (one escaping a
// task is caught as itself in the caller).
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "common/error_types.hpp"
#include "fibra/detail/registry.hpp"
#include "fibra/error.hpp"

using namespace fibra;
using fibra::detail::exception_type_name;
using fibra::detail::make_fibra_error;
using fibra::detail::make_registered_exception;

namespace {

// The classes error.hpp and the HDF5 store's error.hpp derive from fibra::Error, read from the
// headers themselves: a type added there and not to the list fails here.
std::set<std::string> declared_error_types() {
  std::stringstream text;
  for (const char* header : {"/include/fibra/error.hpp", "/hdf5_io/include/fibra/hdf5_io/error.hpp"}) {
    std::ifstream in(std::string(FIBRA_SOURCE_DIR) + header);
    text << in.rdbuf();
  }
  const std::string s = text.str();
  std::set<std::string> names;
  const std::regex declared(R"(class (\w+) : public (Error|RemoteError|std::runtime_error) \{)");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), declared); it != std::sregex_iterator(); ++it)
    names.insert((*it)[1]);
  return names;
}

TEST(ErrorTypes, EveryTypeErrorHppDeclaresIsMadeAgainAsItselfFromItsName) {
  const auto names = declared_error_types();
  ASSERT_GE(names.size(), 18u) << "error.hpp was not read from " << FIBRA_SOURCE_DIR;
  EXPECT_TRUE(names.contains("Hdf5Error")) << "hdf5_io/error.hpp was not read";
  for (const auto& name : names) {
    const std::string type = "fibra::" + name;
    const auto e = make_fibra_error(type, "what it says", "std::logic_error", "the remote message");
    ASSERT_TRUE(e) << type << " is not on the list in src/common/error_types.hpp";
    EXPECT_EQ(exception_type_name(e), type);
    try {
      std::rethrow_exception(e);
    } catch (const RemoteError& r) {
      EXPECT_STREQ(r.what(), "what it says");
      EXPECT_EQ(r.type_name(), "std::logic_error");
      EXPECT_EQ(r.remote_message(), "the remote message");
    } catch (const Error& r) {
      EXPECT_STREQ(r.what(), "what it says");
    }
  }
  EXPECT_FALSE(make_fibra_error("std::runtime_error", "w", "", ""));
  EXPECT_FALSE(make_fibra_error("fibra::NoSuchError", "w", "", ""));
}

TEST(ErrorTypes, OnesWithOnlyAMessageTravelAsRegisteredTypesDo) {
  RemoteSite site{"impatient", 3, 2, "node7", 4242};
  for (const char* type : {"fibra::GetTimeout", "fibra::TaskCancelled", "fibra::QueueClosed", "fibra::ConfigError"}) {
    const auto e = make_registered_exception(type, "impatient raised it on item 3", "no result in time", site);
    ASSERT_TRUE(e) << type << " is not registered";
    try {
      std::rethrow_exception(e);
    } catch (const Error& caught) {
      EXPECT_STREQ(caught.what(), "no result in time");
      const auto* origin = dynamic_cast<const RemoteOrigin*>(&caught);
      ASSERT_NE(origin, nullptr) << type;
      EXPECT_EQ(origin->type_name(), type);
      EXPECT_EQ(origin->context(), "impatient raised it on item 3");
      EXPECT_EQ(origin->site().host, "node7");
    }
  }
  EXPECT_FALSE(make_registered_exception("fibra::Error", "c", "m", site))
      << "a plain fibra::Error from a task stays a RemoteError, which says where it came from";
  try {
    std::rethrow_exception(make_registered_exception("fibra::GetTimeout", "c", "m", site));
  } catch (const GetTimeout&) {
    SUCCEED();
  } catch (...) {
    ADD_FAILURE() << "a GetTimeout from a task is not caught as fibra::GetTimeout";
  }
}

}  // namespace
