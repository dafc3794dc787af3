// fibra/hdf5_io/tables.hpp: a small file of named tables (a dataset per column), string attributes,
// arrays of any shape and opaque blobs, written whole and atomically, and read back.
//
// A table is an HDF5 group with one 1-D dataset per column (float64, int64 or UTF-8 strings) and
// an attribute `columns` listing them in order, so h5py and pandas read it without fibra:
//
//   with h5py.File("experiment.h5") as f:
//       trials = pandas.DataFrame({c: f["trials"][c][()] for c in f["trials"].attrs["columns"].split(",")})
//
// An array is a dataset of its own with its shape (float32, float64 or int64), in a group whose
// attribute `arrays` lists them in order: f["learner"]["actor.0.weight"][()] is a 64 x 4 matrix.
//
// fibra::tune keeps an experiment's state in one such file, fibra::rl a training run's.
#pragma once

#include <fibra/hdf5_io/error.hpp>

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

/// @brief An array of numbers of any shape (the weights of a layer, a counter), a dataset of its own.
struct Array {
  std::string name;                  ///< any non-empty name (written as a column's is)
  std::vector<std::uint64_t> shape;  ///< row-major; {} for a scalar
  std::variant<std::vector<float>, std::vector<double>, std::vector<std::int64_t>> values;  ///< product of shape
  /// @brief How many values it holds.
  std::size_t size() const;
};

/// @brief What one file holds.
struct TableFile {
  std::map<std::string, std::string> attributes;  ///< string attributes of the file's root
  std::vector<Table> tables;
  /// Opaque bytes, group name -> (dataset name -> bytes), each a 1-D uint8 dataset.
  std::map<std::string, std::map<std::string, std::string>> blobs;
  /// Arrays, group name -> its arrays in order.
  std::map<std::string, std::vector<Array>> arrays;
  /// @brief The table called `name`, or nullptr.
  const Table* find(const std::string& name) const;
  /// @brief The array `name` of group `group`, or nullptr.
  const Array* find_array(const std::string& group, const std::string& name) const;
};

/// @brief Writes `file` to `path`: to `path` + ".tmp" first, synced, then renamed over `path`, so
///        a reader (or a process killed at any moment) sees the old file or the new one whole.
/// @throws Hdf5Error from HDF5; ConfigError for columns of unequal length, an array whose values
///         are not as many as its shape says, or a bad name.
void write_table_file(const std::string& path, const TableFile& file);

/// @brief Reads a file written by write_table_file.
/// @throws Hdf5Error if it cannot be read or is not such a file.
TableFile read_table_file(const std::string& path);

}  // namespace fibra::hdf5_io
