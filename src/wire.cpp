#include "wire.hpp"

namespace fibra::wire {

using detail::Reader;
using detail::Writer;

std::string encode(const Hello& h) {
  std::string s;
  Writer w(s);
  w.pod(h.fingerprint);
  w.pod(h.functions);
  w.pod(h.pid);
  detail::encode(w, h.host);
  return s;
}

Hello decode_hello(std::string_view s) {
  Reader r(s);
  Hello h;
  h.fingerprint = r.pod<std::uint64_t>();
  h.functions = r.pod<std::uint64_t>();
  h.pid = r.pod<std::int64_t>();
  detail::decode(r, h.host);
  return h;
}

std::string begin_batch() { return std::string(sizeof(std::uint32_t), '\0'); }

void set_count(std::string& batch, std::uint32_t n) { std::memcpy(batch.data(), &n, sizeof n); }

void append_task(std::string& batch, const TaskHeader& h, std::string_view payload) {
  append_task_head(batch, h, payload.size());
  batch.append(payload);
}

void append_task_head(std::string& batch, const TaskHeader& h, std::uint64_t payload_bytes) {
  Writer w(batch);
  w.pod(h.chunk);
  w.pod(h.attempt);
  w.pod(h.fn);
  w.pod(h.mode);
  w.pod(h.first);
  w.pod(h.count);
  w.pod(h.timeout_ms);
  w.pod<std::uint8_t>(h.keep_going ? 1 : 0);
  w.pod<std::uint32_t>(static_cast<std::uint32_t>(h.skip.size()));
  for (auto k : h.skip) w.pod(k);
  w.pod<std::uint64_t>(payload_bytes);
}

std::vector<TaskView> parse_tasks(std::string_view batch) {
  Reader r(batch);
  auto n = r.pod<std::uint32_t>();
  std::vector<TaskView> out;
  out.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    TaskView t;
    t.header.chunk = r.pod<std::uint64_t>();
    t.header.attempt = r.pod<std::uint32_t>();
    t.header.fn = r.pod<std::uint64_t>();
    t.header.mode = r.pod<detail::CallMode>();
    t.header.first = r.pod<std::uint64_t>();
    t.header.count = r.pod<std::uint32_t>();
    t.header.timeout_ms = r.pod<std::uint32_t>();
    t.header.keep_going = r.pod<std::uint8_t>() != 0;
    t.header.skip.resize(r.pod<std::uint32_t>());
    for (auto& k : t.header.skip) k = r.pod<std::uint32_t>();
    t.payload = r.take(r.pod<std::uint64_t>());
    out.push_back(t);
  }
  return out;
}

std::string begin_results(std::int64_t executor_pid) {
  std::string s = begin_batch();
  Writer(s).pod(executor_pid);
  return s;
}

namespace {
constexpr std::size_t result_header_bytes = 8 + 4 + 1 + 8 + 8;

void put_result_header(char* p, const ResultHeader& h, std::uint64_t payload_bytes) {
  std::string s;
  Writer w(s);
  w.pod(h.chunk);
  w.pod(h.attempt);
  w.pod(h.status);
  w.pod(h.run_ns);
  w.pod(payload_bytes);
  std::memcpy(p, s.data(), result_header_bytes);
}
}  // namespace

std::size_t open_result(std::string& batch, const ResultHeader& h) {
  const std::size_t at = batch.size();
  batch.resize(at + result_header_bytes);
  put_result_header(batch.data() + at, h, 0);
  return at;
}

void close_result(std::string& batch, std::size_t at, const ResultHeader& h) {
  put_result_header(batch.data() + at, h, batch.size() - at - result_header_bytes);
  std::uint32_t n;
  std::memcpy(&n, batch.data(), sizeof n);
  set_count(batch, n + 1);
}

void append_result(std::string& batch, const ResultHeader& h, std::string_view payload) {
  const std::size_t at = open_result(batch, h);
  batch.append(payload);
  close_result(batch, at, h);
}

ResultBatch parse_results(std::string_view batch) {
  Reader r(batch);
  auto n = r.pod<std::uint32_t>();
  ResultBatch b;
  b.executor_pid = r.pod<std::int64_t>();
  b.results.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    ResultView v;
    v.header.chunk = r.pod<std::uint64_t>();
    v.header.attempt = r.pod<std::uint32_t>();
    v.header.status = r.pod<Status>();
    v.header.run_ns = r.pod<std::uint64_t>();
    v.payload = r.take(r.pod<std::uint64_t>());
    b.results.push_back(v);
  }
  return b;
}

std::string encode_partial(const std::vector<detail::ItemFailure>& failures, std::string_view results) {
  std::string s;
  Writer w(s);
  w.pod<std::uint32_t>(static_cast<std::uint32_t>(failures.size()));
  for (const auto& f : failures) {
    w.pod(f.offset);
    detail::encode(w, f.type);
    detail::encode(w, f.message);
  }
  w.raw(results.data(), results.size());
  return s;
}

Partial decode_partial(std::string_view s) {
  Reader r(s);
  Partial p;
  p.failures.resize(r.pod<std::uint32_t>());
  for (auto& f : p.failures) {
    f.offset = r.pod<std::uint32_t>();
    detail::decode(r, f.type);
    detail::decode(r, f.message);
  }
  p.results = r.take(r.left());
  return p;
}

std::string encode_failure(const detail::ItemFailure& f) {
  std::string s;
  Writer w(s);
  w.pod(f.offset);
  detail::encode(w, f.type);
  detail::encode(w, f.message);
  return s;
}

detail::ItemFailure decode_failure(std::string_view s) {
  Reader r(s);
  detail::ItemFailure f;
  f.offset = r.pod<std::uint32_t>();
  detail::decode(r, f.type);
  detail::decode(r, f.message);
  return f;
}

}  // namespace fibra::wire
