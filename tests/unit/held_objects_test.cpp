// An agent's stored objects (src/agent/held_objects.hpp) on a real ObjectServer and real memfds:
// an object its executors handed over twice outlives a free that counted one handover (the driver
// freed it while a task handed it over again), and is served to peers until the second free.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <string>

#include "agent/held_objects.hpp"
#include "transport/object_memory.hpp"
#include "transport/object_server.hpp"

using fibra::detail::fetch_object;
using fibra::detail::HeldObjects;
using fibra::detail::object_memfd_name;
using fibra::detail::ObjectMemory;
using fibra::detail::ObjectServer;

namespace {

constexpr std::uint64_t key = 0x5eed'1234'abcd'0002;
const fibra::detail::auth::Secret secret = fibra::detail::auth::Secret::random();

// Whether a peer can copy object `name` of `bytes` from `server`, waiting up to `wait_s` for it to
// be offered (the copy is held unmapped: read back through a mapping of its own).
bool served(const ObjectServer& server, const std::string& name, const std::string& bytes, double wait_s = 5) {
  std::string why;
  auto copy = fetch_object(server.address(), server.port(), secret, key, name, bytes.size(), wait_s, false, why);
  if (!copy) return false;
  void* p = ::mmap(nullptr, bytes.size(), PROT_READ, MAP_SHARED, copy->fd(), 0);
  if (p == MAP_FAILED) return false;
  const bool same = std::string(static_cast<const char*>(p), bytes.size()) == bytes;
  ::munmap(p, bytes.size());
  return same;
}

TEST(HeldObjects, HandedTwiceAndFreedAfterOneIsStillHeldAndServed) {
  ObjectServer server(secret, key, false);
  HeldObjects held(&server);
  const std::string name = object_memfd_name(4242, 7), bytes = "the result of task 7";
  std::shared_ptr<const ObjectMemory> m = ObjectMemory::create(name, bytes, "test");
  held.hold_handed(7, 4242, bytes.size(), m);
  held.hold_handed(7, 4242, bytes.size(), m);  // a task handed it over again
  EXPECT_EQ(held.handed(7), 2u);
  EXPECT_FALSE(held.free(7, 1));  // the driver had heard of one handover when it let it go
  EXPECT_TRUE(held.holds(7));
  EXPECT_EQ(held.handed(7), 1u);
  EXPECT_TRUE(served(server, name, bytes)) << "a task reading it after the first free must find it";
  EXPECT_TRUE(held.free(7, 1));
  EXPECT_FALSE(held.holds(7));
  EXPECT_FALSE(served(server, name, bytes, 0.2)) << "freed for good: no longer served";
}

TEST(HeldObjects, ACopyTheDriverSentGoesAtItsFree) {
  ObjectServer server(secret, key, false);
  HeldObjects held(&server);
  const std::string name = object_memfd_name(4242, 8), bytes = "a value fibra::put stored";
  held.hold(8, 4242, bytes.size(), ObjectMemory::create(name, bytes, "test"));
  EXPECT_EQ(held.handed(8), 0u);
  EXPECT_TRUE(served(server, name, bytes));
  EXPECT_TRUE(held.free(8, 0));
  EXPECT_FALSE(held.holds(8));
  EXPECT_FALSE(held.free(9, 0)) << "an id never held: nothing dropped";
}

TEST(HeldObjects, WithoutAServerObjectsAreHeldAndCounted) {
  HeldObjects held(nullptr);
  const std::string name = object_memfd_name(4242, 10);
  std::shared_ptr<const ObjectMemory> m = ObjectMemory::create(name, "x", "test");
  held.hold_handed(10, 4242, 1, m);
  held.hold_handed(10, 4242, 1, m);
  held.hold_handed(10, 4242, 1, m);
  EXPECT_FALSE(held.free(10, 2));
  EXPECT_EQ(held.handed(10), 1u);
  EXPECT_TRUE(held.free(10, 1));
  EXPECT_FALSE(held.holds(10));
}

}  // namespace
