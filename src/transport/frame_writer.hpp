// src/transport/frame_writer.hpp: frames written to a Unix socket, and read whole where the reader
// may block (FrameReader, frame_reader.hpp, reads them piecemeal off a non-blocking one). A frame is
// a u64 prefix (its kind and length, wire::frame_prefix), then its body; descriptors sent with it
// (SCM_RIGHTS) go with its first bytes. The executor writes and reads its socket so; its agent
// writes batches so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace fibra::detail {

/// Writes what `fd` takes now of the frame (`prefix`, then `body`) whose first `done` bytes went
/// already; `fds` go with its first byte (so only when `done` is 0). Returns the bytes written, 0
/// if none could go now (a non-blocking socket that is full) or none is left to write, -1 if the
/// peer is gone or `fds` holds more than FrameReader::max_fds.
std::ptrdiff_t write_frame_some(int fd, std::uint64_t prefix, std::string_view body, std::size_t done,
                                std::span<const int> fds = {});
/// Writes the whole frame, waiting while the socket is full; false if the peer is gone.
bool write_frame(int fd, std::uint64_t prefix, std::string_view body, std::span<const int> fds = {});
/// Reads one whole frame off a blocking socket; false at its end (or on an error), with `body`
/// then unspecified.
bool read_frame(int fd, std::uint64_t& prefix, std::string& body);

}  // namespace fibra::detail
