// Typed reads from one TOML table (see toml_reader.hpp).
#include "toml_reader.hpp"

#include <algorithm>
#include <cctype>

namespace fibra::slurm::detail {

std::string where(const std::string& source, const toml::source_region& region) {
  if (region.begin.line == 0) return source + ": ";
  return source + ":" + std::to_string(region.begin.line) + ": ";
}

const char* type_phrase(toml::node_type type) {
  switch (type) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

TableReader::TableReader(const std::string& source, std::string table_name, const toml::table* table)
    : source_(source), table_name_(std::move(table_name)), table_(table) {}

bool TableReader::has(const std::string& key) const { return table_ && table_->contains(key); }

std::string TableReader::where_of(const std::string& key) const {
  const toml::node* n = table_ ? table_->get(key) : nullptr;
  return n ? where(source_, n->source()) : source_ + ": ";
}

const toml::node* TableReader::node(const std::string& key) {
  known_.push_back(key);
  return table_ ? table_->get(key) : nullptr;
}

void TableReader::fail(const std::string& key, const std::string& what) const {
  throw SpecError(where_of(key) + "'" + table_name_ + "." + key + "' " + what);
}

void TableReader::wrong_type(const std::string& key, const toml::node& n, const char* wanted) const {
  fail(key, std::string("must be ") + wanted + ", not " + type_phrase(n.type()));
}

void TableReader::read(const std::string& key, std::string& out) {
  const toml::node* n = node(key);
  if (!n) return;
  if (!n->is_string()) wrong_type(key, *n, "a string");
  out = n->as_string()->get();
  if (out.find('\n') != std::string::npos) fail(key, "must be one line");
}

void TableReader::read(const std::string& key, int& out, int min) {
  const toml::node* n = node(key);
  if (!n) return;
  if (!n->is_integer()) wrong_type(key, *n, "an integer");
  const std::int64_t v = n->as_integer()->get();
  if (v < min) fail(key, "must be at least " + std::to_string(min) + ", not " + std::to_string(v));
  if (v > 1'000'000) fail(key, "must be at most 1000000, not " + std::to_string(v));
  out = static_cast<int>(v);
}

void TableReader::read(const std::string& key, bool& out) {
  const toml::node* n = node(key);
  if (!n) return;
  if (!n->is_boolean()) wrong_type(key, *n, "a boolean (true or false)");
  out = n->as_boolean()->get();
}

void TableReader::read(const std::string& key, std::vector<std::string>& out) {
  const toml::node* n = node(key);
  if (!n) return;
  if (!n->is_array()) wrong_type(key, *n, "an array of strings");
  for (const toml::node& item : *n->as_array()) {
    if (!item.is_string())
      throw SpecError(where(source_, item.source()) + "'" + table_name_ + "." + key +
                      "' must be an array of strings, but holds " + type_phrase(item.type()));
    const std::string& s = item.as_string()->get();
    if (s.find('\n') != std::string::npos)
      throw SpecError(where(source_, item.source()) + "'" + table_name_ + "." + key +
                      "' entries must be one line each");
    out.push_back(s);
  }
}

void TableReader::read(const std::string& key, std::map<std::string, std::string>& out) {
  const toml::node* n = node(key);
  if (!n) return;
  if (!n->is_table()) wrong_type(key, *n, "a table of strings, e.g. { OMP_NUM_THREADS = \"1\" }");
  for (auto&& [k, v] : *n->as_table()) {
    const std::string name(k.str());
    const bool ident = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                       std::all_of(name.begin(), name.end(),
                                   [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
    if (!ident)
      throw SpecError(where(source_, k.source()) + "'" + table_name_ + "." + key + "' has '" + name +
                      "', which is not a shell variable name");
    if (!v.is_string())
      throw SpecError(where(source_, v.source()) + "'" + table_name_ + "." + key + "." + name +
                      "' must be a string, not " + type_phrase(v.type()));
    out[name] = v.as_string()->get();
  }
}

void TableReader::read_time(const std::string& key, std::string& text, long& seconds) {
  const toml::node* n = node(key);
  if (!n) return;
  if (n->is_integer()) {
    const std::int64_t minutes = n->as_integer()->get();
    if (minutes < 1) fail(key, "must be at least 1 minute, not " + std::to_string(minutes));
    text = std::to_string(minutes);
    seconds = static_cast<long>(minutes) * 60;
    return;
  }
  if (!n->is_string()) wrong_type(key, *n, "a string like \"1:30:00\" or an integer of minutes");
  text = n->as_string()->get();
  if (text == "UNLIMITED" || text == "INFINITE") {  // Slurm's own words for the partition's maximum
    seconds = 0;
    return;
  }
  std::optional<long> s = parse_time_limit(text);
  if (!s)
    fail(key, "is \"" + text +
                  "\", which is not a Slurm time; use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED");
  if (*s < 1) fail(key, "must be more than 0 seconds");
  seconds = *s;
}

void TableReader::finish() const {
  if (!table_) return;
  for (auto&& [k, v] : *table_) {
    const std::string name(k.str());
    if (std::find(known_.begin(), known_.end(), name) != known_.end()) continue;
    std::string list;
    for (const std::string& known : known_) list += (list.empty() ? "" : ", ") + known;
    throw SpecError(where(source_, k.source()) + "unknown key '" + table_name_ + "." + name + "'; [" + table_name_ +
                    "] takes " + list);
  }
}

}  // namespace fibra::slurm::detail
