// src/transport/object_server.cpp: see object_server.hpp.
//
// The exchange, one object per connection: the fetcher sends a wire::ObjectRequest (the server's
// key, the object's name, how long to wait for it to be offered); the server answers a
// wire::ObjectReply (the object's size, or why not), followed by its bytes (sendfile from the memfd).
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
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <system_error>
#include <vector>

#include "common/unique_fd.hpp"
#include "fibra/error.hpp"
#include "transport/tcp.hpp"
#include "transport/wire.hpp"

namespace fibra::detail {

namespace {

constexpr int io_timeout_ms = 30'000;  // a peer that stops reading or writing this long is given up

std::string sys_error(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

using tcp::read_all;
using tcp::wait_for;
using tcp::write_all;

// A fetcher's request: its head, then the rest the head announces; nullopt if it is cut short or
// malformed (a name too long is refused before it is read).
std::optional<wire::ObjectRequest> read_request(int c) {
  std::string bytes(wire::object_request_head, '\0');
  if (!read_all(c, bytes.data(), bytes.size(), io_timeout_ms)) return std::nullopt;
  try {
    const std::size_t rest = wire::object_request_rest(bytes);
    bytes.resize(wire::object_request_head + rest);
    if (!read_all(c, bytes.data() + wire::object_request_head, rest, io_timeout_ms)) return std::nullopt;
    return wire::decode_object_request(bytes);
  } catch (const wire::Malformed&) {
    return std::nullopt;
  }
}

bool send_reply(int c, const wire::ObjectReply& r) {
  const std::string bytes = wire::encode_object_reply(r);
  return write_all(c, bytes.data(), bytes.size());
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
  std::condition_variable all_served;
  struct Held {
    std::shared_ptr<const ObjectMemory> memory;  // the holder's own: a copy under way keeps it
    std::uint64_t size = 0;
  };
  std::map<std::string, Held> held;   // under mu
  int serving = 0;                    // under mu: connections being served, a thread each (detached)
  std::vector<int> open_connections;  // under mu: shut down at the end
  bool stopping = false;              // under mu
  std::atomic<std::uint64_t> served{0};

  void accept_loop() {
    pollfd p[2] = {{listener.get(), POLLIN, 0}, {stop_pipe[0].get(), POLLIN, 0}};
    for (;;) {
      const int r = ::poll(p, 2, -1);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 || (p[1].revents & POLLIN)) return;
      if (!(p[0].revents & POLLIN)) continue;
      const int c = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c < 0) {
        // Out of descriptors: the connection waits in the backlog (a fetcher gives up in time).
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      std::lock_guard lk(mu);
      if (stopping) {
        ::close(c);
        return;
      }
      try {
        std::thread([this, c] { serve(c); }).detach();
      } catch (const std::system_error&) {  // no thread to be had: this fetcher gets the bytes elsewhere
        ::close(c);
        continue;
      }
      open_connections.push_back(c);
      ++serving;
    }
  }

  // One fetch: the name, how long to wait for it, then its size and bytes.
  void serve(int c) {
    // (The whole request is read before any answer: a socket closed with bytes unread resets it.)
    const std::optional<wire::ObjectRequest> request = read_request(c);
    if (request && request->key != key) {
      (void)send_reply(c, {wire::ObjectAnswer::wrong_key});
    } else if (request) {
      Held h;
      {
        std::unique_lock lk(mu);
        offered.wait_for(lk, std::chrono::milliseconds(std::min<std::uint64_t>(request->wait_ms, 60'000)),
                         [&] { return stopping || held.count(request->name) > 0; });
        if (!stopping)
          if (auto it = held.find(request->name); it != held.end()) h = it->second;
      }
      const wire::ObjectReply reply = h.memory ? wire::ObjectReply{wire::ObjectAnswer::held, h.size}
                                               : wire::ObjectReply{wire::ObjectAnswer::not_held};
      if (send_reply(c, reply) && h.memory) {
        off_t at = 0;
        bool ok = true;
        while (ok && std::uint64_t(at) < h.size) {
          const ssize_t k = ::sendfile(c, h.memory->fd(), &at, std::size_t(h.size - std::uint64_t(at)));
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
    if (--serving == 0) all_served.notify_all();  // (under mu: the destructor waits for it)
  }
};

ObjectServer::ObjectServer(std::uint64_t key) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.key = key;
  tcp::Listener l = tcp::listen_any("serve stored objects to other hosts");
  s.listener = std::move(l.fd);
  s.port = l.port;
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw Error("fibra: cannot serve stored objects (" + sys_error("pipe") + ")");
  s.stop_pipe[0] = UniqueFd(p[0]);
  s.stop_pipe[1] = UniqueFd(p[1]);
  s.acceptor = std::thread([&s] { s.accept_loop(); });
}

ObjectServer::~ObjectServer() {
  Impl& s = *impl_;
  {
    std::lock_guard lk(s.mu);
    s.stopping = true;
    for (int c : s.open_connections) ::shutdown(c, SHUT_RDWR);  // a fetch under way ends short
  }
  s.offered.notify_all();
  const char b = 0;
  (void)!::write(s.stop_pipe[1].get(), &b, 1);
  s.acceptor.join();
  std::unique_lock lk(s.mu);
  s.all_served.wait(lk, [&] { return s.serving == 0; });  // their threads touch nothing after
}

std::uint16_t ObjectServer::port() const { return impl_->port; }

std::uint64_t ObjectServer::served() const { return impl_->served.load(); }

void ObjectServer::offer(const std::string& name, std::shared_ptr<const ObjectMemory> memory, std::uint64_t size) {
  {
    std::lock_guard lk(impl_->mu);
    impl_->held[name] = Impl::Held{std::move(memory), size};
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
  UniqueFd s = tcp::connect_to(host, port, 5'000, why);
  if (!s) return nullptr;
  // The request in one write.
  const wire::ObjectRequest request{key, name, static_cast<std::uint64_t>(wait_s * 1000)};
  const std::string bytes = wire::encode_object_request(request);
  std::string answer(wire::object_reply_bytes, '\0');
  if (!write_all(s.get(), bytes.data(), bytes.size()) ||
      !read_all(s.get(), answer.data(), answer.size(), int(request.wait_ms) + io_timeout_ms)) {
    why = "no answer from " + where;
    return nullptr;
  }
  const wire::ObjectReply got = wire::decode_object_reply(answer);
  if (got.answer == wire::ObjectAnswer::wrong_key) {
    why = where + " serves another pool's objects (its key is not this pool's)";
    return nullptr;
  }
  if (got.answer == wire::ObjectAnswer::not_held || got.size != size) {
    why = got.answer == wire::ObjectAnswer::not_held
              ? where + " does not hold " + name
              : where + " holds " + name + " with " + std::to_string(got.size) + " bytes, not " + std::to_string(size);
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
