#include "transport/frame_reader.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "fibra/detail/codec.hpp"
#include "transport/wire.hpp"

namespace fibra::detail {

FrameReader::Status FrameReader::read(int fd, bool& got) {
  for (;;) {
    const bool in_prefix = prefix_done_ < sizeof prefix_;
    if (!in_prefix && body_done_ == body_.size()) return Status::frame;
    char* dst = in_prefix ? reinterpret_cast<char*>(&prefix_) + prefix_done_ : body_.data() + body_done_;
    const std::size_t want = in_prefix ? sizeof prefix_ - prefix_done_ : body_.size() - body_done_;
    // recvmsg, not read: a descriptor sent with the frame would be closed by a plain read. A read
    // never goes past the frame (or prefix) it is in, and the sender attaches descriptors to a
    // frame's first bytes, in a sendmsg of that frame alone: so descriptors that come belong to the
    // frame being read.
    iovec iov{dst, want};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * max_fds)];
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    const ssize_t k = ::recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    if (k > 0 && mh.msg_controllen > 0) take_fds(mh);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::again;
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return Status::closed;
    got = true;
    if (!in_prefix) {
      body_done_ += static_cast<std::size_t>(k);
      continue;
    }
    prefix_done_ += static_cast<std::size_t>(k);
    if (prefix_done_ < sizeof prefix_) continue;
    if (wire::frame_kind(prefix_) > max_kind_ || wire::frame_length(prefix_) > max_length_) return Status::junk;
    // The body goes into a buffer of its own, which may travel on as it is (no zero fill first).
    resize_large(body_, wire::frame_length(prefix_));
    body_done_ = 0;
  }
}

void FrameReader::take_fds(msghdr& mh) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < n; ++i) {
      int one;
      std::memcpy(&one, CMSG_DATA(c) + i * sizeof(int), sizeof one);
      fds_.emplace_back(one);
    }
  }
}

FrameReader::Frame FrameReader::take() {
  Frame f{wire::frame_kind(prefix_), std::move(body_), std::move(fds_)};
  reset();
  return f;
}

std::string FrameReader::what_junk() const { return "a frame length of " + std::to_string(prefix_); }

void FrameReader::reset() {
  body_.clear();
  fds_.clear();
  prefix_ = 0;
  prefix_done_ = 0;
  body_done_ = 0;
}

}  // namespace fibra::detail
