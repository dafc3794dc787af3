#include "transport/frame_writer.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "fibra/detail/codec.hpp"
#include "transport/frame_reader.hpp"
#include "transport/wire.hpp"

namespace fibra::detail {
namespace {

// Blocking, and not tcp::read_all: that one polls before each read (its bound on a peer across
// the network), a system call more on the executor's data path, whose socket blocks.
bool read_all(int fd, void* p, std::size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t k = ::read(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

}  // namespace

std::ptrdiff_t write_frame_some(int fd, std::uint64_t prefix, std::string_view body, std::size_t done,
                                std::span<const int> fds) {
  if (fds.size() > FrameReader::max_fds) return -1;  // more than one sendmsg can carry: the caller's error
  if (done >= sizeof prefix + body.size()) return 0;
  iovec v[2];
  int n = 0;
  if (done < sizeof prefix) v[n++] = {reinterpret_cast<char*>(&prefix) + done, sizeof prefix - done};
  const std::size_t body_done = done > sizeof prefix ? done - sizeof prefix : 0;
  v[n++] = {const_cast<char*>(body.data()) + body_done, body.size() - body_done};
  msghdr mh{};
  mh.msg_iov = v;
  mh.msg_iovlen = static_cast<std::size_t>(n);
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * FrameReader::max_fds)];
  if (done == 0 && !fds.empty()) {
    mh.msg_control = control;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    std::memset(control, 0, mh.msg_controllen);
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    const ssize_t k = ::sendmsg(fd, &mh, MSG_NOSIGNAL);
    if (k > 0) return k;
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    return -1;
  }
}

bool write_frame(int fd, std::uint64_t prefix, std::string_view body, std::span<const int> fds) {
  const std::size_t whole = sizeof prefix + body.size();
  for (std::size_t done = 0; done < whole;) {
    const std::ptrdiff_t k = write_frame_some(fd, prefix, body, done, done == 0 ? fds : std::span<const int>{});
    if (k < 0) return false;
    if (k == 0) {  // a non-blocking socket, full: wait until it takes more
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);
      continue;
    }
    done += static_cast<std::size_t>(k);
  }
  return true;
}

bool read_frame(int fd, std::uint64_t& prefix, std::string& body) {
  if (!read_all(fd, &prefix, sizeof prefix)) return false;
  resize_large(body, wire::frame_length(prefix));
  return read_all(fd, body.data(), body.size());
}

}  // namespace fibra::detail
