// hdf5_io/src/snapshot.cpp: the .h5 file of a checkpoint (layout in docs/checkpoint-format.md).
#include "snapshot.hpp"

#include <cstring>
#include <ctime>
#include <optional>

#include "h5.hpp"

namespace fibra::hdf5_io::detail {

namespace {
constexpr const char* format_name = "fibra-checkpoint";

hid_t file_type_of(NativeType t) {
  switch (t) {
    case NativeType::int8: return H5T_STD_I8LE;
    case NativeType::uint8: return H5T_STD_U8LE;
    case NativeType::int16: return H5T_STD_I16LE;
    case NativeType::uint16: return H5T_STD_U16LE;
    case NativeType::int32: return H5T_STD_I32LE;
    case NativeType::uint32: return H5T_STD_U32LE;
    case NativeType::int64: return H5T_STD_I64LE;
    case NativeType::uint64: return H5T_STD_U64LE;
    case NativeType::float32: return H5T_IEEE_F32LE;
    case NativeType::float64: return H5T_IEEE_F64LE;
  }
  return H5I_INVALID_HID;
}

hid_t memory_type_of(NativeType t) {
  switch (t) {
    case NativeType::int8: return H5T_NATIVE_INT8;
    case NativeType::uint8: return H5T_NATIVE_UINT8;
    case NativeType::int16: return H5T_NATIVE_INT16;
    case NativeType::uint16: return H5T_NATIVE_UINT16;
    case NativeType::int32: return H5T_NATIVE_INT32;
    case NativeType::uint32: return H5T_NATIVE_UINT32;
    case NativeType::int64: return H5T_NATIVE_INT64;
    case NativeType::uint64: return H5T_NATIVE_UINT64;
    case NativeType::float32: return H5T_NATIVE_FLOAT;
    case NativeType::float64: return H5T_NATIVE_DOUBLE;
  }
  return H5I_INVALID_HID;
}

std::optional<NativeType> native_type_named(const std::string& name) {
  for (int i = 0; i <= int(NativeType::float64); ++i)
    if (name == name_of(NativeType(i))) return NativeType(i);
  return std::nullopt;
}

/// Creates a contiguous dataset; with `data == nullptr` nothing is written and readers see the fill
/// value 0 (HDF5 allocates no space for it: a new checkpoint of a million items costs a few KB).
void write_dataset(hid_t file, const char* name, hid_t file_type, hid_t mem_type, std::vector<hsize_t> dims,
                   const void* data) {
  h5::Handle space = h5::dataspace(dims);
  h5::Handle ds = h5::dataset_create(file, name, file_type, space.get());
  std::uint64_t n = 1;
  for (auto d : dims) n *= d;
  if (n > 0 && data) h5::write_all(ds.get(), mem_type, data);
  ds.close();
}

void write_attributes(hid_t file, const Contents& c) {
  h5::write_attribute(file, "format", std::string(format_name));
  h5::write_attribute(file, "format_version", std::uint64_t(format_version));
  h5::write_attribute(file, "function", c.run.function);
  h5::write_attribute(file, "n_inputs", c.run.n_inputs);
  h5::write_attribute(file, "inputs_fingerprint", c.run.inputs_fingerprint);
  h5::write_attribute(file, "chunksize", c.run.chunksize);
  h5::write_attribute(file, "fibra_version", c.run.fibra_version);
  h5::write_attribute(file, "created_at", c.created_at);
  h5::write_attribute(file, "updated_at", c.updated_at);
  h5::write_attribute(file, "state", std::string(c.n_done == c.run.n_inputs ? "complete" : "running"));
  h5::write_attribute(file, "n_done", c.n_done);
  h5::write_attribute(file, "run_id", c.run_id);
  h5::write_attribute(file, "generation", c.generation);
  const bool native = c.type.kind == ElementType::Kind::native;
  h5::write_attribute(file, "element_kind", std::string(native ? "native" : "bytes"));
  h5::write_attribute(file, "element_type", native ? std::string(name_of(c.type.native)) : std::string("bytes"));
  if (!native) h5::write_attribute(file, "bytes_encoding", c.type.encoding);
}

void write_results(hid_t file, const Contents& c) {
  const hsize_t n = c.run.n_inputs;
  if (c.type.kind == ElementType::Kind::native) {
    std::vector<hsize_t> dims{n};
    dims.insert(dims.end(), c.type.shape.begin(), c.type.shape.end());
    write_dataset(file, "results", file_type_of(c.type.native), memory_type_of(c.type.native), dims,
                  c.n_done ? c.values.data() : nullptr);
    return;
  }
  std::vector<std::uint64_t> offsets(n + 1, 0);
  for (std::uint64_t i = 0; i < n; ++i) offsets[i + 1] = offsets[i] + c.blobs[i].size();
  std::vector<std::byte> flat(offsets[n]);
  for (std::uint64_t i = 0; i < n; ++i)
    if (!c.blobs[i].empty()) std::memcpy(flat.data() + offsets[i], c.blobs[i].data(), c.blobs[i].size());
  write_dataset(file, "results", H5T_STD_U8LE, H5T_NATIVE_UINT8, {offsets[n]}, flat.data());
  write_dataset(file, "offsets", H5T_STD_U64LE, H5T_NATIVE_UINT64, {n + 1}, offsets.data());
}

/// The text of an Hdf5Error without its "fibra: " prefix, to quote it inside another message.
std::string quoted(const Hdf5Error& e) {
  std::string text = e.what();
  return text.rfind("fibra: ", 0) == 0 ? text.substr(7) : text;
}

[[noreturn]] void refuse(const std::filesystem::path& file, const std::string& why, const std::string& advice) {
  throw CheckpointError("fibra: cannot use '" + file.string() + "' as a checkpoint: " + why + " — " + advice);
}

/// Reads a whole dataset into `data` after checking that its extents are `dims`.
void read_dataset(hid_t file, const char* name, hid_t mem_type, void* data, const std::vector<hsize_t>& dims) {
  h5::Handle ds = h5::dataset_open(file, name);
  if (h5::dataset_dims(ds.get()) != dims)
    throw Hdf5Error(std::string("fibra: dataset '") + name + "' has the wrong shape");
  std::uint64_t n = 1;
  for (auto d : dims) n *= d;
  if (n > 0) h5::read_all(ds.get(), mem_type, data);
}

ElementType read_element_type(hid_t file) {
  const std::string kind = h5::read_string_attribute(file, "element_kind");
  if (kind == "bytes") return ElementType::bytes_of(h5::read_string_attribute(file, "bytes_encoding"));
  auto native = native_type_named(h5::read_string_attribute(file, "element_type"));
  if (kind != "native" || !native) throw Hdf5Error("fibra: unknown element type");
  h5::Handle ds = h5::dataset_open(file, "results");
  auto dims = h5::dataset_dims(ds.get());
  if (dims.empty()) throw Hdf5Error("fibra: dataset 'results' has rank 0");
  return ElementType::native_of(*native, std::vector<std::uint64_t>(dims.begin() + 1, dims.end()));
}

void read_results(hid_t file, Contents& c) {
  const hsize_t n = c.run.n_inputs;
  read_dataset(file, "done", H5T_NATIVE_UINT8, c.done.data(), {n});
  c.n_done = 0;
  for (auto d : c.done) c.n_done += d != 0;
  if (c.type.kind == ElementType::Kind::native) {
    std::vector<hsize_t> dims{n};
    dims.insert(dims.end(), c.type.shape.begin(), c.type.shape.end());
    read_dataset(file, "results", memory_type_of(c.type.native), c.values.data(), dims);
    return;
  }
  std::vector<std::uint64_t> offsets(n + 1);
  read_dataset(file, "offsets", H5T_NATIVE_UINT64, offsets.data(), {n + 1});
  for (std::uint64_t i = 0; i < n; ++i)
    if (offsets[i + 1] < offsets[i]) throw Hdf5Error("fibra: dataset 'offsets' is not ascending");
  std::vector<std::byte> flat(offsets[n]);
  read_dataset(file, "results", H5T_NATIVE_UINT8, flat.data(), {offsets[n]});
  for (std::uint64_t i = 0; i < n; ++i)
    c.blobs[i].assign(flat.begin() + std::ptrdiff_t(offsets[i]), flat.begin() + std::ptrdiff_t(offsets[i + 1]));
}

Contents read_fibra_file(hid_t file) {
  Contents c;
  c.run.function = h5::read_string_attribute(file, "function");
  c.run.n_inputs = h5::read_uint_attribute(file, "n_inputs");
  c.run.inputs_fingerprint = h5::read_string_attribute(file, "inputs_fingerprint");
  c.run.chunksize = h5::read_uint_attribute(file, "chunksize");
  c.run.fibra_version = h5::read_string_attribute(file, "fibra_version");
  c.created_at = h5::read_string_attribute(file, "created_at");
  c.updated_at = h5::read_string_attribute(file, "updated_at");
  c.run_id = h5::read_uint_attribute(file, "run_id");
  c.generation = h5::read_uint_attribute(file, "generation");
  c.type = read_element_type(file);
  {  // check the extent before allocating for it: a damaged n_inputs must not allocate terabytes
    h5::Handle done = h5::dataset_open(file, "done");
    if (h5::dataset_dims(done.get()) != std::vector<hsize_t>{c.run.n_inputs})
      throw Hdf5Error("fibra: dataset 'done' does not have n_inputs = " + std::to_string(c.run.n_inputs) + " items");
  }
  c.allocate();
  read_results(file, c);
  return c;
}
}  // namespace

void Contents::allocate() {
  done.assign(run.n_inputs, 0);
  n_done = 0;
  if (type.kind == ElementType::Kind::native)
    values.assign(run.n_inputs * type.size_bytes(), std::byte{0});
  else
    blobs.assign(run.n_inputs, {});
}

void write_snapshot(const std::filesystem::path& file, const Contents& c) {
  h5::silence_errors();
  h5::Handle f = h5::file_create(file.string());
  write_attributes(f.get(), c);
  write_results(f.get(), c);
  write_dataset(f.get(), "done", H5T_STD_U8LE, H5T_NATIVE_UINT8, {c.run.n_inputs}, c.n_done ? c.done.data() : nullptr);
  f.close();
}

namespace {
/// Opens a checkpoint's .h5 file for reading and checks that it is one fibra can read, then hands
/// the open file to `read`.
template <class Read>
auto read_checkpoint_file(const std::filesystem::path& file, Read read) {
  h5::silence_errors();
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) refuse(file, "no such file", "check the path");
  if (std::filesystem::is_directory(file, ec))
    refuse(file, "it is a directory",
           "pass the path of a checkpoint file, such as '" + (file / "run.h5").string() + "'");
  if (H5Fis_hdf5(file.c_str()) <= 0) refuse(file, "it is not an HDF5 file", "pass another checkpoint path");
  h5::Handle f;
  try {
    f = h5::file_open_read(file.string());
  } catch (const Hdf5Error& e) {
    // HDF5 1.10 locks files it opens: a lock refused is not damage, and the file must not be deleted
    const std::string why = quoted(e);
    if (why.find("unable to lock") != std::string::npos || why.find("Unable to lock") != std::string::npos)
      refuse(file, "HDF5 cannot lock it (" + why + ")",
             "another program may have it open for writing (wait for it to end); on a file system without file "
             "locks (some NFS or Lustre mounts) set HDF5_USE_FILE_LOCKING=FALSE");
    refuse(file, "the file is damaged (" + why + ")", "delete it to start the run over");
  }
  try {
    if (!h5::has_attribute(f.get(), "format") || h5::read_string_attribute(f.get(), "format") != format_name)
      refuse(file, "it is an HDF5 file but not a fibra checkpoint (no root attribute format = \"fibra-checkpoint\")",
             "pass another checkpoint path");
    const auto version = h5::read_uint_attribute(f.get(), "format_version");
    if (version > format_version)
      refuse(file,
             "it has checkpoint format version " + std::to_string(version) + ", this fibra reads up to version " +
                 std::to_string(format_version),
             "use a newer fibra or delete the file");
    return read(f.get());
  } catch (const Hdf5Error& e) {
    refuse(file, "the file is damaged (" + quoted(e) + ")", "delete it to start the run over");
  }
}
}  // namespace

Contents read_snapshot(const std::filesystem::path& file) {
  return read_checkpoint_file(file, [](hid_t f) { return read_fibra_file(f); });
}

SnapshotKey read_snapshot_key(const std::filesystem::path& file) {
  return read_checkpoint_file(file, [](hid_t f) {
    return SnapshotKey{h5::read_uint_attribute(f, "run_id"), h5::read_uint_attribute(f, "generation")};
  });
}

std::string iso8601(std::uint64_t wall_ns) {
  std::time_t t = std::time_t(wall_ns / 1'000'000'000ULL);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace fibra::hdf5_io::detail
