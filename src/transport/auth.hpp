// src/transport/auth.hpp: who may speak to fibra's own TCP listeners (the join listener, each
// agent's object server): only a process that holds the run's secret, and it learns that the
// listener holds it too (docs/security.md).
//
// The secret is 32 random bytes kept in files of their owner's alone (the run's secret file, the
// join file) and never sent. A connection starts with a challenge-response over fresh nonces
// (wire::AuthHello and what follows it): each side proves it holds the secret with an HMAC
// (libsodium's crypto_auth, HMAC-SHA-512-256, under a subkey of the secret kept for proofs) over
// both nonces, the role of the listener, the pool and the protocol's version, checked in constant time, before the
// listener reads anything else. Then each side's messages go sealed (libsodium's secretstream, XChaCha20-Poly1305,
// under keys derived for this connection alone): they cannot be read, changed, reordered, replayed or cut short unseen.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "transport/wire.hpp"

namespace fibra::detail::auth {

/// A run's secret: 32 random bytes, wiped when it goes.
class Secret {
 public:
  static constexpr std::size_t size = 32;
  /// Fresh bytes from the system's random source; Error when there are none.
  static Secret random();
  /// From its text (64 hexadecimal digits); ConfigError naming `where` otherwise.
  static Secret from_hex(std::string_view hex, const std::string& where);
  /// Read from `path`, a file of this user's alone holding its text: ConfigError naming the problem
  /// (missing, a link, another user's, readable by others, not a secret) and the fix.
  static Secret from_file(const std::string& path);
  Secret(const Secret& o) : key_(o.key_) {}
  Secret& operator=(const Secret& o) = default;
  ~Secret();
  std::string hex() const;
  const unsigned char* data() const { return key_.data(); }

 private:
  Secret() = default;
  std::array<unsigned char, size> key_{};
};

/// How long a handshake may take, all of it (a peer that sends a byte a second is not waited for).
inline constexpr int handshake_ms = 2'000;
/// A sealed message's bytes at most, unless its reader says less.
inline constexpr std::size_t max_sealed = std::size_t(1) << 20;

/// One authenticated connection: its socket stays its caller's; the session seals and opens.
class Session {
 public:
  /// The connecting side: proves it holds `secret` to the listener for `role` and `pool`, and
  /// checks that the listener does too, within `ms`. nullptr and `why` when not; `turned_away`
  /// (if given) says whether the listener closed before its challenge (its door full, say: worth
  /// trying again), as opposed to a proof that does not hold.
  static std::unique_ptr<Session> connect(int fd, const Secret& secret, wire::AuthRole role, std::uint64_t pool, int ms,
                                          std::string& why, bool* turned_away = nullptr);
  /// The listening side: the same, reading nothing but the handshake (fixed sizes) before the
  /// peer has proved itself. nullptr and `why` when the peer did not.
  static std::unique_ptr<Session> accept(int fd, const Secret& secret, wire::AuthRole role, std::uint64_t pool, int ms,
                                         std::string& why);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Seals `message` (at most max_sealed bytes) and sends it as one frame; false if it is longer,
  /// or the peer is gone.
  bool send(std::string_view message);
  /// The next message, opened; nullopt if none whole came within `ms` (or the peer left), or one
  /// announced more than `most` bytes (the rest is not read), or it does not open: changed,
  /// replayed, reordered or from another connection. After a nullopt the session is done.
  std::optional<std::string> receive(int ms, std::size_t most = max_sealed);

  /// An authenticator (Poly1305) under a key of this connection's alone, for the one run of bytes
  /// it sends or receives unsealed (an object copy): the sender sends its digest sealed after
  /// them, the receiver compares with its own. One per session: a second throws Error.
  class Digest {
   public:
    explicit Digest(Session& s);
    ~Digest();
    void update(const void* data, std::size_t n);
    std::string final();

   private:
    struct State;
    std::unique_ptr<State> state_;
  };

 private:
  struct Impl;
  explicit Session(int fd, std::unique_ptr<Impl> impl);
  int fd_;
  std::unique_ptr<Impl> impl_;
};

/// Whether `a` and `b` are equal, in a time that depends on their lengths alone.
bool same_bytes(std::string_view a, std::string_view b);

}  // namespace fibra::detail::auth
