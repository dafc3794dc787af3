// src/transport/frame_reader.hpp: frames read off a non-blocking socket as their bytes arrive (the
// agent reads its executors' sockets this way, between its other work). A frame is a u64 prefix
// (its kind and length, wire::frame_prefix) and then its body.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

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
  /// byte was read.
  Status read(int fd, bool& got);
  struct Frame {
    std::uint64_t kind = 0;  ///< wire::FrameKind
    std::string body;
  };
  /// The frame read() said is whole, moved out; the reader starts on the next.
  Frame take();
  /// The prefix that read() found to be junk, as a sentence's end ("a frame length of ...").
  std::string what_junk() const;
  /// Drops a frame half read (its sender died).
  void reset();

 private:
  std::uint64_t max_kind_, max_length_;
  std::uint64_t prefix_ = 0;
  std::size_t prefix_done_ = 0;  // bytes of the prefix read so far
  std::string body_;             // sized once the prefix is in
  std::size_t body_done_ = 0;
};

}  // namespace fibra::detail
