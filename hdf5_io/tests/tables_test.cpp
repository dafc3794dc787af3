// hdf5_io/tests/tables_test.cpp: a table file is read back whole, by fibra and by h5py + pandas.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "fibra/error.hpp"
#include "fibra/hdf5_io/tables.hpp"
#include "test_dir.hpp"

namespace fibra::hdf5_io {
namespace {

using test::run;

class TablesTest : public test::TestDir {
 protected:
  TableFile sample() {
    TableFile f;
    f.attributes["format"] = "sample";
    f.attributes["metric"] = "score";
    f.tables.push_back(
        Table{"trials",
              {Column{"id", std::vector<std::int64_t>{0, 1, 2}}, Column{"lr", std::vector<double>{0.5, 0.25, 1e-3}},
               Column{"status", std::vector<std::string>{"done", "stopped", "error: x, y"}}}});
    f.tables.push_back(Table{"empty", {Column{"a", std::vector<double>{}}}});
    f.blobs["checkpoints"]["trial_1"] = std::string("\0\1binary", 8);
    f.blobs["checkpoints"]["trial_2"] = "";
    return f;
  }
};

TEST_F(TablesTest, ReadsBackWhatItWrote) {
  const auto path = file("t.h5").string();
  write_table_file(path, sample());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const TableFile r = read_table_file(path);
  EXPECT_EQ(r.attributes.at("format"), "sample");
  EXPECT_EQ(r.attributes.at("metric"), "score");
  const Table* t = r.find("trials");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->columns.size(), 3u);
  EXPECT_EQ(t->columns[0].name, "id");  // in the order written, not by name
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(t->columns[0].values), (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(std::get<std::vector<double>>(t->find("lr")->values), (std::vector<double>{0.5, 0.25, 1e-3}));
  EXPECT_EQ(std::get<std::vector<std::string>>(t->find("status")->values)[2], "error: x, y");
  ASSERT_NE(r.find("empty"), nullptr);
  EXPECT_EQ(r.find("empty")->columns.at(0).rows(), 0u);
  EXPECT_EQ(r.blobs.at("checkpoints").at("trial_1"), std::string("\0\1binary", 8));
  EXPECT_EQ(r.blobs.at("checkpoints").at("trial_2"), "");
  // A second write replaces the file whole.
  TableFile smaller;
  smaller.attributes["format"] = "other";
  write_table_file(path, smaller);
  const TableFile r2 = read_table_file(path);
  EXPECT_EQ(r2.attributes.at("format"), "other");
  EXPECT_EQ(r2.tables.size(), 0u);
}

TEST_F(TablesTest, RefusesColumnsOfUnequalLengthAndBadNames) {
  TableFile f;
  f.tables.push_back(Table{"t", {Column{"a", std::vector<double>{1, 2}}, Column{"b", std::vector<double>{1}}}});
  try {
    write_table_file(file("bad.h5").string(), f);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "fibra: table 't': column 'b' has 1 rows, column 'a' 2; every column needs as many");
  }
  f.tables[0].name = "a/b";
  f.tables[0].columns = {Column{"a", std::vector<double>{1}}};
  EXPECT_THROW(write_table_file(file("bad.h5").string(), f), ConfigError);
}

TEST_F(TablesTest, AnyColumnNameRoundTrips) {
  // A metric named as TensorBoard names them: '/' cannot be in an HDF5 name and ',' separates the
  // columns attribute; both are written %2F and %2C (and '%' as %25), and read back as they were.
  TableFile f;
  f.tables.push_back(Table{"t",
                           {Column{"train/loss", std::vector<double>{1}}, Column{"a,b", std::vector<double>{2}},
                            Column{"100%2F", std::vector<double>{3}}, Column{".", std::vector<double>{4}},
                            Column{"", std::vector<double>{5}}}});
  write_table_file(file("names.h5").string(), f);
  const TableFile r = read_table_file(file("names.h5").string());
  ASSERT_EQ(r.tables.at(0).columns.size(), 5u);
  EXPECT_EQ(r.tables[0].columns[3].name, ".");
  EXPECT_EQ(r.tables[0].columns[4].name, "");
  EXPECT_EQ(r.tables[0].columns[0].name, "train/loss");
  EXPECT_EQ(r.tables[0].columns[1].name, "a,b");
  EXPECT_EQ(r.tables[0].columns[2].name, "100%2F");
  EXPECT_EQ(std::get<std::vector<double>>(r.tables[0].columns[2].values), std::vector<double>{3});
}

TEST_F(TablesTest, PandasReadsATableWithoutFibra) {
  int status = -1;
  run(std::string(FIBRA_TEST_PYTHON) + " -c 'import h5py, pandas' 2>/dev/null", status);
  if (status != 0) GTEST_SKIP() << "python3-h5py or python3-pandas is not installed";
  const auto path = file("t.h5").string();
  write_table_file(path, sample());
  const std::string script =
      "import sys, h5py, pandas as pd\n"
      "f = h5py.File(sys.argv[1], \"r\")\n"
      "g = f[\"trials\"]\n"
      "df = pd.DataFrame({c: g[c][()] for c in g.attrs[\"columns\"].split(\",\")})\n"
      "print(list(df.columns), df[\"id\"].tolist(), df[\"lr\"].tolist(), "
      "df[\"status\"].str.decode(\"utf-8\").tolist())\n"
      "print(bytes(f[\"checkpoints\"][\"trial_1\"][()]))\n";
  const std::string out = run(std::string(FIBRA_TEST_PYTHON) + " -c '" + script + "' " + path, status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out,
            "['id', 'lr', 'status'] [0, 1, 2] [0.5, 0.25, 0.001] ['done', 'stopped', 'error: x, y']\n"
            "b'\\x00\\x01binary'\n");
}

TableFile with_arrays() {
  TableFile f;
  f.arrays["learner"] = {
      Array{"actor.0.weight", {2, 3}, std::vector<float>{1.5f, -2, 0.25f, 4, 5, 0.375f}},
      Array{"adam.step", {}, std::vector<std::int64_t>{42}},
      Array{"mean", {3}, std::vector<double>{0.1, 1e300, -0.0}},
      Array{"empty", {0}, std::vector<double>{}},
  };
  return f;
}

TEST_F(TablesTest, ArraysReadBackWithShapeAndType) {
  const auto path = file("a.h5").string();
  write_table_file(path, with_arrays());
  const TableFile r = read_table_file(path);
  ASSERT_EQ(r.arrays.at("learner").size(), 4u);
  EXPECT_EQ(r.arrays.at("learner")[0].name, "actor.0.weight");  // in the order written
  const Array* w = r.find_array("learner", "actor.0.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(std::get<std::vector<float>>(w->values), (std::vector<float>{1.5f, -2, 0.25f, 4, 5, 0.375f}));
  const Array* step = r.find_array("learner", "adam.step");
  ASSERT_NE(step, nullptr);
  EXPECT_TRUE(step->shape.empty());
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(step->values), std::vector<std::int64_t>{42});
  EXPECT_EQ(std::get<std::vector<double>>(r.find_array("learner", "mean")->values),
            (std::vector<double>{0.1, 1e300, -0.0}));
  EXPECT_EQ(r.find_array("learner", "empty")->size(), 0u);
  EXPECT_EQ(r.find_array("learner", "nothing"), nullptr);
  EXPECT_EQ(r.find_array("other", "mean"), nullptr);
}

TEST_F(TablesTest, RefusesAnArrayWhoseValuesDoNotFitItsShape) {
  TableFile f;
  f.arrays["g"] = {Array{"w", {2, 2}, std::vector<double>{1, 2, 3}}};
  try {
    write_table_file(file("bad.h5").string(), f);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "fibra: array 'g/w' has 3 values, and its shape says 4");
  }
}

TEST_F(TablesTest, H5pyReadsArraysWithTheirShapes) {
  int status = -1;
  run(std::string(FIBRA_TEST_PYTHON) + " -c 'import h5py' 2>/dev/null", status);
  if (status != 0) GTEST_SKIP() << "python3-h5py is not installed";
  const auto path = file("a.h5").string();
  write_table_file(path, with_arrays());
  const std::string script =
      "import sys, h5py\n"
      "g = h5py.File(sys.argv[1], \"r\")[\"learner\"]\n"
      "w = g[\"actor.0.weight\"][()]\n"
      "print(w.shape, w.dtype, w[1].tolist(), int(g[\"adam.step\"][()]), g.attrs[\"arrays\"])\n";
  const std::string out = run(std::string(FIBRA_TEST_PYTHON) + " -c '" + script + "' " + path, status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out, "(2, 3) float32 [4.0, 5.0, 0.375] 42 actor.0.weight,adam.step,mean,empty\n");
}

}  // namespace
}  // namespace fibra::hdf5_io
