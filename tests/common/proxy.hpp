// A recording TCP proxy for tests (tests/security/auth_test.cpp, tests/mpi/join_test.cpp): what
// a connector and a listener say to each other, both ways, as it passes, to look for what must not
// be on the wire; it may change what the listener sends. One connection; it ends with either side.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/unique_fd.hpp"
#include "transport/tcp.hpp"

namespace fibra_test {

using fibra::detail::UniqueFd;
namespace tcp = fibra::detail::tcp;

/// Listens on 127.0.0.1; `change` may alter what the listener sends (its stream's offset, the bytes).
class Proxy {
 public:
  using Change = std::function<void(std::size_t offset, std::string& bytes)>;
  Proxy(const std::string& host, std::uint16_t port, Change change = {}) : change_(std::move(change)) {
    tcp::Listener l = tcp::listen_on("127.0.0.1", "proxy");
    port_ = l.port;
    thread_ = std::thread([this, l = std::move(l), host, port]() mutable { run(std::move(l), host, port); });
  }
  ~Proxy() {
    stop_ = true;
    thread_.join();
  }
  std::uint16_t port() const { return port_; }
  std::string to_listener() {
    std::lock_guard lk(mu_);
    return up_;
  }
  std::string from_listener() {
    std::lock_guard lk(mu_);
    return down_;
  }

 private:
  void run(tcp::Listener l, const std::string& host, std::uint16_t port) {
    while (!stop_ && !tcp::wait_for(l.fd.get(), POLLIN, 100)) {
    }
    if (stop_) return;
    UniqueFd a(::accept4(l.fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
    std::string why;
    UniqueFd b = tcp::connect_to(host, port, 5'000, why);
    if (!a || !b) return;
    pollfd p[2] = {{a.get(), POLLIN, 0}, {b.get(), POLLIN, 0}};
    char buf[65536];
    while (!stop_) {
      if (::poll(p, 2, 100) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP))) continue;
        const ssize_t k = ::recv(p[i].fd, buf, sizeof buf, 0);
        if (k <= 0) return;  // (both ends close with the proxy)
        std::string bytes(buf, std::size_t(k));
        {
          std::lock_guard lk(mu_);
          if (i == 1 && change_) change_(down_.size(), bytes);
          (i == 0 ? up_ : down_) += std::string(buf, std::size_t(k));  // (as it came)
        }
        if (!tcp::write_all(p[1 - i].fd, bytes.data(), bytes.size())) return;
      }
    }
  }
  Change change_;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::string up_, down_;
  std::thread thread_;
};

}  // namespace fibra_test
