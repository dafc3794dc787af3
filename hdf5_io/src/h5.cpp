// hdf5_io/src/h5.cpp: checked HDF5 C calls and RAII owners of hid_t.
#include "h5.hpp"

#include <cstdio>

#include "fibra/hdf5_io/error.hpp"

namespace fibra::hdf5_io {

bool hdf5_is_threadsafe() noexcept {
  hbool_t ts = 0;
  return H5is_library_threadsafe(&ts) >= 0 && ts;
}

}  // namespace fibra::hdf5_io

namespace fibra::hdf5_io::h5 {

// HDF5's automatic error printing is set per thread in a thread-safe build (Debian's is), so each
// thread that calls HDF5 silences it once.
void silence_errors() {
  thread_local const bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

namespace {
herr_t append_frame(unsigned n, const H5E_error2_t* e, void* out) {
  auto& text = *static_cast<std::string*>(out);
  if (n > 0) text += "; ";
  text += e->func_name ? e->func_name : "?";
  text += "(): ";
  text += e->desc && *e->desc ? e->desc : "error";
  char minor[128] = {};
  if (H5Eget_msg(e->min_num, nullptr, minor, sizeof minor) > 0) {
    text += " (";
    text += minor;
    text += ")";
  }
  return 0;
}
}  // namespace

std::string error_stack() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, append_frame, &text);
  return text.empty() ? "no HDF5 error stack" : text;
}

void fail(const char* what) { throw Hdf5Error(std::string("fibra: HDF5 call ") + what + " failed: " + error_stack()); }

void Handle::close() {
  if (id_ < 0) return;
  hid_t id = std::exchange(id_, H5I_INVALID_HID);
  check(closer_(id), "close");
}

void Handle::reset() noexcept {
  if (id_ < 0) return;
  if (closer_(std::exchange(id_, H5I_INVALID_HID)) < 0)
    std::fprintf(stderr, "fibra: closing an HDF5 handle failed: %s\n", error_stack().c_str());
}

Handle file_create(const std::string& path) {
  return {check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "H5Fcreate"), H5Fclose};
}

Handle file_open_read(const std::string& path) {
  return {check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "H5Fopen"), H5Fclose};
}

Handle dataspace(const std::vector<hsize_t>& dims) {
  return {check(H5Screate_simple(int(dims.size()), dims.data(), nullptr), "H5Screate_simple"), H5Sclose};
}

Handle scalar_space() { return {check(H5Screate(H5S_SCALAR), "H5Screate"), H5Sclose}; }

Handle dataset_create(hid_t loc, const char* name, hid_t file_type, hid_t space) {
  return {check(H5Dcreate2(loc, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "H5Dcreate2"),
          H5Dclose};
}

Handle dataset_open(hid_t loc, const char* name) {
  return {check(H5Dopen2(loc, name, H5P_DEFAULT), "H5Dopen2"), H5Dclose};
}

Handle dataset_space(hid_t dataset) { return {check(H5Dget_space(dataset), "H5Dget_space"), H5Sclose}; }

bool has_attribute(hid_t loc, const char* name) { return check(H5Aexists(loc, name), "H5Aexists") > 0; }

namespace {
Handle utf8_string_type() {
  Handle t{check(H5Tcopy(H5T_C_S1), "H5Tcopy"), H5Tclose};
  check(H5Tset_size(t.get(), H5T_VARIABLE), "H5Tset_size");
  check(H5Tset_cset(t.get(), H5T_CSET_UTF8), "H5Tset_cset");
  return t;
}

Handle attribute_create(hid_t loc, const char* name, hid_t type) {
  Handle space = scalar_space();
  return {check(H5Acreate2(loc, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT), "H5Acreate2"), H5Aclose};
}

Handle attribute_open(hid_t loc, const char* name) {
  return {check(H5Aopen(loc, name, H5P_DEFAULT), "H5Aopen"), H5Aclose};
}
}  // namespace

void write_attribute(hid_t loc, const char* name, const std::string& value) {
  Handle type = utf8_string_type();
  Handle attr = attribute_create(loc, name, type.get());
  const char* p = value.c_str();
  check(H5Awrite(attr.get(), type.get(), &p), "H5Awrite");
}

void write_attribute(hid_t loc, const char* name, std::uint64_t value) {
  Handle attr = attribute_create(loc, name, H5T_STD_U64LE);
  check(H5Awrite(attr.get(), H5T_NATIVE_UINT64, &value), "H5Awrite");
}

std::string read_string_attribute(hid_t loc, const char* name) {
  Handle attr = attribute_open(loc, name);
  Handle file_type{check(H5Aget_type(attr.get()), "H5Aget_type"), H5Tclose};
  if (H5Tget_class(file_type.get()) != H5T_STRING)
    throw Hdf5Error(std::string("fibra: attribute '") + name + "' is not a string");
  if (check(H5Tis_variable_str(file_type.get()), "H5Tis_variable_str") > 0) {
    Handle type = utf8_string_type();
    char* p = nullptr;
    check(H5Aread(attr.get(), type.get(), &p), "H5Aread");
    std::string value = p ? p : "";
    H5free_memory(p);
    return value;
  }
  std::string value(H5Tget_size(file_type.get()), '\0');  // a fixed-length string (another writer)
  check(H5Aread(attr.get(), file_type.get(), value.data()), "H5Aread");
  return value.substr(0, value.find('\0'));
}

std::uint64_t read_uint_attribute(hid_t loc, const char* name) {
  Handle attr = attribute_open(loc, name);
  std::uint64_t value = 0;
  check(H5Aread(attr.get(), H5T_NATIVE_UINT64, &value), "H5Aread");
  return value;
}

std::vector<hsize_t> dataset_dims(hid_t dataset) {
  Handle space = dataset_space(dataset);
  int rank = check(H5Sget_simple_extent_ndims(space.get()), "H5Sget_simple_extent_ndims");
  std::vector<hsize_t> dims(rank);
  check(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "H5Sget_simple_extent_dims");
  return dims;
}

void write_all(hid_t dataset, hid_t mem_type, const void* data) {
  check(H5Dwrite(dataset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "H5Dwrite");
}

void read_all(hid_t dataset, hid_t mem_type, void* data) {
  check(H5Dread(dataset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "H5Dread");
}

}  // namespace fibra::hdf5_io::h5
