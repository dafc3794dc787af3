#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "fibra/remote.hpp"

namespace {

int square(int x) { return x * x; }
double affine(double a, double x, int b) { return a * x + b; }
std::string shout(const std::string& s) {
  if (s.empty()) throw std::invalid_argument("empty input");
  return s + "!";
}
int not_registered(int x) { return x; }
int positive(int x) {
  if (x < 0) throw std::domain_error("negative");
  return x;
}

}  // namespace

FIBRA_REMOTE(square);
FIBRA_REMOTE(affine);
FIBRA_REMOTE(shout);
FIBRA_REMOTE(positive);
FIBRA_REMOTE(square);  // a second registration of the same function is harmless

namespace {

using namespace fibra::detail;

TEST(Registry, FindsFunctionsByAddressAndByName) {
  const auto& e = function_by_address(reinterpret_cast<const void*>(&square), "map");
  EXPECT_EQ(e.name, "square");
  EXPECT_EQ(function_by_id(hash_name("square")), &e);
  EXPECT_NE(e.run_single, nullptr);
  EXPECT_EQ(function_by_address(reinterpret_cast<const void*>(&affine), "map").run_single, nullptr);
  EXPECT_EQ(function_by_id(hash_name("no_such_function")), nullptr);
  auto names = registry_names();  // this test binary's other files register functions too
  EXPECT_EQ(registry_size(), names.size());
  EXPECT_EQ(std::count(names.begin(), names.end(), "square"), 1);  // registered twice, listed once
  EXPECT_EQ(std::count(names.begin(), names.end(), "affine"), 1);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_NO_THROW(check_registry());
}

TEST(Registry, UnregisteredFunctionIsAClearError) {
  try {
    function_by_address(reinterpret_cast<const void*>(&not_registered), "map");
    FAIL() << "no error";
  } catch (const fibra::ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("fibra: map was given "), std::string::npos) << m;
    EXPECT_NE(m.find("which is not registered for remote calls: add FIBRA_REMOTE(<its name>); at namespace "
                     "scope next to its definition"),
              std::string::npos)
        << m;
  }
}

// fibra's name hash, written here from its definition rather than taken from fibra: the FNV-1a
// step (xor a byte, multiply by 0x100000001b3) from the offset basis 1469598103934665603, which is
// the published FNV basis 14695981039346656037 short of its last digit. Function ids travel between
// driver and workers and are derived from it, so it is kept as it is.
std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The fingerprint the driver compares with each worker's: that hash of every registered function's
// name and mangled type, sorted by name ("name\x1ftype\x1e" each). Computed here from the list of
// what this test binary registers, so that a fingerprint that left out the types (a worker built
// with another signature would pass) or a function fails.
TEST(Registry, FingerprintIsTheHashOfEveryNameAndType) {
  const std::vector<std::pair<std::string, std::string>> registered = {
      {"affine", typeid(double(double, double, int)).name()},  // registry_test.cpp
      {"answer", typeid(long(long)).name()},                   // future_test.cpp
      {"echo", typeid(long(long)).name()},                     // pool_parts_test.cpp
      {"ident", typeid(int(int)).name()},                      // scheduler_test.cpp
      {"positive", typeid(int(int)).name()},                   // registry_test.cpp
      {"shout", typeid(std::string(const std::string&)).name()},
      {"square", typeid(int(int)).name()},
      {"twice", typeid(long(long)).name()},  // stream_test.cpp
  };
  std::vector<std::string> names;
  std::string all;
  for (auto& [name, type] : registered) {
    names.push_back(name);
    all += name + '\x1f' + type + '\x1e';
  }
  ASSERT_EQ(registry_names(), names) << "a test file registers another function: add it to this list";
  EXPECT_EQ(registry_fingerprint(), fnv1a(all));
  EXPECT_EQ(hash_name("a"), 0x44bd8ad473cd9906ull);  // computed by Python from the same definition
}

