// hdf5_io/src/tables.cpp: a file of tables, attributes, arrays and blobs, written atomically.
#include "fibra/hdf5_io/tables.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "fibra/error.hpp"
#include "h5.hpp"

namespace fibra::hdf5_io {

std::size_t Column::rows() const {
  return std::visit([](const auto& v) { return v.size(); }, values);
}

const Column* Table::find(const std::string& n) const {
  for (const auto& c : columns)
    if (c.name == n) return &c;
  return nullptr;
}

std::size_t Array::size() const {
  return std::visit([](const auto& v) { return v.size(); }, values);
}

const Array* TableFile::find_array(const std::string& group, const std::string& n) const {
  const auto g = arrays.find(group);
  if (g == arrays.end()) return nullptr;
  for (const auto& a : g->second)
    if (a.name == n) return &a;
  return nullptr;
}

const Table* TableFile::find(const std::string& n) const {
  for (const auto& t : tables)
    if (t.name == n) return &t;
  return nullptr;
}

namespace {

using h5::check;
using h5::Handle;

Handle group_create(hid_t loc, const std::string& name) {
  return {check(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "H5Gcreate2"), H5Gclose};
}

Handle group_open(hid_t loc, const std::string& name) {
  return {check(H5Gopen2(loc, name.c_str(), H5P_DEFAULT), "H5Gopen2"), H5Gclose};
}

Handle string_type() {
  Handle t{check(H5Tcopy(H5T_C_S1), "H5Tcopy"), H5Tclose};
  check(H5Tset_size(t.get(), H5T_VARIABLE), "H5Tset_size");
  check(H5Tset_cset(t.get(), H5T_CSET_UTF8), "H5Tset_cset");
  return t;
}

void check_name(const std::string& name, const char* what) {
  if (name.empty() || name.find_first_of(",/") != std::string::npos || name == "." || name == "..")
    throw ConfigError("fibra: cannot write " + std::string(what) + " '" + name +
                      "' to an HDF5 table file: a name must be non-empty and hold no ',' or '/'");
}

// A column's dataset name: its name with '%', '/' and ',' written as %25, %2F and %2C (HDF5 names
// cannot hold '/', and ',' separates the `columns` attribute), so any metric name can be a column
// ("train/loss" is the dataset "train%2Floss"); read_table_file decodes it.
std::string encode_name(const std::string& name) {
  if (name.empty()) return "%00";  // HDF5 refuses an empty name, and "." names the group itself
  if (name == ".") return "%2E";
  std::string out;
  for (char ch : name) {
    if (ch == '%')
      out += "%25";
    else if (ch == '/')
      out += "%2F";
    else if (ch == ',')
      out += "%2C";
    else
      out += ch;
  }
  return out;
}

std::string decode_name(const std::string& name) {
  if (name == "%00") return "";
  if (name == "%2E") return ".";
  std::string out;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '%' && i + 2 < name.size()) {
      const std::string code = name.substr(i + 1, 2);
      if (code == "25" || code == "2F" || code == "2C") {
        out += code == "25" ? '%' : code == "2F" ? '/' : ',';
        i += 2;
        continue;
      }
    }
    out += name[i];
  }
  return out;
}

void write_column(hid_t group, const Column& c) {
  const hsize_t n = c.rows();
  const std::string dataset = encode_name(c.name);
  Handle space = h5::dataspace({n});
  if (const auto* d = std::get_if<std::vector<double>>(&c.values)) {
    Handle ds = h5::dataset_create(group, dataset.c_str(), H5T_IEEE_F64LE, space.get());
    if (n) h5::write_all(ds.get(), H5T_NATIVE_DOUBLE, d->data());
  } else if (const auto* i = std::get_if<std::vector<std::int64_t>>(&c.values)) {
    Handle ds = h5::dataset_create(group, dataset.c_str(), H5T_STD_I64LE, space.get());
    if (n) h5::write_all(ds.get(), H5T_NATIVE_INT64, i->data());
  } else {
    const auto& s = std::get<std::vector<std::string>>(c.values);
    Handle type = string_type();
    Handle ds = h5::dataset_create(group, dataset.c_str(), type.get(), space.get());
    std::vector<const char*> p(n);
    for (hsize_t k = 0; k < n; ++k) p[k] = s[k].c_str();
    if (n) h5::write_all(ds.get(), type.get(), p.data());
  }
}

