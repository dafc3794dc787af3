// B13 (issue 50): what authentication costs, side by side in one run on the loopback.
//  - per connection: a TCP connect and a one-byte round trip (what a listener cost before), against
//    a connect and the handshake (auth::Session: both proofs and the sealed streams' headers);
//  - per object copy between agents (64 MiB and 1 MiB): the copy as it was before (a request, then
//    sendfile into the socket and recv into a memfd: no authentication), against the copy now
//    (handshake, sealed request and reply, the bytes and their keyed hash), and sealed
//    (PoolOptions::encrypt_objects).
// Medians of `runs` (default 15 connections x 200, 9 copies). Prints one line per figure and the ratio.
//   b13_auth [runs]
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "transport/auth.hpp"
#include "transport/doorman.hpp"
#include "transport/object_memory.hpp"
#include "transport/object_server.hpp"
#include "transport/tcp.hpp"

using namespace fibra::detail;
namespace wire = fibra::wire;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The copy as the object server made it before: no handshake; the request's name, then sendfile.
class PlainServer {
 public:
  PlainServer(int memfd, std::uint64_t size) : memfd_(memfd), size_(size) {
    l_ = tcp::listen_on("127.0.0.1", "plain server");
    t_ = std::thread([this] {
      for (;;) {
        UniqueFd c(::accept4(l_.fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (stop_ || !c) return;
        char request[64];
        if (!tcp::read_all(c.get(), request, sizeof request, 5'000)) continue;
        const std::uint64_t n = size_;
        (void)tcp::write_all(c.get(), &n, sizeof n);
        off_t at = 0;
        while (std::uint64_t(at) < size_)
          if (::sendfile(c.get(), memfd_, &at, size_ - std::uint64_t(at)) <= 0) break;
      }
    });
  }
  ~PlainServer() {
    stop_ = true;
    std::string why;
    tcp::connect_to("127.0.0.1", l_.port, 1'000, why);
    t_.join();
  }
  std::uint16_t port() const { return l_.port; }

 private:
  int memfd_;
  std::uint64_t size_;
  tcp::Listener l_;
  std::atomic<bool> stop_{false};
  std::thread t_;
};

bool plain_fetch(std::uint16_t port, std::uint64_t size) {
  std::string why;
  UniqueFd s = tcp::connect_to("127.0.0.1", port, 5'000, why);
  char request[64] = "fibra-object-1-1";
  std::uint64_t n = 0;
  if (!s || !tcp::write_all(s.get(), request, sizeof request) || !tcp::read_all(s.get(), &n, sizeof n, 5'000))
    return false;
  UniqueFd fd = ObjectMemory::new_memfd("plain");
  if (::ftruncate(fd.get(), off_t(size)) != 0) return false;
  std::vector<char> buf(4u << 20);
  for (std::uint64_t at = 0; at < size;) {
    if (!tcp::wait_for(s.get(), POLLIN, 5'000)) return false;
    const ssize_t k = ::recv(s.get(), buf.data(), std::min<std::uint64_t>(buf.size(), size - at), 0);
    if (k <= 0) return false;
    if (!ObjectMemory::write_at(fd.get(), std::string_view(buf.data(), std::size_t(k)), at)) return false;
    at += std::uint64_t(k);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 15;
  const auth::Secret secret = auth::Secret::random();
  constexpr std::uint64_t pool = 1;

  // Per connection.
  {
    tcp::Listener plain = tcp::listen_on("127.0.0.1", "plain");
    std::atomic<bool> stop{false};
    std::thread echo([&] {
      while (!stop) {
        UniqueFd c(::accept4(plain.fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
        char b;
        if (c && tcp::read_all(c.get(), &b, 1, 1'000)) (void)tcp::write_all(c.get(), &b, 1);
      }
    });
    Doorman door(tcp::listen_on("127.0.0.1", "auth"), secret, wire::AuthRole::object, pool, "bench",
                 [](UniqueFd c, std::unique_ptr<auth::Session> s) {
                   if (auto m = s->receive(1'000)) (void)s->send(*m);
                 });
    std::vector<double> before, after;
    for (int r = 0; r < runs; ++r) {
      auto t0 = Clock::now();
      for (int i = 0; i < 200; ++i) {
        std::string why;
        UniqueFd c = tcp::connect_to("127.0.0.1", plain.port, 5'000, why);
        char b = 'x';
        if (!tcp::write_all(c.get(), &b, 1) || !tcp::read_all(c.get(), &b, 1, 5'000)) return 1;
      }
      before.push_back(seconds_since(t0) / 200);
      t0 = Clock::now();
      for (int i = 0; i < 200; ++i) {
        std::string why;
        UniqueFd c = tcp::connect_to("127.0.0.1", door.port(), 5'000, why);
        auto s = auth::Session::connect(c.get(), secret, wire::AuthRole::object, pool, auth::handshake_ms, why);
        if (!s || !s->send("x") || !s->receive(5'000)) {
          std::fprintf(stderr, "b13: an authenticated round trip failed: %s\n", why.c_str());
          return 1;
        }
      }
      after.push_back(seconds_since(t0) / 200);
    }
    stop = true;
    std::string why;
    for (int i = 0; i < 3; ++i) tcp::connect_to("127.0.0.1", plain.port, 1'000, why);
    echo.join();
    std::printf(
        "B13 connection: connect + 1-byte round trip %.1f us; connect + handshake + sealed round trip %.1f us "
        "(%.2fx), medians of %d x 200\n",
        median(before) * 1e6, median(after) * 1e6, median(after) / median(before), runs);
  }

  // Per object copy.
  for (const std::uint64_t size : {std::uint64_t(64) << 20, std::uint64_t(1) << 20}) {
    std::string bytes(size, '\0');
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = char((i * 131 + i / 251) & 0xff);
    const std::string name = object_memfd_name(1, size);
    std::shared_ptr<const ObjectMemory> m = ObjectMemory::create(name, bytes, "bench");
    PlainServer plain(m->fd(), size);
    ObjectServer server(secret, pool, false);
    server.offer(name, m, size);
    const int copies = std::max(3, runs / 2 * 2 + 1) / (size > (8u << 20) ? 2 : 1) | 1;
    std::vector<double> t_plain, t_auth, t_sealed;
    for (int r = 0; r < copies; ++r) {
      auto t0 = Clock::now();
      if (!plain_fetch(plain.port(), size)) return 1;
      t_plain.push_back(seconds_since(t0));
      std::string why;
      t0 = Clock::now();
      if (!fetch_object(server.address(), server.port(), secret, pool, name, size, 1.0, false, why)) {
        std::fprintf(stderr, "b13: %s\n", why.c_str());
        return 1;
      }
      t_auth.push_back(seconds_since(t0));
      t0 = Clock::now();
      if (!fetch_object(server.address(), server.port(), secret, pool, name, size, 1.0, true, why)) return 1;
      t_sealed.push_back(seconds_since(t0));
    }
    const double mb = double(size) / (1 << 20);
    std::printf(
        "B13 copy of %.0f MiB: before (no authentication) %.2f ms (%.0f MiB/s); authenticated %.2f ms "
        "(%.0f MiB/s, %.2fx); sealed %.2f ms (%.0f MiB/s, %.2fx), medians of %d\n",
        mb, median(t_plain) * 1e3, mb / median(t_plain), median(t_auth) * 1e3, mb / median(t_auth),
        median(t_auth) / median(t_plain), median(t_sealed) * 1e3, mb / median(t_sealed),
        median(t_sealed) / median(t_plain), copies);
  }
  return 0;
}
