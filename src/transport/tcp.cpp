// src/transport/tcp.cpp: see tcp.hpp.
#include "transport/tcp.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/env.hpp"
#include "common/log.hpp"
#include "common/process.hpp"
#include "fibra/error.hpp"

namespace fibra::detail::tcp {

namespace {
constexpr int io_timeout_ms = 30'000;  // a peer that stops reading this long is given up
std::string sys_error(const char* what) { return std::string(what) + ": " + std::strerror(errno); }
}  // namespace

bool wait_for(int fd, short events, int ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, ms);
    if (r < 0 && errno == EINTR) continue;
    return r > 0 && (p.revents & events);
  }
}

bool write_all(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno == EAGAIN && wait_for(fd, POLLOUT, io_timeout_ms)) continue;
    if (k <= 0) return false;
    p += k;
    n -= std::size_t(k);
  }
  return true;
}

namespace {
// Exactly `n` bytes, waiting at most `wait_ms()` for each next piece (negative: no more time).
template <class WaitMs>
bool read_exactly(int fd, void* data, std::size_t n, WaitMs wait_ms) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const int ms = wait_ms();
    if (ms < 0 || !wait_for(fd, POLLIN, ms)) return false;
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return false;
    p += k;
    n -= std::size_t(k);
  }
  return true;
}
}  // namespace

bool read_all(int fd, void* data, std::size_t n, int ms) {
  return read_exactly(fd, data, n, [ms] { return ms; });
}

bool read_within(int fd, void* data, std::size_t n, int ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  return read_exactly(fd, data, n, [end] {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    return left.count() > 0 ? static_cast<int>(left.count()) : -1;
  });
}

namespace {
// The port a listening socket was given.
std::uint16_t bound_port(int fd) {
  sockaddr_storage got{};
  socklen_t n = sizeof got;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&got), &n);
  return ntohs(got.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&got)->sin6_port
                                         : reinterpret_cast<sockaddr_in*>(&got)->sin_port);
}
}  // namespace

Listener listen_any(const std::string& what) {
  Listener l;
  l.fd = UniqueFd(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  bool v6 = true;
  if (!l.fd) {  // no IPv6 here: IPv4 alone
    v6 = false;
    l.fd = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  }
  if (!l.fd) throw Error("fibra: cannot " + what + " (" + sys_error("socket") + ")");
  int on = 1, off = 0;
  ::setsockopt(l.fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  int rc = -1;
  if (v6) {
    // IPv4 peers too; where that cannot be had (or the bind fails), IPv4 alone
    if (::setsockopt(l.fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off) == 0) {
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      rc = ::bind(l.fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (rc != 0) {
      v6 = false;
      l.fd = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (!l.fd) throw Error("fibra: cannot " + what + " (" + sys_error("socket") + ")");
      ::setsockopt(l.fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    }
  }
  if (!v6) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    rc = ::bind(l.fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0 || ::listen(l.fd.get(), 64) != 0)
    throw Error("fibra: cannot " + what + " (" + sys_error("bind/listen") + ")");
  l.port = bound_port(l.fd.get());
  return l;
}

Listener listen_on(const std::string& address, const std::string& what) {
  if (address.empty()) return listen_any(what);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(address.c_str(), "0", &hints, &found); rc != 0)
    throw ConfigError("fibra: cannot " + what + " on " + address + " (" + ::gai_strerror(rc) +
                      "): FIBRA_LISTEN takes an address of this host, an interface's name, or `any`");
  Listener l;
  l.fd = UniqueFd(::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int on = 1;
  if (l.fd) ::setsockopt(l.fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  const bool ok = l.fd && ::bind(l.fd.get(), found->ai_addr, found->ai_addrlen) == 0 && ::listen(l.fd.get(), 64) == 0;
  ::freeaddrinfo(found);
  if (!ok) throw Error("fibra: cannot " + what + " on " + address + " (" + sys_error("bind/listen") + ")");
  l.port = bound_port(l.fd.get());
  return l;
}

std::vector<Interface> interfaces() {
  std::vector<Interface> v4, v6;
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return {};
  for (ifaddrs* i = all; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP) || !(i->ifa_flags & IFF_RUNNING)) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    char b[INET6_ADDRSTRLEN] = {};
    const void* a = family == AF_INET
                        ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr)
                        : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr);
    if (!::inet_ntop(family, a, b, sizeof b)) continue;
    if (family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr)) continue;
    (family == AF_INET ? v4 : v6).push_back({i->ifa_name, b, (i->ifa_flags & IFF_LOOPBACK) != 0});
  }
  ::freeifaddrs(all);
  v4.insert(v4.end(), v6.begin(), v6.end());
  return v4;
}

std::string listen_address() {
  const std::vector<Interface> mine = interfaces();
  if (const std::string asked = env::text("FIBRA_LISTEN"); !asked.empty()) {
    if (asked == "any") return {};
    for (const auto& i : mine)  // (an interface's IPv4 address first: interfaces() lists those first)
      if (i.address == asked || i.name == asked) return i.address;
    // (Agents on other hosts inherit the driver's FIBRA_LISTEN: an address is the driver's host's.)
    static std::once_flag said;
    std::call_once(said, [&] {
      log::warning(
          "fibra: FIBRA_LISTEN={} is neither an address nor an interface of {}: its listeners use the default "
          "address there; name an interface (`ip -br addr`, say ib0) for a run over several hosts",
          asked, host_name());
    });
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;  // IPv4 first: peers on a cluster network may have no IPv6 route
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host_name().c_str(), nullptr, &hints, &found) == 0) {
    std::string chosen;
    for (addrinfo* a = found; a && chosen.empty(); a = a->ai_next) {
      char b[INET6_ADDRSTRLEN] = {};
      if (::getnameinfo(a->ai_addr, a->ai_addrlen, b, sizeof b, nullptr, 0, NI_NUMERICHOST) != 0) continue;
      for (const auto& i : mine)
        if (!i.loopback && i.address == b) chosen = b;
    }
    ::freeaddrinfo(found);
    if (!chosen.empty()) return chosen;
  }
  for (const auto& i : mine)
    if (!i.loopback) return i.address;
  return "127.0.0.1";
}

UniqueFd connect_to(const std::string& host, std::uint16_t port, int ms, std::string& why) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    why = "cannot resolve " + host + " (" + ::gai_strerror(rc) + ")";
    return {};
  }
  UniqueFd s;
  int last_error = 0;
  for (addrinfo* a = found; a && !s; a = a->ai_next) {
    UniqueFd c(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!c) continue;
    int rc = ::connect(c.get(), a->ai_addr, a->ai_addrlen);
    last_error = errno;
    if (rc != 0 && errno == EINPROGRESS) {
      last_error = ETIMEDOUT;
      if (wait_for(c.get(), POLLOUT, ms)) {
        int err = 0;
        socklen_t n = sizeof err;
        ::getsockopt(c.get(), SOL_SOCKET, SO_ERROR, &err, &n);
        last_error = err;
        rc = err == 0 ? 0 : -1;
      }
    }
    if (rc == 0) s = std::move(c);
  }
  ::freeaddrinfo(found);
  if (!s) {
    why = "cannot connect to " + host + ":" + std::to_string(port) + " (" + std::strerror(last_error) + ")";
    return {};
  }
  int on = 1;
  ::setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  return s;
}

}  // namespace fibra::detail::tcp
