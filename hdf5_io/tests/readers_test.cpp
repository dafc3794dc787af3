// hdf5_io/tests/readers_test.cpp: a finished checkpoint is read by h5py and h5dump, without fibra.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include "fibra/hdf5_io/store.hpp"
#include "test_dir.hpp"

namespace fibra::hdf5_io {
namespace {

using test::run;

bool python_has_h5py() {
  int status = -1;
  run(std::string(FIBRA_TEST_PYTHON) + " -c 'import h5py, numpy' 2>/dev/null", status);
  return status == 0;
}

class ReadersTest : public test::TestDir {
 protected:
  /// A finished checkpoint of 1000 doubles i * 0.25, all done but item 7.
  std::filesystem::path write_doubles() {
    auto path = file("doubles.h5");
    auto store =
        Store::create(path, RunRecord{"simulate", 1000, "0123456789abcdef", 100, "0.1.0"}, element_type_of<double>());
    std::vector<double> v(1000);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = double(i) * 0.25;
    store.put_values<double>(0, std::span(v).first(7));
    store.put_values<double>(8, std::span(v).subspan(8));
    store.finish();
    return path;
  }
  std::string python(const std::string& script, const std::filesystem::path& path) {
    int status = -1;
    std::string out = run(std::string(FIBRA_TEST_PYTHON) + " -c '" + script + "' " + path.string(), status);
    EXPECT_EQ(status, 0) << out;
    return out;
  }
};

TEST_F(ReadersTest, H5pyReadsNativeResultsInInputOrderWithTheDoneMask) {
  if (!python_has_h5py()) GTEST_SKIP() << "python3-h5py is not installed";
  const auto path = write_doubles();
  const std::string script =
      "import sys, h5py, numpy as np\n"
      "f = h5py.File(sys.argv[1], \"r\")\n"
      "r, d = f[\"results\"][:], f[\"done\"][:]\n"
      "ok = bool((r[d == 1] == (np.arange(1000) * 0.25)[d == 1]).all())\n"
      "print(f.attrs[\"format\"], f.attrs[\"function\"], f.attrs[\"state\"], r.shape, r.dtype, int(d.sum()), d[7], "
      "ok)\n";
  EXPECT_EQ(python(script, path), "fibra-checkpoint simulate running (1000,) float64 999 0 True\n");
}

TEST_F(ReadersTest, H5pyReadsArraysAndBytes) {
  if (!python_has_h5py()) GTEST_SKIP() << "python3-h5py is not installed";
  const RunRecord run{"f", 4, "0", 1, "0.1.0"};
  {
    auto store = Store::create(file("a.h5"), run, element_type_of<std::array<float, 3>>());
    std::vector<std::array<float, 3>> v{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {0.5f, -1, 1e30f}};
    store.put_values<std::array<float, 3>>(0, v);
    store.finish();
  }
  EXPECT_EQ(python("import sys, h5py; r = h5py.File(sys.argv[1])[\"results\"]; print(r.shape, r.dtype, r[3].tolist())",
                   file("a.h5")),
            "(4, 3) float32 [0.5, -1.0, 1.0000000150474662e+30]\n");
  {
    auto store = Store::create(file("b.h5"), run, ElementType::bytes_of("text"));
    const std::string words[] = {"alpha", "", "gamma", "delta"};
    std::vector<std::span<const std::byte>> blobs;
    for (const auto& w : words) blobs.push_back(std::as_bytes(std::span(w)));
    store.put_bytes(0, blobs);
    store.finish();
  }
  EXPECT_EQ(python("import sys, h5py; f = h5py.File(sys.argv[1]); r, o = f[\"results\"][:], f[\"offsets\"][:]\n"
                   "print([r[o[i]:o[i + 1]].tobytes().decode() for i in range(4)], f.attrs[\"bytes_encoding\"])",
                   file("b.h5")),
            "['alpha', '', 'gamma', 'delta'] text\n");
}

TEST_F(ReadersTest, H5dumpShowsTheLayout) {
  const auto path = write_doubles();
  int status = -1;
  const std::string out = run(std::string(FIBRA_TEST_H5DUMP) + " -H " + path.string(), status);
  ASSERT_EQ(status, 0) << out;
  for (const char* expected :
       {"DATASET \"results\" {\n      DATATYPE  H5T_IEEE_F64LE\n      DATASPACE  SIMPLE { ( 1000 ) / ( 1000 ) }",
        "DATASET \"done\" {\n      DATATYPE  H5T_STD_U8LE\n      DATASPACE  SIMPLE { ( 1000 ) / ( 1000 ) }",
        "ATTRIBUTE \"format\"", "ATTRIBUTE \"n_inputs\"", "ATTRIBUTE \"updated_at\""})
    EXPECT_NE(out.find(expected), std::string::npos) << "missing: " << expected << "\nin:\n" << out;
}

}  // namespace
}  // namespace fibra::hdf5_io
