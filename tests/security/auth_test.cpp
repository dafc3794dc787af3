// Authenticated connections (src/transport/auth.hpp, src/transport/doorman.hpp) on real TCP
// sockets, and the object server's copies through a recording proxy: both sides prove they hold
// the run's secret, a peer without it learns nothing and gets nothing, a replayed or reflected
// handshake is refused, sealed messages that are changed, reordered or cut are refused, a slow or
// idle connection is dropped within the handshake's bound, and neither the secret nor (when asked)
// an object's bytes appear on the wire.
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../common/proxy.hpp"
#include "common/private_file.hpp"
#include "fibra/error.hpp"
#include "transport/auth.hpp"
#include "transport/doorman.hpp"
#include "transport/object_memory.hpp"
#include "transport/object_server.hpp"
#include "transport/tcp.hpp"

namespace {

using namespace fibra::detail;
namespace wire = fibra::wire;
using Clock = std::chrono::steady_clock;
using fibra_test::Proxy;
constexpr std::uint64_t pool = 0xabc0'0000'0000'0042;

// A listener on the loopback and a connection to it: (client, server) sockets.
std::pair<UniqueFd, UniqueFd> connected_pair() {
  tcp::Listener l = tcp::listen_on("127.0.0.1", "test");
  std::string why;
  UniqueFd c = tcp::connect_to("127.0.0.1", l.port, 5'000, why);
  EXPECT_TRUE(c) << why;
  UniqueFd s(::accept4(l.fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
  return {std::move(c), std::move(s)};
}

// Both sides of a handshake at once; the sessions (null where refused) and their reasons.
struct Both {
  std::unique_ptr<auth::Session> client, server;
  std::string client_why, server_why;
};
Both handshake(int c, int s, const auth::Secret& client_secret, const auth::Secret& server_secret,
               wire::AuthRole client_role = wire::AuthRole::object, std::uint64_t client_pool = pool) {
  Both b;
  std::thread t([&] {
    b.server = auth::Session::accept(s, server_secret, wire::AuthRole::object, pool, auth::handshake_ms, b.server_why);
    if (!b.server) ::shutdown(s, SHUT_RDWR);  // (as the door closes a connection it refused)
  });
  b.client = auth::Session::connect(c, client_secret, client_role, client_pool, auth::handshake_ms, b.client_why);
  if (!b.client) ::shutdown(c, SHUT_RDWR);  // (as a connector that gives up closes its socket)
  t.join();
  return b;
}

std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = char((i * 131 + i / 251) & 0xff);
  return s;
}

// Whether the peer closes the connection within `ms` (what it sends first is read and dropped).
bool closes(int fd, int ms) {
  const auto end = Clock::now() + std::chrono::milliseconds(ms);
  char b[256];
  while (Clock::now() < end) {
    if (!tcp::wait_for(fd, POLLIN, 50)) continue;
    const ssize_t k = ::recv(fd, b, sizeof b, 0);
    if (k <= 0) return true;
  }
  return false;
}

std::string raw(const auth::Secret& s) {
  return std::string(reinterpret_cast<const char*>(s.data()), auth::Secret::size);
}

}  // namespace

TEST(Auth, BothSidesWithTheSecretMeetAndTheirMessagesArriveBothWays) {
  const auth::Secret secret = auth::Secret::random();
  auto [c, s] = connected_pair();
  Both b = handshake(c.get(), s.get(), secret, secret);
  ASSERT_TRUE(b.client) << b.client_why;
  ASSERT_TRUE(b.server) << b.server_why;
  ASSERT_TRUE(b.client->send("a request"));
  ASSERT_TRUE(b.client->send(""));
  EXPECT_EQ(b.server->receive(5'000), std::optional<std::string>("a request"));
  EXPECT_EQ(b.server->receive(5'000), std::optional<std::string>(""));
  ASSERT_TRUE(b.server->send(pattern(auth::max_sealed)));
  EXPECT_EQ(b.client->receive(5'000), std::optional<std::string>(pattern(auth::max_sealed)));
  EXPECT_FALSE(b.client->send(std::string(auth::max_sealed + 1, 'x'))) << "over max_sealed is not sent";
}

TEST(Auth, APeerWithoutTheSecretIsRefusedOnBothSides) {
  const auth::Secret mine = auth::Secret::random(), theirs = auth::Secret::random();
  {  // a connector with another run's secret: the listener's proof does not hold for it
    auto [c, s] = connected_pair();
    Both b = handshake(c.get(), s.get(), theirs, mine);
    EXPECT_FALSE(b.client);
    EXPECT_FALSE(b.server);
    EXPECT_NE(b.client_why.find("does not hold this run's secret"), std::string::npos) << b.client_why;
  }
  {  // a listener for another pool, or of another role, answers nothing
    auto [c, s] = connected_pair();
    Both b = handshake(c.get(), s.get(), mine, mine, wire::AuthRole::object, pool + 1);
    EXPECT_FALSE(b.client);
    EXPECT_FALSE(b.server);
    EXPECT_EQ(b.server_why, "a handshake for another pool");
    EXPECT_NE(b.client_why.find("a listener of another pool"), std::string::npos) << b.client_why;
  }
  {
    auto [c, s] = connected_pair();
    Both b = handshake(c.get(), s.get(), mine, mine, wire::AuthRole::join);
    EXPECT_FALSE(b.server);
    EXPECT_EQ(b.server_why, "a handshake for another kind of listener");
  }
}

// A handshake recorded on the wire and played again to the listener (a replay), or the listener's
// own proof sent back to it (a mirror): refused, since each connection's proofs cover a fresh
// nonce of the listener's and say which side made them.
TEST(Auth, AReplayedOrReflectedHandshakeIsRefused) {
  const auth::Secret secret = auth::Secret::random();
  tcp::Listener l = tcp::listen_on("127.0.0.1", "test");
  std::vector<std::string> refusals;
  std::mutex mu;
  int let_in = 0;
  Doorman door(std::move(l), secret, wire::AuthRole::object, pool, "a test listener",
               [&](UniqueFd, std::unique_ptr<auth::Session>) {
                 std::lock_guard lk(mu);
                 ++let_in;
               });
  std::string recorded;
  {
    Proxy proxy("127.0.0.1", door.port());
    std::string why;
    UniqueFd c = tcp::connect_to("127.0.0.1", proxy.port(), 5'000, why);
    ASSERT_TRUE(auth::Session::connect(c.get(), secret, wire::AuthRole::object, pool, auth::handshake_ms, why)) << why;
    for (int i = 0; i < 500 && proxy.to_listener().size() < wire::auth_hello_bytes + wire::auth_answer_bytes; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    recorded = proxy.to_listener();
  }
  ASSERT_EQ(recorded.size(), wire::auth_hello_bytes + wire::auth_answer_bytes);
  for (int i = 0; i < 100 && door.counts().let_in < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(door.counts().let_in, 1u);

  // the replay: the same bytes, to a listener that chose a new nonce
  std::string why;
  UniqueFd r = tcp::connect_to("127.0.0.1", door.port(), 5'000, why);
  ASSERT_TRUE(tcp::write_all(r.get(), recorded.data(), recorded.size()));
  // the mirror: the listener's challenge, its proof and header sent back as the answer
  UniqueFd m = tcp::connect_to("127.0.0.1", door.port(), 5'000, why);
  const std::string hello = wire::encode_auth_hello(
      {wire::auth_version, wire::AuthRole::object, pool, std::string(wire::auth_nonce_bytes, '\x11')});
  ASSERT_TRUE(tcp::write_all(m.get(), hello.data(), hello.size()));
  std::string challenge(wire::auth_challenge_bytes, '\0');
  ASSERT_TRUE(tcp::read_all(m.get(), challenge.data(), challenge.size(), 5'000));
  const std::string reflected = challenge.substr(wire::auth_nonce_bytes);
  ASSERT_EQ(reflected.size(), wire::auth_answer_bytes);
  ASSERT_TRUE(tcp::write_all(m.get(), reflected.data(), reflected.size()));
  for (int i = 0; i < 300 && door.counts().refused < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(door.counts().refused, 2u);
  EXPECT_EQ(door.counts().let_in, 1u) << "a replayed or reflected handshake was let in";
  EXPECT_TRUE(closes(r.get(), 5'000)) << "the replay's connection stays open";
  EXPECT_TRUE(closes(m.get(), 5'000)) << "the mirror's connection stays open";
}

// A sealed message changed on the way, or played again, or a frame announcing more than its
// reader takes: refused, and the session is done.
TEST(Auth, ASealedMessageChangedReplayedOrTooLongIsRefused) {
  const auth::Secret secret = auth::Secret::random();
  for (int how = 0; how < 3; ++how) {
    auto [c, s] = connected_pair();
    Both b = handshake(c.get(), s.get(), secret, secret);
    ASSERT_TRUE(b.client && b.server) << b.client_why << b.server_why;
    // The client's frame, taken off the wire by hand (read from the server's socket), then written
    // again into the client's socket, changed or not, for the server's session to read.
    ASSERT_TRUE(b.client->send("first"));
    std::string frame(wire::frame_head + 5 + 17, '\0');
    ASSERT_TRUE(tcp::read_all(s.get(), frame.data(), frame.size(), 5'000));
    if (how == 0) frame.back() ^= 1;  // a bit of its tag changed
    std::string sent = frame;
    if (how == 1) sent += frame;  // the same frame twice: the second is a replay
    if (how == 2) {               // a head that announces 1 GiB
      const std::uint32_t huge = 1u << 30;
      sent.assign(reinterpret_cast<const char*>(&huge), sizeof huge);
    }
    ASSERT_TRUE(tcp::write_all(c.get(), sent.data(), sent.size()));
    if (how == 1) {
      EXPECT_EQ(b.server->receive(5'000), std::optional<std::string>("first"));
      EXPECT_EQ(b.server->receive(5'000), std::nullopt) << "a replayed frame opened";
    } else {
      const auto t0 = Clock::now();
      EXPECT_EQ(b.server->receive(5'000), std::nullopt) << "case " << how;
      EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2)) << "it waited for 1 GiB that never came";
    }
    ASSERT_TRUE(b.client->send("genuine, after"));  // a real frame of the client's stream
    EXPECT_EQ(b.server->receive(2'000), std::nullopt)
        << "a session that refused a message goes on (case " << how << ")";
  }
}

// A connection that sends its handshake a byte at a time, or nothing at all, is dropped within
// the handshake's bound; more than a quarter of the door's bound from one address are turned away
// at once, and the connector is told so (it may try again).
TEST(Auth, ASlowOrIdleConnectionIsDroppedWithinTheHandshakesBound) {
  const auth::Secret secret = auth::Secret::random();
  Doorman door(
      tcp::listen_on("127.0.0.1", "test"), secret, wire::AuthRole::object, pool, "a test listener",
      [](UniqueFd, std::unique_ptr<auth::Session>) {}, 8);
  std::string why;
  UniqueFd slow = tcp::connect_to("127.0.0.1", door.port(), 5'000, why);
  const std::string hello = wire::encode_auth_hello(
      {wire::auth_version, wire::AuthRole::object, pool, std::string(wire::auth_nonce_bytes, 'n')});
  const auto t0 = Clock::now();
  bool closed = false;
  for (std::size_t i = 0; i < hello.size() && !closed; ++i) {
    closed = ::send(slow.get(), &hello[i], 1, MSG_NOSIGNAL) != 1;
    char b;
    closed = closed || ::recv(slow.get(), &b, 1, MSG_DONTWAIT) == 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(closed) << "a handshake sent a byte per 0.1 s for 4.8 s was waited for";
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(auth::handshake_ms + 1'500));
  for (int i = 0; i < 100 && door.counts().refused < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));

  std::vector<UniqueFd> idle;
  for (int i = 0; i < 2; ++i) idle.push_back(tcp::connect_to("127.0.0.1", door.port(), 5'000, why));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  UniqueFd extra = tcp::connect_to("127.0.0.1", door.port(), 5'000, why);
  const auto t1 = Clock::now();
  EXPECT_TRUE(closes(extra.get(), 5'000));
  EXPECT_LT(Clock::now() - t1, std::chrono::milliseconds(1'000))
      << "the third from one address was not turned away at once";
  EXPECT_GE(door.counts().turned_away, 1u);
  UniqueFd turned = tcp::connect_to("127.0.0.1", door.port(), 5'000, why);
  bool away = false;
  EXPECT_FALSE(
      auth::Session::connect(turned.get(), secret, wire::AuthRole::object, pool, auth::handshake_ms, why, &away));
  EXPECT_TRUE(away) << why;
  EXPECT_NE(why.find("closed the connection before its challenge"), std::string::npos) << why;
  for (auto& i : idle) EXPECT_TRUE(closes(i.get(), auth::handshake_ms + 2'000)) << "an idle connection was kept";
  // and a real peer gets in afterwards
  UniqueFd good = tcp::connect_to("127.0.0.1", door.port(), 5'000, why);
  EXPECT_TRUE(auth::Session::connect(good.get(), secret, wire::AuthRole::object, pool, auth::handshake_ms, why)) << why;
}

// An object copied through a recording proxy: the run's secret never on the wire (neither its bytes
// nor its text), the object's bytes not either when sealed; an unsealed copy changed on the way is
// refused by its hash, a sealed one by its seal.
TEST(Auth, NoSecretOnTheWireAndAChangedCopyIsRefused) {
  const auth::Secret secret = auth::Secret::random();
  ObjectServer server(secret, pool, false);
  const std::string bytes = pattern((std::size_t(2) << 20) + 3);
  const std::string name = object_memfd_name(77, 1);
  server.offer(name, ObjectMemory::create(name, bytes, "test"), bytes.size());
  const std::string needle = bytes.substr(1'000'000, 64);  // a stretch of the object's bytes
  for (const bool sealed : {false, true}) {
    Proxy proxy(server.address(), server.port());
    std::string why;
    ASSERT_TRUE(fetch_object("127.0.0.1", proxy.port(), secret, pool, name, bytes.size(), 1.0, sealed, why)) << why;
    const std::string wire_bytes = proxy.to_listener() + proxy.from_listener();
    EXPECT_GT(wire_bytes.size(), bytes.size());
    EXPECT_EQ(wire_bytes.find(raw(secret)), std::string::npos) << "the secret's bytes on the wire";
    EXPECT_EQ(wire_bytes.find(secret.hex()), std::string::npos) << "the secret's text on the wire";
    EXPECT_EQ(wire_bytes.find(needle) == std::string::npos, sealed) << (sealed ? "sealed bytes in clear" : "?");
    EXPECT_EQ(wire_bytes.find(name), std::string::npos) << "the request in clear";
  }
  for (const bool sealed : {false, true}) {
    // a byte more, inserted into the object's bytes by the proxy
    Proxy proxy(server.address(), server.port(), [](std::size_t offset, std::string& b) {
      const std::size_t at = 300'000;
      if (offset <= at && at < offset + b.size()) b.insert(at - offset, 1, 'x');
    });
    std::string why;
    EXPECT_FALSE(fetch_object("127.0.0.1", proxy.port(), secret, pool, name, bytes.size(), 1.0, sealed, why));
    EXPECT_FALSE(why.empty());
  }
  for (const bool sealed : {false, true}) {
    // one bit of the object, well past the handshake and the reply, flipped by the proxy
    Proxy proxy(server.address(), server.port(), [](std::size_t offset, std::string& b) {
      const std::size_t at = 500'000;
      if (offset <= at && at < offset + b.size()) b[at - offset] ^= 0x01;
    });
    std::string why;
    EXPECT_FALSE(fetch_object("127.0.0.1", proxy.port(), secret, pool, name, bytes.size(), 1.0, sealed, why));
    EXPECT_NE(why.find(sealed ? "cut short or changed" : "changed on the way"), std::string::npos) << why;
  }
}

// The secret's files: made 0600 in a folder of 0700; one that others may read, that is a link, or
// that another user owns is refused with the fix.
TEST(Auth, ASecretFileOthersCouldReadOrWriteIsRefused) {
  const std::string folder = ::testing::TempDir() + "fibra-auth-" + std::to_string(::getpid()) + "/secrets";
  make_private_folder(folder, "a test's secret");
  struct stat st {};
  ASSERT_EQ(::stat(folder.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  const auth::Secret secret = auth::Secret::random();
  const std::string file = folder + "/run.key";
  write_private_file(file, secret.hex() + "\n", "a test's secret");
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(auth::Secret::from_file(file).hex(), secret.hex());
  EXPECT_THROW(write_private_file(file, "x", "a test's secret"), fibra::ConfigError) << "made twice";

  const auto refused = [&](const std::string& path, const std::string& words) {
    try {
      (void)auth::Secret::from_file(path);
      ADD_FAILURE() << path << " was read";
    } catch (const fibra::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  ::chmod(file.c_str(), 0644);
  refused(file, "has mode 0644: others may read or write it, so it is not used; `chmod 600 ");
  ::chmod(file.c_str(), 0600);
  const std::string link = folder + "/link.key";
  ASSERT_EQ(::symlink(file.c_str(), link.c_str()), 0);
  refused(link, "a symbolic link, which is not followed");
  std::ofstream(folder + "/short.key") << "abcd\n";
  ::chmod((folder + "/short.key").c_str(), 0600);
  refused(folder + "/short.key", "does not hold a run's secret (64 hexadecimal digits)");
  if (::geteuid() == 0) {  // (only root can give a file away)
    ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);
    refused(file, "belongs to user 65534, not to you");
  }
  ::chmod(folder.c_str(), 0755);
  try {
    make_private_folder(folder, "a test's secret");
    ADD_FAILURE() << "a folder others may enter was taken";
  } catch (const fibra::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("has mode 0755: others may enter it"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(std::filesystem::path(folder).parent_path());
}
