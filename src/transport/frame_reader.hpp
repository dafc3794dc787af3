// src/transport/frame_reader.hpp: frames read off a non-blocking socket as their bytes arrive (the
// agent reads its executors' sockets this way, between its other work). A frame is a u64 prefix
// (its kind and length, wire::frame_prefix) and then its body.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"

struct msghdr;

namespace fibra::detail {

class FrameReader {
 public:
  /// A prefix of a kind above `max_kind` or a length above `max_length` is not a frame of ours.
  FrameReader(std::uint64_t max_kind, std::uint64_t max_length) : max_kind_(max_kind), max_length_(max_length) {}

  enum class Status {
    frame,   ///< a whole frame is in: take() it
    again,   ///< no more bytes now (EAGAIN)
    closed,  ///< end of file, or an error: the other side is gone
    junk,    ///< a prefix that is no frame's (what_junk() says which)
  };
  /// Reads from `fd` until a frame is whole or no byte is left to read; `got` is set once any
  /// byte was read. Descriptors sent with the frame (SCM_RIGHTS, on a Unix socket) come with it.
  Status read(int fd, bool& got);
  struct Frame {
    std::uint64_t kind = 0;  ///< wire::FrameKind
    std::string body;
    std::vector<UniqueFd> fds;  ///< descriptors that came with it, in the order sent
  };
  /// The frame read() said is whole, moved out; the reader starts on the next.
  Frame take();
  /// The prefix that read() found to be junk, as a sentence's end ("a frame length of ...").
  std::string what_junk() const;
  /// Drops a frame half read (its sender died).
  void reset();
  /// Descriptors one frame may carry (what one sendmsg can: SCM_MAX_FD is 253).
  static constexpr std::size_t max_fds = 250;

 private:
  std::uint64_t max_kind_, max_length_;
  std::uint64_t prefix_ = 0;
  std::size_t prefix_done_ = 0;  // bytes of the prefix read so far
  std::string body_;             // sized once the prefix is in
  std::size_t body_done_ = 0;
  std::vector<UniqueFd> fds_;  // received with the frame being read
  void take_fds(msghdr& mh);
};

}  // namespace fibra::detail
