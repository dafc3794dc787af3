// src/transport/object_server.cpp: see object_server.hpp.
//
// The exchange, one object per connection, once the handshake has let the fetcher in (a
// transport/doorman.hpp): the fetcher sends a sealed wire::ObjectRequest (the object's name, how
// long to wait for it to be offered, whether to seal its bytes); the server answers a sealed
// wire::ObjectReply (its size, or not held), then its bytes: sealed in pieces of piece_bytes, or
// as they are followed by a sealed Poly1305 tag of them.
#include "transport/object_server.hpp"

#include <poll.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/unique_fd.hpp"
#include "fibra/error.hpp"
#include "transport/doorman.hpp"
#include "transport/tcp.hpp"
#include "transport/wire.hpp"

namespace fibra::detail {

namespace {

constexpr int io_timeout_ms = 30'000;                      // a peer that stops reading or writing this long is given up
constexpr std::size_t piece_bytes = std::size_t(1) << 20;  // sealed, or hashed and sent, at a time

std::string sys_error(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// A read-only view of a memfd's bytes for as long as it lives.
class Mapping {
 public:
  Mapping(int fd, std::uint64_t size) : size_(size) {
    if (size_ > 0) base_ = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
  }
  ~Mapping() {
    if (base_ != MAP_FAILED && base_) ::munmap(base_, size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  bool ok() const { return size_ == 0 || base_ != MAP_FAILED; }
  const char* data() const { return static_cast<const char*>(base_); }

 private:
  void* base_ = nullptr;
  std::uint64_t size_;
};

// The object's bytes to an authenticated fetcher: sealed pieces, or the bytes and their hash.
bool send_bytes(int c, auth::Session& s, const ObjectMemory& memory, std::uint64_t size, bool encrypted) {
  const Mapping m(memory.fd(), size);
  if (!m.ok()) return false;
  std::optional<auth::Session::Digest> digest;
  if (!encrypted) digest.emplace(s);
  for (std::uint64_t at = 0; at < size; at += piece_bytes) {
    const std::size_t n = std::size_t(std::min<std::uint64_t>(piece_bytes, size - at));
    if (encrypted) {
      if (!s.send(std::string_view(m.data() + at, n))) return false;
      continue;
    }
    digest->update(m.data() + at, n);
    // the piece from the memfd itself (sendfile: not copied through this process)
    for (off_t from = off_t(at); std::uint64_t(from) < at + n;) {
      const ssize_t k = ::sendfile(c, memory.fd(), &from, std::size_t(at + n - std::uint64_t(from)));
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && errno == EAGAIN && tcp::wait_for(c, POLLOUT, io_timeout_ms)) continue;
      if (k <= 0) return false;
    }
  }
  return encrypted || s.send(digest->final());
}

}  // namespace

struct ObjectServer::Impl {
  bool encrypt = false;
  std::string address;
  std::mutex mu;
  std::condition_variable offered;
  struct Held {
    std::shared_ptr<const ObjectMemory> memory;  // the holder's own: a copy under way keeps it
    std::uint64_t size = 0;
  };
  std::map<std::string, Held> held;  // under mu
  std::vector<int> serving;          // under mu: connections being served, shut down at the end
  bool stopping = false;             // under mu
  std::atomic<std::uint64_t> served{0};
  std::unique_ptr<Doorman> door;  // last: it goes first, its threads done

  // One fetch: the name, how long to wait for it, then its size and bytes.
  void serve(UniqueFd c, std::unique_ptr<auth::Session> s) {
    {
      std::lock_guard lk(mu);
      if (stopping) return;
      serving.push_back(c.get());
    }
    if (const auto bytes = s->receive(io_timeout_ms, wire::max_object_request)) {
      std::optional<wire::ObjectRequest> request;
      try {
        request = wire::decode_object_request(*bytes);
      } catch (const wire::Malformed&) {
      }
      if (request) answer(c.get(), *s, *request);
    }
    std::lock_guard lk(mu);
    std::erase(serving, c.get());
  }

  void answer(int c, auth::Session& s, const wire::ObjectRequest& request) {
    Held h;
    {
      std::unique_lock lk(mu);
      offered.wait_for(lk, std::chrono::milliseconds(std::min<std::uint64_t>(request.wait_ms, 60'000)),
                       [&] { return stopping || held.count(request.name) > 0; });
      if (!stopping)
        if (auto it = held.find(request.name); it != held.end()) h = it->second;
    }
    const bool sealed = encrypt || request.encrypted;
    const wire::ObjectReply reply = h.memory ? wire::ObjectReply{wire::ObjectAnswer::held, h.size, sealed}
                                             : wire::ObjectReply{wire::ObjectAnswer::not_held, 0, false};
    if (s.send(wire::encode_object_reply(reply)) && h.memory && send_bytes(c, s, *h.memory, h.size, sealed))
      served.fetch_add(1);
  }
};

ObjectServer::ObjectServer(const auth::Secret& secret, std::uint64_t pool, bool encrypt)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.encrypt = encrypt;
  s.address = tcp::listen_address();
  s.door = std::make_unique<Doorman>(
      tcp::listen_on(s.address, "serve stored objects to other hosts"), secret, wire::AuthRole::object, pool,
      "the object server",
      [&s](UniqueFd c, std::unique_ptr<auth::Session> session) { s.serve(std::move(c), std::move(session)); });
}

ObjectServer::~ObjectServer() {
  Impl& s = *impl_;
  {
    std::lock_guard lk(s.mu);
    s.stopping = true;
    for (int c : s.serving) ::shutdown(c, SHUT_RDWR);  // a fetch under way ends short
  }
  s.offered.notify_all();
  s.door.reset();  // waits for its threads
}

std::uint16_t ObjectServer::port() const { return impl_->door->port(); }

const std::string& ObjectServer::address() const { return impl_->address; }

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

namespace {

// The bytes that follow a held reply, into `fd`; false and `why` when cut short or changed.
bool receive_bytes(int s, auth::Session& session, int fd, std::uint64_t size, bool sealed, const std::string& where,
                   const std::string& name, std::string& why) {
  std::optional<auth::Session::Digest> digest;
  if (!sealed) digest.emplace(session);
  std::vector<char> buf(sealed ? 0 : std::min<std::uint64_t>(std::max<std::uint64_t>(size, 1), 4u << 20));
  for (std::uint64_t at = 0; at < size;) {
    std::string piece;
    std::string_view got;
    if (sealed) {
      auto m = session.receive(io_timeout_ms, piece_bytes);
      if (!m || m->empty() || m->size() > size - at) {
        why = where + " sent " + name + " cut short or changed after " + std::to_string(at) + " bytes";
        return false;
      }
      piece = std::move(*m);
      got = piece;
    } else {
      const std::size_t want = std::size_t(std::min<std::uint64_t>(size - at, buf.size()));
      if (!tcp::wait_for(s, POLLIN, io_timeout_ms)) {
        why = where + " stopped sending " + name + " after " + std::to_string(at) + " bytes";
        return false;
      }
      const ssize_t k = ::recv(s, buf.data(), want, 0);
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (k <= 0) {
        why = where + " ended its copy of " + name + " after " + std::to_string(at) + " of " + std::to_string(size) +
              " bytes";
        return false;
      }
      got = std::string_view(buf.data(), std::size_t(k));
      digest->update(got.data(), got.size());
    }
    if (!ObjectMemory::write_at(fd, got, at)) {
      why = sys_error("writing a fetched object");
      return false;
    }
    at += got.size();
  }
  if (sealed) return true;
  const auto theirs = session.receive(io_timeout_ms, 64);
  if (!theirs || !auth::same_bytes(*theirs, digest->final())) {
    why = "the copy of " + name + " from " + where + " was changed on the way (its tag does not match)";
    return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<ObjectMemory> fetch_object(const std::string& host, std::uint16_t port, const auth::Secret& secret,
                                           std::uint64_t pool, const std::string& name, std::uint64_t size,
                                           double wait_s, bool encrypt, std::string& why) {
  const std::string where = host + ":" + std::to_string(port);
  // A server whose door is full (turned away) is tried again, a few times, before the caller gets
  // the object another way.
  UniqueFd s;
  std::unique_ptr<auth::Session> session;
  for (int attempt = 1; !session; ++attempt) {
    s = tcp::connect_to(host, port, 5'000, why);
    if (!s) return nullptr;
    bool turned_away = false;
    session =
        auth::Session::connect(s.get(), secret, wire::AuthRole::object, pool, auth::handshake_ms, why, &turned_away);
    if (session) break;
    if (!turned_away || attempt == 4) {
      why = where + ": " + why;
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100 * attempt));
  }
  const wire::ObjectRequest request{name, static_cast<std::uint64_t>(wait_s * 1000), encrypt};
  if (!session->send(wire::encode_object_request(request))) {
    why = where + " closed the connection before the request";
    return nullptr;
  }
  const auto answer = session->receive(int(request.wait_ms) + io_timeout_ms, wire::object_reply_bytes);
  std::optional<wire::ObjectReply> got;
  try {
    if (answer) got = wire::decode_object_reply(*answer);
  } catch (const wire::Malformed&) {
  }
  if (!got) {
    why = "no answer from " + where;
    return nullptr;
  }
  if (got->answer == wire::ObjectAnswer::not_held || got->size != size) {
    why = got->answer == wire::ObjectAnswer::not_held
              ? where + " does not hold " + name
              : where + " holds " + name + " with " + std::to_string(got->size) + " bytes, not " + std::to_string(size);
    return nullptr;
  }
  if (encrypt && !got->encrypted) {
    why = where + " would send " + name + " unsealed, where this pool seals copies";
    return nullptr;
  }
  UniqueFd fd = ObjectMemory::new_memfd(name);
  if (!fd || ::ftruncate(fd.get(), off_t(size == 0 ? 1 : size)) != 0) {
    why = sys_error("memfd for a fetched object");
    return nullptr;
  }
  if (!receive_bytes(s.get(), *session, fd.get(), size, got->encrypted, where, name, why)) return nullptr;
  ObjectMemory::seal(fd.get());
  auto m = ObjectMemory::adopt(std::move(fd), name, size);
  if (!m) why = "the fetched copy of " + name + " could not be kept";
  return m;
}

}  // namespace fibra::detail