TEST(Registry, RunnersApplyTheFunctionToEveryItem) {
  const auto& e = function_by_address(reinterpret_cast<const void*>(&square), "map");
  std::vector<int> in{1, 2, 3};
  std::string bytes(reinterpret_cast<const char*>(in.data()), in.size() * sizeof(int));
  std::string out;
  ItemFailure fail;
  Cursor cursor{0};
  ASSERT_TRUE(e.run_single(bytes, 3, out, fail, cursor, {}));
  std::vector<int> r(3);
  decode_items(out, r.data(), 3);
  EXPECT_EQ(r, (std::vector<int>{1, 4, 9}));
  EXPECT_EQ(cursor.load(), 2u);

  const auto& a = function_by_address(reinterpret_cast<const void*>(&affine), "starmap");
  std::string targs = encode_value(std::tuple<double, double, int>(2.0, 3.0, 1));
  out.clear();
  ASSERT_TRUE(a.run_tuple(targs, 1, out, fail, cursor, {}));
  EXPECT_EQ(decode_value<double>(out), 7.0);
}

TEST(Registry, ARunnerStopsAtTheFirstItemThatThrows) {
  const auto& e = function_by_address(reinterpret_cast<const void*>(&shout), "map");
  std::string bytes;
  Writer w(bytes);
  for (std::string s : {"a", "", "c"}) encode(w, s);
  std::string out;
  ItemFailure fail;
  Cursor cursor{0};
  EXPECT_FALSE(e.run_single(bytes, 3, out, fail, cursor, {}));
  EXPECT_EQ(fail.offset, 1u);
  EXPECT_EQ(fail.type, "std::invalid_argument");
  EXPECT_EQ(fail.message, "empty input");
}

TEST(Registry, KeepGoingRecordsEveryFailureAndSkipsPoisonItems) {
  // Encoded items and results.
  const auto& e = function_by_address(reinterpret_cast<const void*>(&shout), "map");
  std::string bytes;
  Writer w(bytes);
  for (std::string s : {"a", "", "c", "d"}) encode(w, s);
  std::string out;
  ItemFailure fail;
  Cursor cursor{0};
  std::vector<ItemFailure> failures;
  RunControl ctl{.keep_going = true, .skip = {2}, .failures = &failures};
  ASSERT_TRUE(e.run_single(bytes, 4, out, fail, cursor, ctl));
  std::vector<std::string> r(4);
  decode_items(out, r.data(), 4);
  EXPECT_EQ(r, (std::vector<std::string>{"a!", "", "", "d!"}));
  ASSERT_EQ(failures.size(), 2u);
  EXPECT_EQ(failures[0].offset, 1u);
  EXPECT_EQ(failures[0].message, "empty input");
  EXPECT_EQ(failures[1].offset, 2u);
  EXPECT_EQ(failures[1].type, "skipped");

  // Raw items and results (the fast path's careful twin).
  const auto& p = function_by_address(reinterpret_cast<const void*>(&positive), "map");
  std::vector<int> in{5, -1, 7, -2, 9};
  std::string raw(reinterpret_cast<const char*>(in.data()), in.size() * sizeof(int));
  out.clear();
  failures.clear();
  RunControl ctl2{.keep_going = true, .skip = {4}, .failures = &failures};
  ASSERT_TRUE(p.run_single(raw, 5, out, fail, cursor, ctl2));
  std::vector<int> ri(5);
  decode_items(out, ri.data(), 5);
  EXPECT_EQ(ri, (std::vector<int>{5, 0, 7, 0, 0}));
  ASSERT_EQ(failures.size(), 3u);
  EXPECT_EQ(failures[0].offset, 1u);
  EXPECT_EQ(failures[1].offset, 3u);
  EXPECT_EQ(failures[2].offset, 4u);

  // Without keep_going a skip list still holds, and the first exception stops the chunk.
  out.clear();
  failures.clear();
  RunControl ctl3{.keep_going = false, .skip = {1}, .failures = &failures};
  EXPECT_FALSE(p.run_single(raw, 5, out, fail, cursor, ctl3));
  EXPECT_EQ(fail.offset, 3u);
}

}  // namespace