void write_table(hid_t file, const Table& t) {
  check_name(t.name, "table");
  Handle g = group_create(file, t.name);
  std::string names;
  for (const auto& c : t.columns) {
    if (c.rows() != t.columns.front().rows())
      throw ConfigError("fibra: table '" + t.name + "': column '" + c.name + "' has " + std::to_string(c.rows()) +
                        " rows, column '" + t.columns.front().name + "' " + std::to_string(t.columns.front().rows()) +
                        "; every column needs as many");
    write_column(g.get(), c);
    names += (names.empty() ? "" : ",") + encode_name(c.name);
  }
  h5::write_attribute(g.get(), "columns", names);
}

void write_blobs(hid_t file, const std::string& name, const std::map<std::string, std::string>& blobs) {
  check_name(name, "blob group");
  Handle g = group_create(file, name);
  h5::write_attribute(g.get(), "blobs", std::uint64_t(blobs.size()));
  for (const auto& [key, bytes] : blobs) {
    check_name(key, "blob");
    Handle space = h5::dataspace({hsize_t(bytes.size())});
    Handle ds = h5::dataset_create(g.get(), key.c_str(), H5T_STD_U8LE, space.get());
    if (!bytes.empty()) h5::write_all(ds.get(), H5T_NATIVE_UINT8, bytes.data());
  }
}

void write_arrays(hid_t file, const std::string& name, const std::vector<Array>& arrays) {
  check_name(name, "array group");
  Handle g = group_create(file, name);
  std::string names;
  for (const auto& a : arrays) {
    std::uint64_t n = 1;
    for (auto d : a.shape) n *= d;
    if (n != a.size())
      throw ConfigError("fibra: array '" + name + "/" + a.name + "' has " + std::to_string(a.size()) +
                        " values, and its shape says " + std::to_string(n));
    const std::string dataset = encode_name(a.name);
    Handle space =
        a.shape.empty() ? h5::scalar_space() : h5::dataspace(std::vector<hsize_t>(a.shape.begin(), a.shape.end()));
    const auto write = [&](hid_t file_type, hid_t mem_type, const void* data) {
      Handle ds = h5::dataset_create(g.get(), dataset.c_str(), file_type, space.get());
      if (n) h5::write_all(ds.get(), mem_type, data);
    };
    if (const auto* f = std::get_if<std::vector<float>>(&a.values))
      write(H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, f->data());
    else if (const auto* d = std::get_if<std::vector<double>>(&a.values))
      write(H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, d->data());
    else
      write(H5T_STD_I64LE, H5T_NATIVE_INT64, std::get<std::vector<std::int64_t>>(a.values).data());
    names += (names.empty() ? "" : ",") + dataset;
  }
  h5::write_attribute(g.get(), "arrays", names);
}

// The file's bytes on disk before the rename: a crash right after it must not leave an empty file
// under the old name (ext4's delayed allocation).
void sync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Hdf5Error("fibra: cannot open '" + path + "' to sync it: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw Hdf5Error("fibra: cannot sync '" + path + "': " + std::strerror(err));
}

herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

herr_t collect_attribute(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

std::vector<std::string> links_of(hid_t loc) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  check(H5Literate(loc, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_name, &names), "H5Literate");
  return names;
}

Column read_column(hid_t group, const std::string& name) {
  Handle ds = h5::dataset_open(group, name.c_str());
  const auto dims = h5::dataset_dims(ds.get());
  const std::size_t n = dims.empty() ? 0 : dims[0];
  Handle type{check(H5Dget_type(ds.get()), "H5Dget_type"), H5Tclose};
  Column c{name, {}};
  switch (H5Tget_class(type.get())) {
    case H5T_FLOAT: {
      std::vector<double> v(n);
      if (n) h5::read_all(ds.get(), H5T_NATIVE_DOUBLE, v.data());
      c.values = std::move(v);
      break;
    }
    case H5T_INTEGER: {
      std::vector<std::int64_t> v(n);
      if (n) h5::read_all(ds.get(), H5T_NATIVE_INT64, v.data());
      c.values = std::move(v);
      break;
    }
    case H5T_STRING: {
      Handle mem = string_type();
      std::vector<char*> p(n, nullptr);
      if (n) h5::read_all(ds.get(), mem.get(), p.data());
      std::vector<std::string> v(n);
      for (std::size_t k = 0; k < n; ++k) v[k] = p[k] ? p[k] : "";
      if (n) {
        Handle space = h5::dataset_space(ds.get());
        H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, p.data());
      }
      c.values = std::move(v);
      break;
    }
    default: throw Hdf5Error("fibra: column '" + name + "' is neither numbers nor strings");
  }
  return c;
}

