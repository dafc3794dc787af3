// hdf5_io/tests/test_dir.hpp: a fresh scratch directory per test, removed afterwards.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace fibra::hdf5_io::test {

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
