// hdf5_io/tests/test_dir.hpp: a fresh scratch directory per test, removed afterwards, and a shell
// command's output (the independent readers: h5py, pandas, h5dump).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace fibra::hdf5_io::test {

/// Runs `command` through the shell; returns its stdout, and its exit status in `status`.
inline std::string run(const std::string& command, int& status) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  status = ::pclose(p);
  return out;
}

/// A GoogleTest fixture owning an empty directory under $TMPDIR (or /tmp) for the test's files.
class TestDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/fibra-hdf5-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path file(const std::string& name) const { return dir_ / name; }

  std::filesystem::path dir_;
};

}  // namespace fibra::hdf5_io::test
