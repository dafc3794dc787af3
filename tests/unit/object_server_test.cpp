// Stored objects served from one agent to another over TCP (src/transport/object_server.hpp),
// both sides in one process on real sockets and real memfds: a copy arrives whole under its name,
// an object offered late is waited for, and every way a copy cannot be made says why.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "transport/object_memory.hpp"
#include "transport/object_server.hpp"

using fibra::detail::fetch_object;
using fibra::detail::object_memfd_name;
using fibra::detail::ObjectMemory;
using fibra::detail::ObjectServer;

namespace {

constexpr std::uint64_t key = 0x5eed'1234'abcd'0001;                               // a pool's AgentSetup::lane_nonce
const fibra::detail::auth::Secret secret = fibra::detail::auth::Secret::random();  // the run's

// n bytes of a pattern no two offsets of a short window share.
std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = char((i * 131 + i / 251) & 0xff);
  return s;
}

// What a held (unmapped) memfd holds, read back through a mapping of its own.
std::string contents(const ObjectMemory& m, std::size_t n) {
  void* p = ::mmap(nullptr, n == 0 ? 1 : n, PROT_READ, MAP_SHARED, m.fd(), 0);
  if (p == MAP_FAILED) return "<mmap failed>";
  std::string s(static_cast<const char*>(p), n);
  ::munmap(p, n == 0 ? 1 : n);
  return s;
}

}  // namespace

TEST(ObjectServer, ACopyArrivesWholeUnderItsName) {
  ObjectServer server(secret, key, false);
  ASSERT_GT(server.port(), 0);
  const std::string bytes = pattern((std::size_t(9) << 20) + 17);  // over the fetch's 4 MiB buffer, twice
  const std::string name = object_memfd_name(4242, 7);
  std::shared_ptr<const ObjectMemory> original = ObjectMemory::create(name, bytes, "test");
  server.offer(name, original, bytes.size());
  std::string why;
  auto copy = fetch_object(server.address(), server.port(), secret, key, name, bytes.size(), 1.0, false, why);
  ASSERT_TRUE(copy) << why;
  EXPECT_EQ(contents(*copy, bytes.size()), bytes);
  EXPECT_EQ(ObjectMemory::find(::getpid(), name).empty(), false) << "the copy is a memfd of the same name";
  EXPECT_EQ(server.served(), 1u);
}

TEST(ObjectServer, AnEncryptedCopyArrivesWholeToo) {
  for (const bool server_seals : {false, true}) {  // the fetcher asks, or the server's pool does
    ObjectServer server(secret, key, server_seals);
    const std::string bytes = pattern((std::size_t(3) << 20) + 5);  // three sealed pieces and a bit
    const std::string name = object_memfd_name(4243, 8);
    std::shared_ptr<const ObjectMemory> original = ObjectMemory::create(name, bytes, "test");
    server.offer(name, original, bytes.size());
    std::string why;
    auto copy = fetch_object(server.address(), server.port(), secret, key, name, bytes.size(), 1.0, !server_seals, why);
    ASSERT_TRUE(copy) << why;
    EXPECT_EQ(contents(*copy, bytes.size()), bytes);
    // an empty object too
    const std::string empty_name = object_memfd_name(4243, 9);
    server.offer(empty_name, ObjectMemory::create(empty_name, "", "test"), 0);
    ASSERT_TRUE(fetch_object(server.address(), server.port(), secret, key, empty_name, 0, 1.0, true, why)) << why;
  }
}

TEST(ObjectServer, AnObjectOfferedLateIsWaitedFor) {
  ObjectServer server(secret, key, false);
  const std::string bytes = pattern(100'000);
  const std::string name = object_memfd_name(1, 99);
  std::shared_ptr<const ObjectMemory> original = ObjectMemory::create(name, bytes, "test");
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    server.offer(name, original, bytes.size());
  });
  std::string why;
  auto copy = fetch_object(server.address(), server.port(), secret, key, name, bytes.size(), 5.0, false, why);
  later.join();
  ASSERT_TRUE(copy) << why;
  EXPECT_EQ(contents(*copy, bytes.size()), bytes);
}

TEST(ObjectServer, EveryCopyThatCannotBeMadeSaysWhy) {
  ObjectServer server(secret, key, false);
  const std::string bytes = pattern(1000);
  const std::string name = object_memfd_name(5, 5);
  std::shared_ptr<const ObjectMemory> original = ObjectMemory::create(name, bytes, "test");
  server.offer(name, original, bytes.size());
  std::string why;
  // not held (after a short wait), withdrawn, of another size
  EXPECT_FALSE(
      fetch_object(server.address(), server.port(), secret, key, object_memfd_name(5, 6), 10, 0.1, false, why));
  EXPECT_NE(why.find("does not hold fibra-object-5-6"), std::string::npos) << why;
  server.withdraw(name);
  why.clear();
  EXPECT_FALSE(fetch_object(server.address(), server.port(), secret, key, name, bytes.size(), 0.1, false, why));
  EXPECT_NE(why.find("does not hold"), std::string::npos) << why;
  server.offer(name, original, bytes.size());
  why.clear();
  EXPECT_FALSE(fetch_object(server.address(), server.port(), secret, key, name, bytes.size() + 1, 0.1, false, why));
  EXPECT_NE(why.find("with 1000 bytes, not 1001"), std::string::npos) << why;
  // another pool's key
  why.clear();
  EXPECT_FALSE(fetch_object(server.address(), server.port(), secret, key + 1, name, bytes.size(), 0.1, false, why));
  EXPECT_NE(why.find("a listener of another pool"), std::string::npos) << why;
  // another run's secret: the fetcher finds out before it sends anything else
  why.clear();
  EXPECT_FALSE(fetch_object(server.address(), server.port(), fibra::detail::auth::Secret::random(), key, name,
                            bytes.size(), 0.1, false, why));
  EXPECT_NE(why.find("does not hold this run's secret"), std::string::npos) << why;
  // a host that does not resolve, and a port nobody listens on (the server's, once it is gone)
  why.clear();
  EXPECT_FALSE(fetch_object("no-such-host.invalid", server.port(), secret, key, name, bytes.size(), 0.1, false, why));
  EXPECT_NE(why.find("cannot resolve no-such-host.invalid"), std::string::npos) << why;
  const auto port = server.port();
  auto gone = std::make_unique<ObjectServer>(secret, key, false);
  const auto gone_port = gone->port();
  gone.reset();
  why.clear();
  EXPECT_FALSE(fetch_object(server.address(), gone_port, secret, key, name, bytes.size(), 0.1, false, why));
  EXPECT_NE(why.find("cannot connect to " + server.address() + ":" + std::to_string(gone_port)), std::string::npos)
      << why;
  why.clear();
  EXPECT_TRUE(fetch_object(server.address(), port, secret, key, name, bytes.size(), 0.1, false, why))
      << "the live one still serves: " << why;
}

TEST(ObjectServer, StoppingEndsAWaitingFetchAtOnce) {
  auto server = std::make_unique<ObjectServer>(secret, key, false);
  const auto port = server->port();
  const std::string address = server->address();
  std::string why;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread stop([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    server.reset();
  });
  EXPECT_FALSE(fetch_object(address, port, secret, key, object_memfd_name(1, 1), 10, 30.0, false, why));
  stop.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << "it waited out its 30 s: " << why;
}
