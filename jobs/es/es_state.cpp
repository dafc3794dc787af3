#include "es_state.hpp"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

namespace es {
namespace {

// An hid_t closed with its owner (H5Fclose, H5Dclose, ...).
class Hid {
 public:
  Hid(hid_t id, herr_t (*close)(hid_t), const std::string& what) : id_(id), close_(close) {
    if (id_ < 0) throw StateError("es: " + what + " failed");
  }
  ~Hid() { close_(id_); }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  operator hid_t() const { return id_; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

void check(herr_t rc, const std::string& what) {
  if (rc < 0) throw StateError("es: " + what + " failed");
}

void write_vector(hid_t file, const char* name, const std::vector<double>& v, hsize_t columns = 1) {
  const hsize_t dims[2] = {columns > 1 ? v.size() / columns : v.size(), columns};
  Hid space(H5Screate_simple(columns > 1 ? 2 : 1, dims, nullptr), H5Sclose, std::string("dataspace of ") + name);
  Hid set(H5Dcreate2(file, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose,
          std::string("creating dataset ") + name);
  if (!v.empty()) check(H5Dwrite(set, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), name);
}

std::vector<double> read_vector(hid_t file, const char* name) {
  Hid set(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose, std::string("opening dataset ") + name);
  Hid space(H5Dget_space(set), H5Sclose, name);
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  std::vector<double> v(std::size_t(n > 0 ? n : 0));
  if (!v.empty()) check(H5Dread(set, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), name);
  return v;
}

// The curve's rows: 5 columns, or 4 in files written before the steps were kept (read with 0 steps).
std::vector<double> read_curve(hid_t file) {
  std::vector<double> v = read_vector(file, "curve");
  Hid set(H5Dopen2(file, "curve", H5P_DEFAULT), H5Dclose, "opening dataset curve");
  Hid space(H5Dget_space(set), H5Sclose, "curve");
  hsize_t dims[2] = {0, 0};
  if (H5Sget_simple_extent_ndims(space) != 2 || H5Sget_simple_extent_dims(space, dims, nullptr) != 2 ||
      (dims[1] != 4 && dims[1] != 5))
    throw StateError("es: the dataset curve is not a table of 4 or 5 columns");
  if (dims[1] == 5) return v;
  std::vector<double> wide;
  for (std::size_t r = 0; r + 3 < v.size(); r += 4) wide.insert(wide.end(), {v[r], v[r + 1], v[r + 2], v[r + 3], 0.0});
  return wide;
}

template <class T>
void write_attr(hid_t file, const char* name, T value) {
  const hid_t type = std::is_same_v<T, double> ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64;
  const hid_t file_type = std::is_same_v<T, double> ? H5T_IEEE_F64LE : H5T_STD_I64LE;
  Hid space(H5Screate(H5S_SCALAR), H5Sclose, name);
  Hid a(H5Acreate2(file, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose, name);
  check(H5Awrite(a, type, &value), name);
}

template <class T>
T read_attr(hid_t file, const char* name);

// An attribute added after the first files were written: `absent` where a file lacks it.
template <class T>
T read_attr_or(hid_t file, const char* name, T absent) {
  const htri_t exists = H5Aexists(file, name);
  check(exists, name);
  return exists > 0 ? read_attr<T>(file, name) : absent;
}

template <class T>
T read_attr(hid_t file, const char* name) {
  T value{};
  Hid a(H5Aopen(file, name, H5P_DEFAULT), H5Aclose, std::string("reading attribute ") + name);
  check(H5Aread(a, std::is_same_v<T, double> ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64, &value), name);
  return value;
}

void write_string(hid_t file, const char* name, const std::string& s) {
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose, name);
  check(H5Tset_size(type, s.size() + 1), name);
  Hid space(H5Screate(H5S_SCALAR), H5Sclose, name);
  Hid a(H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose, name);
  check(H5Awrite(a, type, s.c_str()), name);
}

std::string read_string(hid_t file, const char* name) {
  Hid a(H5Aopen(file, name, H5P_DEFAULT), H5Aclose, std::string("reading attribute ") + name);
  Hid type(H5Aget_type(a), H5Tclose, name);
  // One more byte than the stored size: a string stored without its terminator (h5py writes them
  // null-padded) keeps its last character.
  std::string s(H5Tget_size(type) + 1, '\0');
  Hid mem(H5Tcopy(H5T_C_S1), H5Tclose, name);
  check(H5Tset_size(mem, s.size()), name);
  check(H5Aread(a, mem, s.data()), name);
  s.resize(s.find('\0') == std::string::npos ? s.size() : s.find('\0'));
  return s;
}

}  // namespace

void save_state(const std::string& path, const RunState& s) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are thrown, not printed
  const std::string tmp = path + ".tmp";
  try {
    Hid f(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose, "creating " + tmp);
    write_string(f, "env", s.env);
    write_attr<std::int64_t>(f, "seed", std::int64_t(s.seed));
    write_attr<std::int64_t>(f, "population", s.population);
    write_attr<std::int64_t>(f, "hidden", s.hidden);
    write_attr<double>(f, "sigma", s.sigma);
    write_attr<double>(f, "lr", s.lr);
    write_attr<double>(f, "l2", s.l2);
    write_attr<std::int64_t>(f, "generation", s.generation);
    write_attr<double>(f, "adam_t", s.adam_t);
    write_attr<double>(f, "obs_count", s.obs_count);
    write_attr<double>(f, "wall_s", s.wall_s);
    write_attr<double>(f, "shift", s.shift);
    write_attr<double>(f, "observe", s.observe);
    write_attr<double>(f, "steps", s.steps);
    write_vector(f, "theta", s.theta);
    write_vector(f, "adam_m", s.adam_m);
    write_vector(f, "adam_v", s.adam_v);
    write_vector(f, "obs_sum", s.obs_sum);
    write_vector(f, "obs_sumsq", s.obs_sumsq);
    write_vector(f, "curve", s.curve, 5);
    check(H5Fflush(f, H5F_SCOPE_GLOBAL), "flushing " + tmp);
  } catch (const StateError& e) {
    throw StateError(std::string(e.what()) + " (writing the ES state to " + tmp + ")");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw StateError("es: cannot rename " + tmp + " to " + path + ": " + ec.message());
}

std::optional<RunState> load_state(const std::string& path) {
  if (!std::filesystem::exists(path)) return std::nullopt;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  RunState s;
  try {
    Hid f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "opening " + path);
    s.env = read_string(f, "env");
    s.seed = std::uint64_t(read_attr<std::int64_t>(f, "seed"));
    s.population = read_attr<std::int64_t>(f, "population");
    s.hidden = read_attr<std::int64_t>(f, "hidden");
    s.sigma = read_attr<double>(f, "sigma");
    s.lr = read_attr<double>(f, "lr");
    s.l2 = read_attr<double>(f, "l2");
    s.generation = read_attr<std::int64_t>(f, "generation");
    s.adam_t = read_attr<double>(f, "adam_t");
    s.obs_count = read_attr<double>(f, "obs_count");
    s.wall_s = read_attr<double>(f, "wall_s");
    s.shift = read_attr_or<double>(f, "shift", 0.0);
    s.observe = read_attr_or<double>(f, "observe", 1.0);
    s.steps = read_attr_or<double>(f, "steps", 0.0);
    s.theta = read_vector(f, "theta");
    s.adam_m = read_vector(f, "adam_m");
    s.adam_v = read_vector(f, "adam_v");
    s.obs_sum = read_vector(f, "obs_sum");
    s.obs_sumsq = read_vector(f, "obs_sumsq");
    s.curve = read_curve(f);
  } catch (const StateError& e) {
    throw StateError(std::string(e.what()) + ": '" + path +
                     "' is not an ES state file this job wrote; move it away, or pass another --state");
  }
  return s;
}

std::string differences(const RunState& a, const RunState& b) {
  std::string d;
  auto note = [&](const std::string& what, const std::string& x, const std::string& y) {
    if (x != y) d += (d.empty() ? "" : ", ") + what + " " + x + " (now " + y + ")";
  };
  note("environment", a.env, b.env);
  note("seed", std::to_string(a.seed), std::to_string(b.seed));
  note("population", std::to_string(a.population), std::to_string(b.population));
  note("hidden units", std::to_string(a.hidden), std::to_string(b.hidden));
  note("sigma", std::to_string(a.sigma), std::to_string(b.sigma));
  note("learning rate", std::to_string(a.lr), std::to_string(b.lr));
  note("l2", std::to_string(a.l2), std::to_string(b.l2));
  note("reward shift", std::to_string(a.shift), std::to_string(b.shift));
  note("observed fraction", std::to_string(a.observe), std::to_string(b.observe));
  return d;
}

std::vector<double> policy_of(const RunState& s) {
  std::vector<double> p = s.theta;
  const std::size_t n = s.obs_sum.size();
  for (std::size_t i = 0; i < n; ++i) p.push_back(s.obs_count > 0 ? s.obs_sum[i] / s.obs_count : 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    const double m = s.obs_count > 0 ? s.obs_sum[i] / s.obs_count : 0.0;
    const double var = s.obs_count > 0 ? s.obs_sumsq[i] / s.obs_count - m * m : 1.0;
    p.push_back(std::sqrt(std::max(var, 1e-4)));
  }
  return p;
}

}  // namespace es
