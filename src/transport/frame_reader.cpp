#include "transport/frame_reader.hpp"

#include <unistd.h>

#include <cerrno>
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
    const ssize_t k = ::read(fd, dst, want);
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

FrameReader::Frame FrameReader::take() {
  Frame f{wire::frame_kind(prefix_), std::move(body_)};
  reset();
  return f;
}

std::string FrameReader::what_junk() const { return "a frame length of " + std::to_string(prefix_); }

void FrameReader::reset() {
  body_.clear();
  prefix_ = 0;
  prefix_done_ = 0;
  body_done_ = 0;
}

}  // namespace fibra::detail
