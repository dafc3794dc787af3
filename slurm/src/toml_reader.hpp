// Typed reads from one TOML table, with errors that name the key and its line.
#pragma once

#include <fibra/slurm/spec.hpp>

#include <toml++/toml.h>

#include <map>
#include <string>
#include <vector>

namespace fibra::slurm::detail {

/// `file:line: ` for a node or key; `file: ` when toml++ knows no position.
std::string where(const std::string& source, const toml::source_region& region);

/// "a string", "an integer", ... for error messages.
const char* type_phrase(toml::node_type type);

/// Reads the keys of one table (`[job]`, ...). Each read checks the type; `finish()` rejects keys
/// that were never read, so a misspelt key is an error rather than silently ignored.
class TableReader {
 public:
  TableReader(const std::string& source, std::string table_name, const toml::table* table);

  bool has(const std::string& key) const;
  /// Line prefix of a key's value, for errors found after reading.
  std::string where_of(const std::string& key) const;

  void read(const std::string& key, std::string& out);
  void read(const std::string& key, int& out, int min);
  void read(const std::string& key, bool& out);
  void read(const std::string& key, std::vector<std::string>& out);
  void read(const std::string& key, std::map<std::string, std::string>& out);
  /// A Slurm time limit: a string in one of Slurm's formats, or an integer of minutes.
  void read_time(const std::string& key, std::string& text, long& seconds);

  /// Throws SpecError for the first key (in file order) that no read asked for.
  void finish() const;

  /// Throws SpecError "`file:line: 'table.key' <what>`".
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

 private:
  const toml::node* node(const std::string& key);
  [[noreturn]] void wrong_type(const std::string& key, const toml::node& n, const char* wanted) const;

  const std::string& source_;
  std::string table_name_;
  const toml::table* table_;
  std::vector<std::string> known_;
};

}  // namespace fibra::slurm::detail
