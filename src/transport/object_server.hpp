// src/transport/object_server.hpp: stored objects served from one agent to another over TCP, so
// that an object (a task's result kept where it was made, a fibra::put value an agent holds) goes
// from host to host directly, not through the driver (docs/architecture.md, "The object store").
// An agent that does not share the driver's host serves the memfds it holds; an agent told to
// fetch one from it (wire::ObjectFetch) copies it into a memfd of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "transport/auth.hpp"
#include "transport/object_memory.hpp"

namespace fibra::detail {

class ObjectServer {
 public:
  /// Listens on an ephemeral TCP port of tcp::listen_address(), serving on threads of its own to
  /// fetchers that prove they hold `secret` for `pool` (the pool's AgentSetup::lane_nonce), each
  /// connection authenticated before anything else is read (transport/doorman.hpp). With `encrypt`
  /// (PoolOptions::encrypt_objects) every copy is sealed; else a fetcher's request says. Throws
  /// Error with the system's reason if it cannot.
  ObjectServer(const auth::Secret& secret, std::uint64_t pool, bool encrypt);
  ~ObjectServer();  // stops serving; a fetch under way gets a short read
  ObjectServer(const ObjectServer&) = delete;
  ObjectServer& operator=(const ObjectServer&) = delete;

  std::uint16_t port() const;
  /// The address it listens on, which peers are given (empty: every address; peers use the host's name).
  const std::string& address() const;
  /// Serves `memory` (a memfd of `size` bytes) under `name`, from now until withdraw(name); a copy
  /// under way then still holds it.
  void offer(const std::string& name, std::shared_ptr<const ObjectMemory> memory, std::uint64_t size);
  void withdraw(const std::string& name);
  /// Objects fetched from it so far (its peers' copies).
  std::uint64_t served() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Copies object `name` (`size` bytes) from the ObjectServer at `host`:`port` (of pool `pool`, both
/// proving they hold `secret`) into a new sealed memfd of that name, held (ObjectMemory::adopt: not
/// mapped; executors map it); its bytes sealed when `encrypt`, else authenticated by a Poly1305 tag.
/// A server that does not hold it yet is waited for up to `wait_s` (it may be on its way to the
/// peer). nullptr with `why` set when it cannot (no such host, refused, not held, cut short,
/// changed on the way): the caller gets it another way.
std::unique_ptr<ObjectMemory> fetch_object(const std::string& host, std::uint16_t port, const auth::Secret& secret,
                                           std::uint64_t pool, const std::string& name, std::uint64_t size,
                                           double wait_s, bool encrypt, std::string& why);

}  // namespace fibra::detail
