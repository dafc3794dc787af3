// src/common/unique_fd.hpp: the one owner of a POSIX file descriptor, for every fibra library (the
// runtime, hdf5_io's journal and lock, the Slurm commands' pipes). Header-only: hdf5_io and
// fibra_slurm take it through the fibra_internal target (CMakeLists.txt).
#pragma once

#include <unistd.h>

namespace fibra::detail {

/// A move-only owner of a file descriptor: closed when its owner goes or is reset.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  /// Gives the descriptor up without closing it.
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  /// Closes the descriptor held (if any) and holds `fd` instead.
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0 && fd_ != fd) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace fibra::detail
