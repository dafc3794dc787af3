// src/transport/doorman.hpp: the door of fibra's own TCP listeners (the join listener, each
// agent's object server): it accepts connections and lets in only those that pass the handshake
// (transport/auth.hpp), each on a thread of its own and within auth::handshake_ms, with a bound on
// how many may be in their handshake at once (and a quarter of that from any one address); a
// connection over it is closed at once, so that a flood or a slow sender costs the run a few
// threads. Connectors that are turned away try again (a fetch, a join).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/unique_fd.hpp"
#include "transport/auth.hpp"
#include "transport/tcp.hpp"

namespace fibra::detail {

class Doorman {
 public:
  /// What is done with a connection let in, on its thread: it owns the socket and its session.
  using Serve = std::function<void(UniqueFd fd, std::unique_ptr<auth::Session> session)>;
  /// Told of each connection that failed the handshake, on its thread: the peer's address and
  /// port, and why (the log says only the first; an event log may keep them all).
  using Refused = std::function<void(const std::string& address, const std::string& port, const std::string& why)>;
  /// Starts accepting on `listener` for `role` and `pool` (`what` names the listener in its log).
  /// Throws Error with the system's reason if it cannot.
  Doorman(tcp::Listener listener, const auth::Secret& secret, wire::AuthRole role, std::uint64_t pool, std::string what,
          Serve serve, int most_in_handshake = 32, Refused refused = {});
  /// Stops accepting, cuts the handshakes under way, and waits for its threads (a Serve under way
  /// is its owner's to end first).
  ~Doorman();
  Doorman(const Doorman&) = delete;
  Doorman& operator=(const Doorman&) = delete;

  std::uint16_t port() const;
  struct Counts {
    std::uint64_t let_in = 0;       ///< passed the handshake
    std::uint64_t refused = 0;      ///< failed it, or took too long
    std::uint64_t turned_away = 0;  ///< closed at once: too many in their handshake
  };
  Counts counts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fibra::detail
