// src/transport/object_server.cpp: see object_server.hpp.
//
// The exchange, one object per connection: the fetcher sends the server's key (u64), a u32 length
// and the object's name, then a u64 of how many milliseconds it waits for the object to be offered;
// the server answers a u64, the object's size (all ones: not held; all ones but the last bit: a
// wrong key), followed by its bytes (sendfile from the memfd).
#include "transport/object_server.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/unique_fd.hpp"
#include "fibra/error.hpp"

namespace fibra::detail {

namespace {

constexpr std::uint64_t not_held = ~std::uint64_t(0);
constexpr std::uint64_t wrong_key = ~std::uint64_t(1);
constexpr std::uint32_t max_name = 256;
constexpr int io_timeout_ms = 30'000;  // a peer that stops reading or writing this long is given up

std::string sys_error(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// Waits until `fd` is ready for `events`; false after `ms` or on an error.
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

bool read_all(int fd, void* data, std::size_t n, int ms = io_timeout_ms) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    if (!wait_for(fd, POLLIN, ms)) return false;
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return false;
    p += k;
    n -= std::size_t(k);
  }
  return true;
}

}  // namespace

struct ObjectServer::Impl {
  std::uint64_t key = 0;
  UniqueFd listener;
  UniqueFd stop_pipe[2];
  std::uint16_t port = 0;
  std::thread acceptor;
  std::mutex mu;
  std::condition_variable offered;
  struct Held {
    UniqueFd fd;
    std::uint64_t size = 0;
  };
  std::map<std::string, std::shared_ptr<Held>> held;  // under mu
  std::list<std::thread> serving;                     // under mu: one per connection
  std::vector<int> open_connections;                  // under mu: shut down at the end
  bool stopping = false;                              // under mu
  std::atomic<std::uint64_t> served{0};

  void accept_loop() {
    pollfd p[2] = {{listener.get(), POLLIN, 0}, {stop_pipe[0].get(), POLLIN, 0}};
    for (;;) {
      const int r = ::poll(p, 2, -1);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 || (p[1].revents & POLLIN)) return;
      if (!(p[0].revents & POLLIN)) continue;
      const int c = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c < 0) continue;
      std::lock_guard lk(mu);
      if (stopping) {
        ::close(c);
        return;
      }
      open_connections.push_back(c);
      serving.emplace_back([this, c] { serve(c); });
    }
  }

  // One fetch: the name, how long to wait for it, then its size and bytes.
  void serve(int c) {
    std::uint32_t len = 0;
    std::uint64_t wait_ms = 0, their_key = 0;
    std::string name;
    bool whole = read_all(c, &their_key, sizeof their_key) && read_all(c, &len, sizeof len) && len <= max_name;
    if (whole) {
      name.resize(len);
      whole = read_all(c, name.data(), len) && read_all(c, &wait_ms, sizeof wait_ms);
    }
    // (The whole request is read before any answer: a socket closed with bytes unread resets it.)
    if (whole && their_key != key) {
      (void)write_all(c, &wrong_key, sizeof wrong_key);
    } else if (whole) {
      std::shared_ptr<Held> h;
      {
        std::unique_lock lk(mu);
        offered.wait_for(lk, std::chrono::milliseconds(std::min<std::uint64_t>(wait_ms, 60'000)), [&] {
          return stopping || held.count(name) > 0;
        });
        if (!stopping)
          if (auto it = held.find(name); it != held.end()) h = it->second;
      }
      const std::uint64_t size = h ? h->size : not_held;
      if (write_all(c, &size, sizeof size) && h) {
        off_t at = 0;
        bool ok = true;
        while (ok && std::uint64_t(at) < h->size) {
          const ssize_t k = ::sendfile(c, h->fd.get(), &at, std::size_t(h->size - std::uint64_t(at)));
          if (k < 0 && errno == EINTR) continue;
          if (k < 0 && errno == EAGAIN && wait_for(c, POLLOUT, io_timeout_ms)) continue;
          ok = k > 0;
        }
        if (ok) served.fetch_add(1);
      }
    }
    std::lock_guard lk(mu);
    std::erase(open_connections, c);
    ::close(c);
  }
};

