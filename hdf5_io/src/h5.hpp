// hdf5_io/src/h5.hpp: checked HDF5 C calls and RAII owners of hid_t (internal).
//
// Every call goes through `check`, which turns a negative return into fibra::Hdf5Error carrying
// HDF5's own error stack; HDF5's automatic printing to stderr is switched off once.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fibra::hdf5_io::h5 {

/// Switches off HDF5's automatic error printing (idempotent, cheap after the first call).
void silence_errors();

/// The current HDF5 error stack as text, innermost call last, e.g.
/// "H5Fopen(): unable to open file; H5F_open(): file signature not found".
std::string error_stack();

/// Throws Hdf5Error("HDF5 call `what` failed: <stack>").
[[noreturn]] void fail(const char* what);

/// Throws Hdf5Error("HDF5 call `what` failed: <stack>") when `rc` is negative; returns `rc` otherwise.
template <class Rc>
Rc check(Rc rc, const char* what) {
  if (rc < 0) fail(what);
  return rc;
}

/// A move-only owner of one hid_t, closed with the function that fits its kind.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) noexcept : id_(id), closer_(closer) {}
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  hid_t get() const noexcept { return id_; }
  /// Closes now and reports a failure (a destructor cannot).
  void close();

 private:
  void reset() noexcept;
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Checked openers: each returns an owning Handle or throws Hdf5Error.
Handle file_create(const std::string& path);
Handle file_open_read(const std::string& path);
Handle dataspace(const std::vector<hsize_t>& dims);
Handle scalar_space();
Handle dataset_create(hid_t loc, const char* name, hid_t file_type, hid_t space);
Handle dataset_open(hid_t loc, const char* name);
Handle dataset_space(hid_t dataset);

/// Whether `loc` has an attribute called `name`.
bool has_attribute(hid_t loc, const char* name);

// Scalar attributes: UTF-8 variable-length strings and little-endian uint64 in the file.
void write_attribute(hid_t loc, const char* name, const std::string& value);
void write_attribute(hid_t loc, const char* name, std::uint64_t value);
std::string read_string_attribute(hid_t loc, const char* name);
std::uint64_t read_uint_attribute(hid_t loc, const char* name);

/// Extents of a dataset.
std::vector<hsize_t> dataset_dims(hid_t dataset);

/// Writes / reads a whole dataset from / into `data` in memory type `mem_type`.
void write_all(hid_t dataset, hid_t mem_type, const void* data);
void read_all(hid_t dataset, hid_t mem_type, void* data);

}  // namespace fibra::hdf5_io::h5
