// src/transport/doorman.cpp: see doorman.hpp.
#include "transport/doorman.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <system_error>
#include <thread>

#include "common/log.hpp"
#include "fibra/error.hpp"

namespace fibra::detail {

namespace {
// The peer's address (without its port: what a bound per source counts), and its port.
std::pair<std::string, std::string> peer_of(const sockaddr_storage& a, socklen_t n) {
  char host[NI_MAXHOST] = {}, port[NI_MAXSERV] = {};
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&a), n, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return {"an unknown peer", ""};
  return {host, port};
}
}  // namespace

struct Doorman::Impl {
  UniqueFd listener;
  std::uint16_t port = 0;
  auth::Secret secret;
  wire::AuthRole role;
  std::uint64_t pool = 0;
  std::string what;
  Serve serve;
  Refused on_refused;
  int most_in_handshake = 32;
  UniqueFd stop[2];
  std::thread acceptor;
  mutable std::mutex mu;
  std::condition_variable all_done;
  std::set<int> in_handshake;             // under mu: cut at the end
  std::map<std::string, int> per_source;  // under mu: in their handshake, by the peer's address
  int threads = 0;                        // under mu
  bool stopping = false;                  // under mu
  std::atomic<std::uint64_t> let_in{0}, refused{0}, turned_away{0};

  Impl(const auth::Secret& s) : secret(s) {}

  void accept_loop() {
    pollfd p[2] = {{listener.get(), POLLIN, 0}, {stop[0].get(), POLLIN, 0}};
    for (;;) {
      const int r = ::poll(p, 2, -1);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 || (p[1].revents & POLLIN)) return;
      if (!(p[0].revents & POLLIN)) continue;
      sockaddr_storage from{};
      socklen_t from_n = sizeof from;
      UniqueFd c(::accept4(listener.get(), reinterpret_cast<sockaddr*>(&from), &from_n, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!c) {
        // Out of descriptors: the connection waits in the backlog (its peer gives up in time).
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      std::lock_guard lk(mu);
      if (stopping) return;
      // At most most_in_handshake at once, and a quarter of them from one address: a flood from
      // one host leaves room for the others.
      auto peer = peer_of(from, from_n);
      int& mine = per_source[peer.first];
      if (static_cast<int>(in_handshake.size()) >= most_in_handshake || 4 * mine >= most_in_handshake) {
        if (mine == 0) per_source.erase(peer.first);
        turned_away.fetch_add(1);
        continue;  // (closed as it goes)
      }
      const int fd = c.get();
      try {
        std::thread([this, c = std::move(c), peer]() mutable { let_in_or_not(std::move(c), peer); }).detach();
      } catch (const std::system_error&) {  // no thread to be had: turned away
        if (mine == 0) per_source.erase(peer.first);
        turned_away.fetch_add(1);
        continue;
      }
      ++mine;
      in_handshake.insert(fd);
      ++threads;
    }
  }

  void let_in_or_not(UniqueFd c, const std::pair<std::string, std::string>& peer) {
    std::string why;
    std::unique_ptr<auth::Session> session =
        auth::Session::accept(c.get(), secret, role, pool, auth::handshake_ms, why);
    {
      std::lock_guard lk(mu);
      in_handshake.erase(c.get());
      if (auto it = per_source.find(peer.first); it != per_source.end() && --it->second <= 0) per_source.erase(it);
      if (stopping) session.reset();
    }
    if (session) {
      let_in.fetch_add(1);
      try {
        serve(std::move(c), std::move(session));
      } catch (const std::exception& e) {
        log::warning("fibra: {}: {}", what, e.what());
      }
    } else {
      // The first refusal is said (a worker of another run, a wrong file); the rest are counted.
      if (refused.fetch_add(1) == 0)
        log::warning("fibra: {} refused a connection from {} port {}: {} (further refusals are counted, not logged)",
                     what, peer.first, peer.second, why);
      c.reset();
      if (on_refused) {
        try {
          on_refused(peer.first, peer.second, why);
        } catch (const std::exception& e) {
          log::debug("fibra: {}: a refusal not recorded: {}", what, e.what());
        }
      }
    }
    std::lock_guard lk(mu);
    if (--threads == 0) all_done.notify_all();  // (under mu: the destructor waits for it)
  }
};

Doorman::Doorman(tcp::Listener listener, const auth::Secret& secret, wire::AuthRole role, std::uint64_t pool,
                 std::string what, Serve serve, int most_in_handshake, Refused refused)
    : impl_(std::make_unique<Impl>(secret)) {
  Impl& d = *impl_;
  d.listener = std::move(listener.fd);
  d.port = listener.port;
  d.role = role;
  d.pool = pool;
  d.what = std::move(what);
  d.serve = std::move(serve);
  d.on_refused = std::move(refused);
  d.most_in_handshake = most_in_handshake;
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw Error("fibra: cannot " + d.what + " (pipe: " + std::strerror(errno) + ")");
  d.stop[0] = UniqueFd(p[0]);
  d.stop[1] = UniqueFd(p[1]);
  d.acceptor = std::thread([&d] { d.accept_loop(); });
}

Doorman::~Doorman() {
  Impl& d = *impl_;
  {
    std::lock_guard lk(d.mu);
    d.stopping = true;
    for (int c : d.in_handshake) ::shutdown(c, SHUT_RDWR);
  }
  const char b = 0;
  (void)!::write(d.stop[1].get(), &b, 1);
  d.acceptor.join();
  std::unique_lock lk(d.mu);
  d.all_done.wait(lk, [&] { return d.threads == 0; });  // their threads touch nothing after
}

std::uint16_t Doorman::port() const { return impl_->port; }

Doorman::Counts Doorman::counts() const {
  return {impl_->let_in.load(), impl_->refused.load(), impl_->turned_away.load()};
}

}  // namespace fibra::detail
