// src/transport/auth.cpp: see auth.hpp. The handshake's messages are laid out in wire.hpp; the
// cryptography is libsodium's.
#include "transport/auth.hpp"

#include <sodium.h>

#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <utility>

#include "common/private_file.hpp"
#include "fibra/error.hpp"
#include "transport/tcp.hpp"

namespace fibra::detail::auth {

namespace {

using Clock = std::chrono::steady_clock;
using Stream = crypto_secretstream_xchacha20poly1305_state;
static_assert(Secret::size == crypto_auth_KEYBYTES && Secret::size == crypto_generichash_KEYBYTES &&
              Secret::size == crypto_secretstream_xchacha20poly1305_KEYBYTES);
static_assert(wire::auth_proof_bytes == crypto_auth_BYTES &&
              wire::auth_header_bytes == crypto_secretstream_xchacha20poly1305_HEADERBYTES);
constexpr std::size_t sealing = crypto_secretstream_xchacha20poly1305_ABYTES;

void need_sodium() {
  static const bool ready = sodium_init() >= 0;
  if (!ready) throw Error("fibra: libsodium cannot start (sodium_init failed): no authenticated connections");
}

// What one side's proof and the connection's keys are computed over: the protocol and version,
// what it is for (`label`: whose proof, or which key), the listener's role and pool, both nonces.
std::string transcript(std::string_view label, wire::AuthRole role, std::uint64_t pool, std::string_view client_nonce,
                       std::string_view server_nonce) {
  std::string t = "fibra-auth v" + std::to_string(wire::auth_version) + " ";
  t += label;
  t += '\0';
  t += static_cast<char>(role);
  t.append(reinterpret_cast<const char*>(&pool), sizeof pool);
  t += client_nonce;
  t += server_nonce;
  return t;
}

using Key = std::array<unsigned char, Secret::size>;

// The secret is used only through two subkeys of it, one per purpose: the proofs' (HMAC) and the
// connections' keys' (keyed BLAKE2b).
struct Subkeys {
  Key proofs{}, keys{};
  explicit Subkeys(const Secret& s) {
    crypto_kdf_derive_from_key(proofs.data(), proofs.size(), 1, "fbraauth", s.data());
    crypto_kdf_derive_from_key(keys.data(), keys.size(), 2, "fbrakeys", s.data());
  }
  ~Subkeys() {
    sodium_memzero(proofs.data(), proofs.size());
    sodium_memzero(keys.data(), keys.size());
  }
  Subkeys(const Subkeys&) = delete;
  Subkeys& operator=(const Subkeys&) = delete;
};
static_assert(crypto_kdf_KEYBYTES == Secret::size && crypto_kdf_CONTEXTBYTES == 8);

std::string proof(const Subkeys& k, std::string_view transcript) {
  std::string mac(crypto_auth_BYTES, '\0');
  crypto_auth(reinterpret_cast<unsigned char*>(mac.data()), reinterpret_cast<const unsigned char*>(transcript.data()),
              transcript.size(), k.proofs.data());
  return mac;
}

bool proof_holds(const Subkeys& k, std::string_view transcript, std::string_view mac) {
  return mac.size() == crypto_auth_BYTES &&
         crypto_auth_verify(reinterpret_cast<const unsigned char*>(mac.data()),
                            reinterpret_cast<const unsigned char*>(transcript.data()), transcript.size(),
                            k.proofs.data()) == 0;
}

Key derive(const Subkeys& k, std::string_view transcript) {
  Key out{};
  crypto_generichash(out.data(), out.size(), reinterpret_cast<const unsigned char*>(transcript.data()),
                     transcript.size(), k.keys.data(), k.keys.size());
  return out;
}

std::string random_bytes(std::size_t n) {
  std::string b(n, '\0');
  randombytes_buf(b.data(), n);
  return b;
}

int ms_left(Clock::time_point deadline) {
  return static_cast<int>(
      std::max<long long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
}

// Exactly `n` bytes by `deadline`, however slowly they come.
bool read_by(int fd, std::string& out, std::size_t n, Clock::time_point deadline) {
  out.assign(n, '\0');
  return tcp::read_within(fd, out.data(), n, ms_left(deadline));
}

}  // namespace

Secret Secret::random() {
  need_sodium();
  Secret s;
  randombytes_buf(s.key_.data(), s.key_.size());
  return s;
}

Secret Secret::from_hex(std::string_view hex, const std::string& where) {
  need_sodium();
  Secret s;
  std::size_t got = 0;
  const char* end = nullptr;
  if (hex.size() != 2 * size ||
      sodium_hex2bin(s.key_.data(), s.key_.size(), hex.data(), hex.size(), nullptr, &got, &end) != 0 || got != size)
    throw ConfigError("fibra: " + where + " does not hold a run's secret (64 hexadecimal digits)");
  return s;
}

Secret Secret::from_file(const std::string& path) {
  std::string text = read_private_file(path, "the run's secret file");
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  Secret s = from_hex(text, "the secret file " + path);
  sodium_memzero(text.data(), text.size());
  return s;
}

Secret::~Secret() { sodium_memzero(key_.data(), key_.size()); }

std::string Secret::hex() const {
  std::string h(2 * size + 1, '\0');
  sodium_bin2hex(h.data(), h.size(), key_.data(), key_.size());
  h.pop_back();
  return h;
}

bool same_bytes(std::string_view a, std::string_view b) {
  return a.size() == b.size() && (a.empty() || sodium_memcmp(a.data(), b.data(), a.size()) == 0);
}

struct Session::Impl {
  Stream out{}, in{};
  Key digest_key{};
  bool broken = false;
  bool digest_made = false;
  ~Impl() {
    sodium_memzero(&out, sizeof out);
    sodium_memzero(&in, sizeof in);
    sodium_memzero(digest_key.data(), digest_key.size());
  }
};

Session::Session(int fd, std::unique_ptr<Impl> impl) : fd_(fd), impl_(std::move(impl)) {}
Session::~Session() = default;

std::unique_ptr<Session> Session::connect(int fd, const Secret& secret_, wire::AuthRole role, std::uint64_t pool,
                                          int ms, std::string& why, bool* turned_away) {
  need_sodium();
  const Subkeys secret(secret_);
  if (turned_away) *turned_away = false;
  const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  const std::string mine = random_bytes(wire::auth_nonce_bytes);
  const std::string hello = wire::encode_auth_hello({wire::auth_version, role, pool, mine});
  if (!tcp::write_all(fd, hello.data(), hello.size())) {
    why = "the listener closed the connection before its handshake";
    return nullptr;
  }
  std::string challenge;
  if (!read_by(fd, challenge, wire::auth_challenge_bytes, deadline)) {
    char b;
    const bool closed = ::recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    if (turned_away) *turned_away = closed;
    why = closed ? "the listener closed the connection before its challenge (too many connections at once, or a "
                   "listener of another pool or version)"
                 : "the listener did not answer the handshake within " + std::to_string(ms) + " ms";
    return nullptr;
  }
  const std::string_view theirs = std::string_view(challenge).substr(0, wire::auth_nonce_bytes);
  const std::string_view their_proof =
      std::string_view(challenge).substr(wire::auth_nonce_bytes, wire::auth_proof_bytes);
  const std::string_view their_header =
      std::string_view(challenge).substr(wire::auth_nonce_bytes + wire::auth_proof_bytes);
  if (!proof_holds(secret, transcript("listener", role, pool, mine, theirs), their_proof)) {
    why = "the listener does not hold this run's secret (a listener of another run, or not fibra's)";
    return nullptr;
  }
  auto impl = std::make_unique<Impl>();
  Key out = derive(secret, transcript("to listener", role, pool, mine, theirs));
  Key in = derive(secret, transcript("from listener", role, pool, mine, theirs));
  impl->digest_key = derive(secret, transcript("digest", role, pool, mine, theirs));
  std::string answer = proof(secret, transcript("connector", role, pool, mine, theirs));
  answer.resize(wire::auth_answer_bytes);
  crypto_secretstream_xchacha20poly1305_init_push(
      &impl->out, reinterpret_cast<unsigned char*>(answer.data() + wire::auth_proof_bytes), out.data());
  const bool pulled = crypto_secretstream_xchacha20poly1305_init_pull(
                          &impl->in, reinterpret_cast<const unsigned char*>(their_header.data()), in.data()) == 0;
  sodium_memzero(out.data(), out.size());
  sodium_memzero(in.data(), in.size());
  if (!pulled || !tcp::write_all(fd, answer.data(), answer.size())) {
    why = "the listener closed the connection during its handshake";
    return nullptr;
  }
  return std::unique_ptr<Session>(new Session(fd, std::move(impl)));
}

std::unique_ptr<Session> Session::accept(int fd, const Secret& secret_, wire::AuthRole role, std::uint64_t pool, int ms,
                                         std::string& why) {
  need_sodium();
  const Subkeys secret(secret_);
  const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  std::string bytes;
  if (!read_by(fd, bytes, wire::auth_hello_bytes, deadline)) {
    why = "no whole handshake within " + std::to_string(ms) + " ms";
    return nullptr;
  }
  wire::AuthHello hello;
  try {
    hello = wire::decode_auth_hello(bytes);
  } catch (const wire::Malformed& e) {
    why = e.what();
    return nullptr;
  }
  if (hello.version != wire::auth_version || hello.role != role || hello.pool != pool) {
    why = hello.version != wire::auth_version ? "a handshake of version " + std::to_string(hello.version) +
                                                    ", where this build speaks " + std::to_string(wire::auth_version)
          : hello.role != role ? "a handshake for another kind of listener"
                               : "a handshake for another pool";
    return nullptr;
  }
  const std::string mine = random_bytes(wire::auth_nonce_bytes);
  auto impl = std::make_unique<Impl>();
  Key out = derive(secret, transcript("from listener", role, pool, hello.nonce, mine));
  Key in = derive(secret, transcript("to listener", role, pool, hello.nonce, mine));
  std::string challenge = mine + proof(secret, transcript("listener", role, pool, hello.nonce, mine));
  challenge.resize(wire::auth_challenge_bytes);
  crypto_secretstream_xchacha20poly1305_init_push(
      &impl->out, reinterpret_cast<unsigned char*>(challenge.data() + wire::auth_nonce_bytes + wire::auth_proof_bytes),
      out.data());
  sodium_memzero(out.data(), out.size());
  std::string answer;
  if (!tcp::write_all(fd, challenge.data(), challenge.size()) ||
      !read_by(fd, answer, wire::auth_answer_bytes, deadline)) {
    sodium_memzero(in.data(), in.size());
    // A connector that finds this listener's proof wrong (it holds another run's secret) hangs up.
    why = Clock::now() < deadline ? "it hung up without answering its challenge (a connector holding another "
                                    "run's secret does, having found this listener's proof wrong)"
                                  : "no answer to its challenge within " + std::to_string(ms) + " ms";
    return nullptr;
  }
  const std::string_view their_proof = std::string_view(answer).substr(0, wire::auth_proof_bytes);
  if (!proof_holds(secret, transcript("connector", role, pool, hello.nonce, mine), their_proof)) {
    sodium_memzero(in.data(), in.size());
    why = "it does not hold this run's secret";
    return nullptr;
  }
  const bool pulled =
      crypto_secretstream_xchacha20poly1305_init_pull(
          &impl->in, reinterpret_cast<const unsigned char*>(answer.data() + wire::auth_proof_bytes), in.data()) == 0;
  sodium_memzero(in.data(), in.size());
  impl->digest_key = derive(secret, transcript("digest", role, pool, hello.nonce, mine));
  if (!pulled) {
    why = "its stream's header does not open";
    return nullptr;
  }
  return std::unique_ptr<Session>(new Session(fd, std::move(impl)));
}

bool Session::send(std::string_view message) {
  if (impl_->broken || message.size() > max_sealed) return false;
  std::string sealed(message.size() + sealing, '\0');
  unsigned long long n = 0;
  crypto_secretstream_xchacha20poly1305_push(&impl_->out, reinterpret_cast<unsigned char*>(sealed.data()), &n,
                                             reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                                             nullptr, 0, crypto_secretstream_xchacha20poly1305_TAG_MESSAGE);
  const std::optional<std::string> f = wire::frame(sealed, max_sealed + sealing);
  if (f && tcp::write_all(fd_, f->data(), f->size())) return true;
  impl_->broken = true;  // (part of a frame may have gone: the stream is out of step)
  return false;
}

std::optional<std::string> Session::receive(int ms, std::size_t most) {
  if (impl_->broken) return std::nullopt;
  impl_->broken = true;  // (until a whole message opens)
  char head[wire::frame_head];
  if (!tcp::read_all(fd_, head, sizeof head, ms)) return std::nullopt;
  std::uint32_t n = 0;
  try {
    n = wire::frame_length(std::string_view(head, sizeof head), most + sealing);
  } catch (const wire::Malformed&) {
    return std::nullopt;
  }
  if (n < sealing) return std::nullopt;
  std::string sealed(n, '\0');
  if (!tcp::read_all(fd_, sealed.data(), n, ms)) return std::nullopt;
  std::string message(n - sealing, '\0');
  unsigned long long got = 0;
  unsigned char tag = 0;
  if (crypto_secretstream_xchacha20poly1305_pull(&impl_->in, reinterpret_cast<unsigned char*>(message.data()), &got,
                                                 &tag, reinterpret_cast<const unsigned char*>(sealed.data()), n,
                                                 nullptr, 0) != 0 ||
      tag != crypto_secretstream_xchacha20poly1305_TAG_MESSAGE)
    return std::nullopt;
  message.resize(got);
  impl_->broken = false;
  return message;
}

struct Session::Digest::State {
  crypto_onetimeauth_state h{};
};
static_assert(crypto_onetimeauth_KEYBYTES == Secret::size);

Session::Digest::Digest(Session& s) : state_(std::make_unique<State>()) {
  // Poly1305 under a key of this connection's alone, for one message: never a second one.
  if (std::exchange(s.impl_->digest_made, true))
    throw Error("fibra: a second digest on one authenticated connection (its key is for one message)");
  crypto_onetimeauth_init(&state_->h, s.impl_->digest_key.data());
}
Session::Digest::~Digest() { sodium_memzero(&state_->h, sizeof state_->h); }

void Session::Digest::update(const void* data, std::size_t n) {
  crypto_onetimeauth_update(&state_->h, static_cast<const unsigned char*>(data), n);
}

std::string Session::Digest::final() {
  std::string d(crypto_onetimeauth_BYTES, '\0');
  crypto_onetimeauth_final(&state_->h, reinterpret_cast<unsigned char*>(d.data()));
  return d;
}

}  // namespace fibra::detail::auth