Array read_array(hid_t group, const std::string& dataset) {
  Handle ds = h5::dataset_open(group, dataset.c_str());
  Array a;
  a.name = decode_name(dataset);
  std::uint64_t n = 1;
  for (auto d : h5::dataset_dims(ds.get())) a.shape.push_back(d), n *= d;
  Handle type{check(H5Dget_type(ds.get()), "H5Dget_type"), H5Tclose};
  const auto read = [&](auto v, hid_t mem_type) {
    v.resize(n);
    if (n) h5::read_all(ds.get(), mem_type, v.data());
    a.values = std::move(v);
  };
  if (H5Tget_class(type.get()) == H5T_INTEGER)
    read(std::vector<std::int64_t>{}, H5T_NATIVE_INT64);
  else if (H5Tget_class(type.get()) == H5T_FLOAT && H5Tget_size(type.get()) == 4)
    read(std::vector<float>{}, H5T_NATIVE_FLOAT);
  else if (H5Tget_class(type.get()) == H5T_FLOAT)
    read(std::vector<double>{}, H5T_NATIVE_DOUBLE);
  else
    throw Hdf5Error("fibra: array '" + a.name + "' does not hold numbers");
  return a;
}

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= s.size() && !s.empty()) {
    const std::size_t comma = s.find(',', at);
    out.push_back(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

}  // namespace

void write_table_file(const std::string& path, const TableFile& file) {
  h5::silence_errors();
  const std::string tmp = path + ".tmp";
  {
    Handle f = h5::file_create(tmp);
    for (const auto& [k, v] : file.attributes) h5::write_attribute(f.get(), k.c_str(), v);
    for (const auto& t : file.tables) write_table(f.get(), t);
    for (const auto& [name, blobs] : file.blobs) write_blobs(f.get(), name, blobs);
    for (const auto& [name, arrays] : file.arrays) write_arrays(f.get(), name, arrays);
    f.close();
  }
  sync_file(tmp);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Hdf5Error("fibra: cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
}

TableFile read_table_file(const std::string& path) {
  h5::silence_errors();
  TableFile out;
  Handle f = h5::file_open_read(path);
  std::vector<std::string> attrs;
  hsize_t idx = 0;
  check(H5Aiterate2(f.get(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attribute, &attrs), "H5Aiterate2");
  for (const auto& a : attrs) out.attributes[a] = h5::read_string_attribute(f.get(), a.c_str());
  for (const auto& name : links_of(f.get())) {
    Handle g = group_open(f.get(), name);
    if (h5::has_attribute(g.get(), "columns")) {
      Table t{name, {}};
      for (const auto& c : split_names(h5::read_string_attribute(g.get(), "columns")))
        t.columns.push_back(read_column(g.get(), c)), t.columns.back().name = decode_name(c);
      out.tables.push_back(std::move(t));
    } else if (h5::has_attribute(g.get(), "arrays")) {
      auto& arrays = out.arrays[name];
      for (const auto& a : split_names(h5::read_string_attribute(g.get(), "arrays")))
        arrays.push_back(read_array(g.get(), a));
    } else if (h5::has_attribute(g.get(), "blobs")) {
      auto& blobs = out.blobs[name];
      for (const auto& key : links_of(g.get())) {
        Handle ds = h5::dataset_open(g.get(), key.c_str());
        const auto dims = h5::dataset_dims(ds.get());
        std::string bytes(dims.empty() ? 0 : dims[0], '\0');
        if (!bytes.empty()) h5::read_all(ds.get(), H5T_NATIVE_UINT8, bytes.data());
        blobs[key] = std::move(bytes);
      }
    }
  }
  return out;
}

}  // namespace fibra::hdf5_io