ObjectServer::ObjectServer(std::uint64_t key) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.key = key;
  s.listener = UniqueFd(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  bool v6 = true;
  if (!s.listener) {  // no IPv6 here: IPv4 alone
    v6 = false;
    s.listener = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  }
  if (!s.listener) throw Error("fibra: cannot serve stored objects to other hosts (" + sys_error("socket") + ")");
  int on = 1, off = 0;
  ::setsockopt(s.listener.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  int rc;
  if (v6) {
    ::setsockopt(s.listener.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);  // IPv4 peers too
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    rc = ::bind(s.listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    rc = ::bind(s.listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0 || ::listen(s.listener.get(), 64) != 0)
    throw Error("fibra: cannot serve stored objects to other hosts (" + sys_error("bind/listen") + ")");
  sockaddr_storage got{};
  socklen_t n = sizeof got;
  ::getsockname(s.listener.get(), reinterpret_cast<sockaddr*>(&got), &n);
  s.port = ntohs(got.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&got)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&got)->sin_port);
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw Error("fibra: cannot serve stored objects (" + sys_error("pipe") + ")");
  s.stop_pipe[0] = UniqueFd(p[0]);
  s.stop_pipe[1] = UniqueFd(p[1]);
  s.acceptor = std::thread([&s] { s.accept_loop(); });
}

ObjectServer::~ObjectServer() {
  Impl& s = *impl_;
  std::list<std::thread> serving;
  {
    std::lock_guard lk(s.mu);
    s.stopping = true;
    for (int c : s.open_connections) ::shutdown(c, SHUT_RDWR);  // a fetch under way ends short
  }
  s.offered.notify_all();
  const char b = 0;
  (void)!::write(s.stop_pipe[1].get(), &b, 1);
  s.acceptor.join();
  {
    std::lock_guard lk(s.mu);
    serving.swap(s.serving);
  }
  for (auto& t : serving) t.join();
}

std::uint16_t ObjectServer::port() const { return impl_->port; }

std::uint64_t ObjectServer::served() const { return impl_->served.load(); }

void ObjectServer::offer(const std::string& name, int fd, std::uint64_t size) {
  auto h = std::make_shared<Impl::Held>();
  h->fd = UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!h->fd) return;  // out of descriptors: peers fetch it elsewhere
  h->size = size;
  {
    std::lock_guard lk(impl_->mu);
    impl_->held[name] = std::move(h);
    // Connections that ended are joined here, now and then, rather than piling up.
    if (impl_->serving.size() > 32 && impl_->open_connections.empty()) {
      for (auto& t : impl_->serving) t.join();
      impl_->serving.clear();
    }
  }
  impl_->offered.notify_all();
}

void ObjectServer::withdraw(const std::string& name) {
  std::lock_guard lk(impl_->mu);
  impl_->held.erase(name);
}

std::unique_ptr<ObjectMemory> fetch_object(const std::string& host, std::uint16_t port, std::uint64_t key,
                                           const std::string& name, std::uint64_t size, double wait_s,
                                           std::string& why) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    why = "cannot resolve " + host + " (" + ::gai_strerror(rc) + ")";
    return nullptr;
  }
  UniqueFd s;
  for (addrinfo* a = found; a && !s; a = a->ai_next) {
    UniqueFd c(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!c) continue;
    int rc = ::connect(c.get(), a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS && wait_for(c.get(), POLLOUT, 5'000)) {
      int err = 0;
      socklen_t n = sizeof err;
      ::getsockopt(c.get(), SOL_SOCKET, SO_ERROR, &err, &n);
      errno = err;
      rc = err == 0 ? 0 : -1;
    }
    if (rc == 0) s = std::move(c);
  }
  ::freeaddrinfo(found);
  if (!s) {
    why = "cannot connect to " + where + " (" + std::strerror(errno) + ")";
    return nullptr;
  }
  const auto len = static_cast<std::uint32_t>(name.size());
  const auto wait_ms = static_cast<std::uint64_t>(wait_s * 1000);
  std::uint64_t got = 0;
  if (!write_all(s.get(), &key, sizeof key) || !write_all(s.get(), &len, sizeof len) || !write_all(s.get(), name.data(), len) ||
      !write_all(s.get(), &wait_ms, sizeof wait_ms) ||
      !read_all(s.get(), &got, sizeof got, int(wait_ms) + io_timeout_ms)) {
    why = "no answer from " + where;
    return nullptr;
  }
  if (got == wrong_key) {
    why = where + " serves another pool's objects (its key is not this pool's)";
    return nullptr;
  }
  if (got == not_held || got != size) {
    why = got == not_held ? where + " does not hold " + name
                          : where + " holds " + name + " with " + std::to_string(got) + " bytes, not " +
                                std::to_string(size);
    return nullptr;
  }
  UniqueFd fd = ObjectMemory::new_memfd(name);
  if (!fd || ::ftruncate(fd.get(), off_t(size == 0 ? 1 : size)) != 0) {
    why = sys_error("memfd for a fetched object");
    return nullptr;
  }
  std::vector<char> buf(std::min<std::uint64_t>(size, 4u << 20));
  for (std::uint64_t at = 0; at < size;) {
    const std::size_t want = std::size_t(std::min<std::uint64_t>(size - at, buf.size()));
    if (!wait_for(s.get(), POLLIN, io_timeout_ms)) {
      why = where + " stopped sending " + name + " after " + std::to_string(at) + " bytes";
      return nullptr;
    }
    const ssize_t k = ::recv(s.get(), buf.data(), want, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) {
      why = where + " ended its copy of " + name + " after " + std::to_string(at) + " of " + std::to_string(size) +
            " bytes";
      return nullptr;
    }
    if (!ObjectMemory::write_at(fd.get(), std::string_view(buf.data(), std::size_t(k)), at)) {
      why = sys_error("writing a fetched object");
      return nullptr;
    }
    at += std::uint64_t(k);
  }
  ObjectMemory::seal(fd.get());
  auto m = ObjectMemory::adopt(std::move(fd), name, size);
  if (!m) why = "the fetched copy of " + name + " could not be kept";
  return m;
}

}  // namespace fibra::detail
