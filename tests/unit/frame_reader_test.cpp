// FrameReader: frames reassembled from a non-blocking socket however their bytes arrive.
#include "transport/frame_reader.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "transport/wire.hpp"

namespace {

using fibra::detail::FrameReader;
using Status = FrameReader::Status;

struct SocketPair {
  int r = -1, w = -1;
  SocketPair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    r = fds[0];
    w = fds[1];
    ::fcntl(r, F_SETFL, ::fcntl(r, F_GETFL) | O_NONBLOCK);
  }
  ~SocketPair() {
    if (r >= 0) ::close(r);
    if (w >= 0) ::close(w);
  }
  void write(const std::string& bytes) const {
    ASSERT_EQ(::write(w, bytes.data(), bytes.size()), ssize_t(bytes.size()));
  }
};

std::string prefix(std::uint64_t kind, std::uint64_t length) {
  const std::uint64_t p = fibra::wire::frame_prefix(kind, length);
  std::string s(sizeof p, '\0');
  std::memcpy(s.data(), &p, sizeof p);
  return s;
}

TEST(FrameReader, ReassemblesAFrameThatArrivesInPieces) {
  SocketPair s;
  FrameReader in(fibra::wire::frame_blocked, 1 << 20);
  bool got = false;
  EXPECT_EQ(in.read(s.r, got), Status::again);
  EXPECT_FALSE(got);
  const std::string head = prefix(fibra::wire::frame_request, 5);
  s.write(head.substr(0, 3));  // part of the prefix
  EXPECT_EQ(in.read(s.r, got), Status::again);
  EXPECT_TRUE(got);
  s.write(head.substr(3) + "he");  // the rest of it, and part of the body
  EXPECT_EQ(in.read(s.r, got), Status::again);
  s.write("llo" + prefix(0, 0));  // the body's end, then the empty frame
  ASSERT_EQ(in.read(s.r, got), Status::frame);
  const auto hello = in.take();
  EXPECT_EQ(hello.kind, fibra::wire::frame_request);
  EXPECT_EQ(hello.body, "hello");
  ASSERT_EQ(in.read(s.r, got), Status::frame);  // a frame of no bytes is whole at its prefix
  const auto empty = in.take();
  EXPECT_EQ(empty.kind, fibra::wire::frame_results);
  EXPECT_EQ(empty.body, "");
  EXPECT_EQ(in.read(s.r, got), Status::again);
}

TEST(FrameReader, RefusesAPrefixNoFrameHas) {
  {
    SocketPair s;
    FrameReader in(fibra::wire::frame_blocked, 1 << 20);
    bool got = false;
    s.write(prefix(fibra::wire::frame_blocked + 1, 4));  // a kind too many
    EXPECT_EQ(in.read(s.r, got), Status::junk);
    EXPECT_NE(in.what_junk().find("a frame length of "), std::string::npos);
  }
  SocketPair s;
  FrameReader in(fibra::wire::frame_blocked, 1 << 20);
  bool got = false;
  s.write(prefix(fibra::wire::frame_results, (1 << 20) + 1));  // longer than allowed
  EXPECT_EQ(in.read(s.r, got), Status::junk);
}

TEST(FrameReader, SaysClosedAtTheEndAndStartsAfreshAfterReset) {
  SocketPair s;
  FrameReader in(fibra::wire::frame_blocked, 1 << 20);
  bool got = false;
  s.write(prefix(fibra::wire::frame_results, 10) + "half");
  EXPECT_EQ(in.read(s.r, got), Status::again);
  in.reset();  // the sender died mid-frame: a new one starts from a prefix
  s.write(prefix(fibra::wire::frame_results, 2) + "ok");
  ASSERT_EQ(in.read(s.r, got), Status::frame);
  EXPECT_EQ(in.take().body, "ok");
  ::close(s.w);
  s.w = -1;
  EXPECT_EQ(in.read(s.r, got), Status::closed);
}

}  // namespace
