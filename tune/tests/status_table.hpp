// tune/tests/status_table.hpp: the cells of a status table's rows (Experiment::status_table), for
// the tests that read one: each "| a | b |" line's cells, trimmed, the header's first.
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace fibra::tune::test {

inline std::vector<std::vector<std::string>> table_rows(const std::string& table) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| ", 0) != 0) continue;
    std::vector<std::string> cells;
    std::istringstream parts(line.substr(1));
    for (std::string cell; std::getline(parts, cell, '|');) {
      const auto a = cell.find_first_not_of(' '), b = cell.find_last_not_of(' ');
      cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
    }
    rows.push_back(cells);
  }
  return rows;
}

}  // namespace fibra::tune::test
