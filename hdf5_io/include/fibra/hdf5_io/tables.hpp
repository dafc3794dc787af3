// fibra/hdf5_io/tables.hpp: a small file of named tables (a dataset per column), string attributes
// and opaque blobs, written whole and atomically, and read back.
//
// A table is an HDF5 group with one 1-D dataset per column (float64, int64 or UTF-8 strings) and
// an attribute `columns` listing them in order, so h5py and pandas read it without fibra:
//
//   with h5py.File("experiment.h5") as f:
//       trials = pandas.DataFrame({c: f["trials"][c][()] for c in f["trials"].attrs["columns"].split(",")})
//
// fibra::tune keeps an experiment's state in one such file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace fibra::hdf5_io {

/// @brief One column of a table: numbers or text, one value per row.
struct Column {
  std::string name;  ///< any non-empty name ('%', '/' and ',' are written %25, %2F and %2C in the file)
  std::variant<std::vector<double>, std::vector<std::int64_t>, std::vector<std::string>> values;
  /// @brief How many rows it holds.
  std::size_t rows() const;
};

/// @brief A table: columns of equal length.
struct Table {
  std::string name;  ///< the group's name
  std::vector<Column> columns;
  /// @brief The column called `name`, or nullptr.
  const Column* find(const std::string& name) const;
};

/// @brief What one file holds.
struct TableFile {
  std::map<std::string, std::string> attributes;  ///< string attributes of the file's root
  std::vector<Table> tables;
  /// Opaque bytes, group name -> (dataset name -> bytes), each a 1-D uint8 dataset.
  std::map<std::string, std::map<std::string, std::string>> blobs;
  /// @brief The table called `name`, or nullptr.
  const Table* find(const std::string& name) const;
};

/// @brief Writes `file` to `path`: to `path` + ".tmp" first, synced, then renamed over `path`, so
///        a reader (or a process killed at any moment) sees the old file or the new one whole.
/// @throws Hdf5Error from HDF5; ConfigError for columns of unequal length or a bad name.
void write_table_file(const std::string& path, const TableFile& file);

/// @brief Reads a file written by write_table_file.
/// @throws Hdf5Error if it cannot be read or is not such a file.
TableFile read_table_file(const std::string& path);

}  // namespace fibra::hdf5_io
