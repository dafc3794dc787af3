// tune/src/space.cpp: values, configurations, domains and seeded sampling of a search space.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "fibra/error.hpp"
#include "fibra/tune.hpp"
#include "internal.hpp"

namespace fibra::tune {

double Value::number() const {
  if (const auto* d = std::get_if<double>(&v_)) return *d;
  if (const auto* i = std::get_if<std::int64_t>(&v_)) return double(*i);
  throw ConfigError("fibra::tune: the value '" + text() + "' is a string, not a number");
}

std::int64_t Value::integer() const {
  if (const auto* i = std::get_if<std::int64_t>(&v_)) return *i;
  if (const auto* d = std::get_if<double>(&v_)) {
    if (std::nearbyint(*d) == *d && std::fabs(*d) < 9.2e18) return std::int64_t(*d);
    throw ConfigError("fibra::tune: the value " + str() + " is not an integer");
  }
  throw ConfigError("fibra::tune: the value '" + text() + "' is a string, not an integer");
}

const std::string& Value::text() const {
  if (const auto* s = std::get_if<std::string>(&v_)) return *s;
  throw ConfigError("fibra::tune: the value " + str() + " is a number, not a string");
}

std::string Value::str() const {
  if (const auto* s = std::get_if<std::string>(&v_)) return *s;
  if (const auto* i = std::get_if<std::int64_t>(&v_)) return std::to_string(*i);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", std::get<double>(v_));
  return buf;
}

const Value& Config::at(const std::string& key) const {
  if (auto it = values_.find(key); it != values_.end()) return it->second;
  std::string keys;
  for (const auto& [k, v] : values_) keys += (keys.empty() ? "" : ", ") + k;
  throw ConfigError("fibra::tune: the configuration has no key '" + key +
                    "' (it has: " + (keys.empty() ? std::string("none") : keys) + "); add it to the search space");
}

Config Config::sub(const std::string& prefix) const {
  Config out;
  const std::string p = prefix + ".";
  for (const auto& [k, v] : values_)
    if (k.rfind(p, 0) == 0) out.values_.emplace(k.substr(p.size()), v);
  return out;
}

std::string Config::str() const {
  std::string s;
  for (const auto& [k, v] : values_) s += (s.empty() ? "" : ", ") + k + "=" + v.str();
  return s;
}

namespace {
void need(bool ok, const std::string& what) {
  if (!ok) throw ConfigError("fibra::tune: " + what);
}
}  // namespace

namespace {
Domain listed(Domain::Kind kind, std::vector<Value> values, const char* name) {
  need(!values.empty(), std::string(name) + "() needs at least one value");
  Domain d;
  d.kind = kind;
  d.values = std::move(values);
  return d;
}
}  // namespace

Domain grid(std::vector<Value> values) { return listed(Domain::Kind::grid, std::move(values), "grid"); }

Domain choice(std::vector<Value> values) { return listed(Domain::Kind::choice, std::move(values), "choice"); }

Domain uniform(double low, double high) {
  need(low < high, "uniform(low, high) needs low < high");
  Domain d;
  d.kind = Domain::Kind::uniform;
  d.low = low;
  d.high = high;
  return d;
}

Domain loguniform(double low, double high) {
  need(low > 0 && low < high, "loguniform(low, high) needs 0 < low < high");
  Domain d = uniform(low, high);
  d.kind = Domain::Kind::loguniform;
  return d;
}

Domain randint(std::int64_t low, std::int64_t high) {
  need(low < high, "randint(low, high) draws from [low, high) and needs low < high");
  Domain d = uniform(double(low), double(high));
  d.kind = Domain::Kind::randint;
  return d;
}

Space::Space(std::initializer_list<std::pair<std::string, Domain>> entries) {
  for (const auto& [k, d] : entries) add(k, d);
}

Space& Space::add(const std::string& key, Domain d) {
  need(!key.empty() && key.find_first_of(",/") == std::string::npos,
       "a key of the search space must be non-empty and hold no ',' or '/': '" + key + "'");
  for (const auto& [k, v] : entries_) need(k != key, "the search space has the key '" + key + "' twice");
  entries_.emplace_back(key, std::move(d));
  return *this;
}

std::size_t Space::grid_size() const {
  std::size_t n = 1;
  for (const auto& [k, d] : entries_)
    if (d.kind == Domain::Kind::grid) n *= d.values.size();
  return n;
}

namespace detail {

std::uint64_t splitmix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double unit(std::uint64_t& state) { return double(splitmix(state) >> 11) * 0x1.0p-53; }

Value draw(const Domain& d, std::uint64_t& state) {
  switch (d.kind) {
    case Domain::Kind::constant:
    case Domain::Kind::grid: return d.values.front();
    case Domain::Kind::choice: return d.values[splitmix(state) % d.values.size()];
    case Domain::Kind::uniform: return d.low + (d.high - d.low) * unit(state);
    case Domain::Kind::loguniform:
      return std::exp(std::log(d.low) + (std::log(d.high) - std::log(d.low)) * unit(state));
    case Domain::Kind::randint:
      return std::int64_t(d.low) + std::int64_t(splitmix(state) % std::uint64_t(d.high - d.low));
  }
  return d.values.front();
}

}  // namespace detail

Config Space::sample(std::uint64_t seed, std::size_t index) const {
  Config c;
  std::size_t rest = index % grid_size();  // the grid point: the first grid key varies slowest
  std::size_t stride = grid_size();
  std::uint64_t state = seed * 0x2545f4914f6cdd1dULL ^ (std::uint64_t(index) + 1) * 0x9e3779b97f4a7c15ULL;
  for (const auto& [k, d] : entries_) {
    if (d.kind == Domain::Kind::grid) {
      stride /= d.values.size();
      c.set(k, d.values[rest / stride]);
      rest %= stride;
    } else {
      c.set(k, detail::draw(d, state));
    }
  }
  return c;
}

const char* to_string(TrialStatus s) noexcept {
  switch (s) {
    case TrialStatus::pending: return "pending";
    case TrialStatus::running: return "running";
    case TrialStatus::done: return "done";
    case TrialStatus::stopped: return "stopped";
    case TrialStatus::error: return "error";
  }
  return "?";
}

namespace detail {

// A configuration as bytes: per key, its length and bytes, a tag, and the value.
namespace {
void put_u64(std::string& out, std::uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
std::uint64_t get_u64(std::string_view& in) {
  if (in.size() < 8) throw Error("fibra::tune: a configuration's bytes are cut short");
  std::uint64_t v;
  std::memcpy(&v, in.data(), 8);
  in.remove_prefix(8);
  return v;
}
void put_str(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}
std::string get_str(std::string_view& in) {
  const std::uint64_t n = get_u64(in);
  if (in.size() < n) throw Error("fibra::tune: a configuration's bytes are cut short");
  std::string s(in.substr(0, n));
  in.remove_prefix(n);
  return s;
}
}  // namespace

std::string encode_config(const Config& c) {
  std::string out;
  put_u64(out, c.values().size());
  for (const auto& [k, v] : c.values()) {
    put_str(out, k);
    if (v.is_double()) {
      out += 'd';
      const double d = v.number();
      out.append(reinterpret_cast<const char*>(&d), 8);
    } else if (v.is_integer()) {
      out += 'i';
      put_u64(out, std::uint64_t(v.integer()));
    } else {
      out += 's';
      put_str(out, v.text());
    }
  }
  return out;
}

Config decode_config(std::string_view in) {
  Config c;
  const std::uint64_t n = get_u64(in);
  for (std::uint64_t i = 0; i < n; ++i) {
    std::string k = get_str(in);
    if (in.empty()) throw Error("fibra::tune: a configuration's bytes are cut short");
    const char tag = in.front();
    in.remove_prefix(1);
    if (tag == 'd') {
      const std::uint64_t bits = get_u64(in);
      double d;
      std::memcpy(&d, &bits, 8);
      c.set(k, d);
    } else if (tag == 'i') {
      c.set(k, std::int64_t(get_u64(in)));
    } else {
      c.set(k, get_str(in));
    }
  }
  return c;
}

}  // namespace detail
}  // namespace fibra::tune
