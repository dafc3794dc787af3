#include "transport/wire.hpp"

#include <cstdio>
#include <limits>

namespace fibra::wire {

using detail::Reader;
using detail::Writer;

namespace {

std::uint32_t count_of(std::string_view batch) {
  Reader r(batch);
  return r.pod<std::uint32_t>();
}

// Runs `parse` over a batch (or another `what`), turning the codec's errors into Malformed.
template <class Parse>
auto parsing(Parse&& parse, const char* what = "batch") {
  try {
    return parse();
  } catch (const Malformed&) {
    throw;
  } catch (const Error& e) {
    throw Malformed(std::string("fibra: a malformed ") + what + ": " + e.what());
  }
}

// Every result header takes the same bytes (its fields have fixed sizes), so one opened before its
// payload is known can be written again in place.
const std::size_t result_head_bytes = encode(ResultHeader{}).size() + sizeof(std::uint64_t);

// Payloads start at a multiple of payload_align from the start of their message, and messages start
// at least that aligned (a heap buffer, a lane slot): a vector's doubles can then be copied out
// as doubles (detail::Codec<std::vector>), without zero-filling the vector first.
constexpr std::size_t payload_align = 16;
std::size_t pad_at(std::size_t pos) { return (payload_align - pos % payload_align) % payload_align; }
constexpr char zeros[payload_align] = {};

// Skips the padding before a payload whose header ended at `r`'s position in `message`.
void skip_pad(Reader& r, std::string_view message) { r.take(pad_at(message.size() - r.left())); }

// An ObjectReply's u64 when it is not a size.
constexpr std::uint64_t object_not_held = ~std::uint64_t(0);

// An ObjectRequest's name length; refused past max_object_name, before any of the name is read.
std::uint32_t object_name_length(Reader& r) {
  const auto n = r.pod<std::uint32_t>();
  if (n > max_object_name)
    throw Malformed("fibra: a malformed object request: a name of " + std::to_string(n) + " bytes, over the " +
                    std::to_string(max_object_name) + " a server reads");
  return n;
}

// A u8 that must be 0 or 1.
bool flag_byte(Reader& r, const char* what) {
  const auto v = r.pod<std::uint8_t>();
  if (v > 1) throw Malformed(std::string("fibra: a malformed ") + what + ": a flag of " + std::to_string(v));
  return v == 1;
}

}  // namespace

std::string begin_batch() { return std::string(sizeof(std::uint32_t), '\0'); }

void set_count(std::string& batch, std::uint32_t n) { std::memcpy(batch.data(), &n, sizeof n); }

void append_task(std::string& batch, const TaskHeader& h, std::string_view payload) {
  append_task_head(batch, h, payload.size());
  batch.append(payload);
}

void append_task_head(std::string& batch, const TaskHeader& h, std::uint64_t payload_bytes, std::size_t bodies_before) {
  Writer w(batch);
  put(w, h);
  w.pod(payload_bytes);
  batch.append(zeros, pad_at(bodies_before + batch.size()));
}

std::vector<TaskView> parse_tasks(std::string_view batch) {
  return parsing([&] {
    Reader r(batch);
    const auto n = r.pod<std::uint32_t>();
    std::vector<TaskView> out;
    out.reserve(std::min<std::size_t>(n, batch.size() / result_head_bytes));  // no more fit in its bytes
    for (std::uint32_t i = 0; i < n; ++i) {
      TaskView t;
      get(r, t.header);
      const auto n = r.pod<std::uint64_t>();
      skip_pad(r, batch);
      t.payload = r.take(n);
      out.push_back(std::move(t));
    }
    return out;
  });
}

namespace {

// Bytes as hex digits, for an environment variable (which cannot hold a NUL).
std::string hex_text(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string text;
  text.reserve(2 * bytes.size());
  for (unsigned char c : bytes) {
    text += digits[c >> 4];
    text += digits[c & 15];
  }
  return text;
}

// `what` names it in the Malformed thrown for text that is not hex.
std::string bytes_from_hex(std::string_view text, const char* what) {
  auto nibble = [&](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw Malformed(std::string("fibra: a malformed message: ") + what + " '" + std::string(text) + "' is not hex");
  };
  if (text.size() % 2 != 0)
    throw Malformed(std::string("fibra: a malformed message: ") + what + " of " + std::to_string(text.size()) +
                    " hex digits");
  std::string bytes;
  for (std::size_t i = 0; i < text.size(); i += 2) bytes += char(nibble(text[i]) * 16 + nibble(text[i + 1]));
  return bytes;
}

}  // namespace

std::string policy_text(const detail::RetryPolicy& p) { return hex_text(encode(p)); }

detail::RetryPolicy policy_from_text(std::string_view text) {
  return decode_whole<detail::RetryPolicy>(bytes_from_hex(text, "a pool's default policy"));
}

std::string initializer_text(const Initializer& i) { return hex_text(encode(i)); }

Initializer initializer_from_text(std::string_view text) {
  return decode_whole<Initializer>(bytes_from_hex(text, "a pool's initializer"));
}

std::string routed_request(std::uint64_t route, std::string_view request) {
  std::string m = encode(RequestRoute{route});
  m += request;
  return m;
}

RoutedRequest parse_routed_request(std::string_view message) {
  Reader r(message);
  RoutedRequest out;
  RequestRoute route;
  get(r, route);
  out.route = route.route;
  get(r, out.request);
  return out;
}

std::uint64_t batch_actor(std::string_view batch) {
  return parsing([&] {
    Reader r(batch);
    if (r.pod<std::uint32_t>() == 0) return std::uint64_t(0);
    TaskHeader h;
    get(r, h);
    return h.actor;
  });
}

std::string begin_results(std::int64_t executor_pid) {
  std::string s = begin_batch();
  Writer(s).pod(executor_pid);
  return s;
}

std::uint32_t result_count(std::string_view batch) {
  return parsing([&] { return count_of(batch); });
}

std::size_t open_result(std::string& batch, const ResultHeader& h) {
  const std::size_t at = batch.size();
  Writer w(batch);
  put(w, h);
  w.pod<std::uint64_t>(0);  // the payload's length, written by close_result
  batch.append(zeros, pad_at(batch.size()));
  return at;
}

void close_result(std::string& batch, std::size_t at, const ResultHeader& h) {
  std::string head;
  Writer w(head);
  put(w, h);
  w.pod<std::uint64_t>(batch.size() - at - result_head_bytes - pad_at(at + result_head_bytes));
  std::memcpy(batch.data() + at, head.data(), result_head_bytes);
  set_count(batch, count_of(batch) + 1);
}

void append_result(std::string& batch, const ResultHeader& h, std::string_view payload) {
  const std::size_t at = open_result(batch, h);
  batch.append(payload);
  close_result(batch, at, h);
}

ResultBatch parse_results(std::string_view batch) {
  return parsing([&] {
    Reader r(batch);
    const auto n = r.pod<std::uint32_t>();
    ResultBatch b;
    b.executor_pid = r.pod<std::int64_t>();
    b.results.reserve(std::min<std::size_t>(n, batch.size() / result_head_bytes));
    for (std::uint32_t i = 0; i < n; ++i) {
      ResultView v;
      get(r, v.header);
      const auto n = r.pod<std::uint64_t>();
      skip_pad(r, batch);
      v.payload = r.take(n);
      b.results.push_back(v);
    }
    return b;
  });
}

std::string encode_partial(const std::vector<detail::ItemFailure>& failures, std::string_view results) {
  std::string s;
  Writer w(s);
  w.pod<std::uint32_t>(static_cast<std::uint32_t>(failures.size()));
  for (const auto& f : failures) put(w, f);
  w.raw(results.data(), results.size());
  return s;
}

Partial decode_partial(std::string_view s) {
  return parsing([&] {
    Reader r(s);
    Partial p;
    const auto n = r.pod<std::uint32_t>();
    if (n > r.left()) throw Malformed("fibra: a malformed partial result: " + std::to_string(n) + " failures");
    p.failures.resize(n);
    for (auto& f : p.failures) get(r, f);
    p.results = r.take(r.left());
    return p;
  });
}

std::string encode_object_request(const ObjectRequest& r) {
  std::string s;
  Writer w(s);
  w.pod(static_cast<std::uint32_t>(r.name.size()));
  w.raw(r.name.data(), r.name.size());
  w.pod(r.wait_ms);
  w.pod(static_cast<std::uint8_t>(r.encrypted));
  return s;
}

ObjectRequest decode_object_request(std::string_view bytes) {
  return parsing(
      [&] {
        Reader r(bytes);
        ObjectRequest q;
        q.name = r.take(object_name_length(r));
        q.wait_ms = r.pod<std::uint64_t>();
        q.encrypted = flag_byte(r, "object request");
        if (r.left() != 0)
          throw Malformed("fibra: a malformed object request: " + std::to_string(r.left()) + " bytes after its end");
        return q;
      },
      "object request");
}

std::string encode_object_reply(const ObjectReply& r) {
  std::string s;
  Writer w(s);
  w.pod(r.answer == ObjectAnswer::not_held ? object_not_held : r.size);
  w.pod(static_cast<std::uint8_t>(r.encrypted));
  return s;
}

ObjectReply decode_object_reply(std::string_view bytes) {
  if (bytes.size() != object_reply_bytes)
    throw Malformed("fibra: a malformed object reply: " + std::to_string(bytes.size()) + " bytes, not " +
                    std::to_string(object_reply_bytes));
  Reader r(bytes);
  const auto v = r.pod<std::uint64_t>();
  ObjectReply reply{v == object_not_held ? ObjectAnswer::not_held : ObjectAnswer::held, v == object_not_held ? 0 : v};
  reply.encrypted = flag_byte(r, "object reply");
  return reply;
}

std::string encode_auth_hello(const AuthHello& h) {
  std::string s;
  Writer w(s);
  w.pod(auth_magic);
  w.pod(h.version);
  w.pod(static_cast<std::uint8_t>(h.role));
  w.pod(std::uint8_t(0));
  w.pod(h.pool);
  std::string nonce = h.nonce;
  nonce.resize(auth_nonce_bytes, '\0');
  w.raw(nonce.data(), nonce.size());
  return s;
}

AuthHello decode_auth_hello(std::string_view bytes) {
  if (bytes.size() != auth_hello_bytes)
    throw Malformed("fibra: a malformed handshake: " + std::to_string(bytes.size()) + " bytes, not " +
                    std::to_string(auth_hello_bytes));
  Reader r(bytes);
  if (r.pod<std::uint32_t>() != auth_magic) throw Malformed("fibra: a malformed handshake: not fibra's");
  AuthHello h;
  h.version = r.pod<std::uint16_t>();
  h.role = static_cast<AuthRole>(r.pod<std::uint8_t>());
  r.pod<std::uint8_t>();
  h.pool = r.pod<std::uint64_t>();
  h.nonce = r.take(auth_nonce_bytes);
  return h;
}

std::optional<std::string> frame(std::string_view message, std::size_t most) {
  if (message.size() > most || message.size() > std::numeric_limits<std::uint32_t>::max()) return std::nullopt;
  std::string s;
  s.reserve(frame_head + message.size());
  Writer w(s);
  w.pod(static_cast<std::uint32_t>(message.size()));
  w.raw(message.data(), message.size());
  return s;
}

std::uint32_t frame_length(std::string_view head, std::size_t most) {
  if (head.size() != frame_head)
    throw Malformed("fibra: a malformed frame: a head of " + std::to_string(head.size()) + " bytes, not " +
                    std::to_string(frame_head));
  const auto n = Reader(head).pod<std::uint32_t>();
  if (n > most)
    throw Malformed("fibra: a malformed frame: it announces " + std::to_string(n) + " bytes, over the " +
                    std::to_string(most) + " its reader takes");
  return n;
}

std::string_view object_bytes(std::string_view message, ObjectHead& h) {
  detail::Reader r(message);
  get(r, h);
  if (r.left() != h.size)
    throw Malformed("fibra: a malformed stored object: " + std::to_string(r.left()) + " bytes for " +
                    std::to_string(h.size));
  return r.take(h.size);
}

}  // namespace fibra::wire
