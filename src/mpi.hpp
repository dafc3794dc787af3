// src/mpi.hpp: thin checked wrappers over the MPI C calls fibra makes.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

namespace fibra::mpi {

/// MPI's own text for an error code.
std::string error_text(int code);
/// Throws MpiError("fibra: <call> failed: <MPI's text>") unless rc is MPI_SUCCESS.
void check(int rc, const char* call);

/// Serializes MPI calls between the threads of one process (fibra asks for MPI_THREAD_SERIALIZED).
std::recursive_mutex& lock();

struct Message {
  int source = 0;
  int tag = 0;
  std::string data;
};

/// Receives one waiting message from any source on `comm`, if there is one. Never blocks on a
/// message that has not arrived.
bool try_recv(MPI_Comm comm, Message& m);

/// Sends without blocking; keeps each buffer alive until MPI is done with it.
class SendQueue {
 public:
  SendQueue() = default;
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;
  ~SendQueue();
  void send(MPI_Comm comm, int dest, int tag, std::string data);
  /// Completes finished sends; returns how many are still going.
  std::size_t progress();
  /// Completes finished sends, waiting at most `seconds` for the rest; returns how many are left.
  std::size_t drain(double seconds);
  /// Cancels what is still going (for peers that are gone).
  void abandon() noexcept;

 private:
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    std::string data;
  };
  std::deque<std::unique_ptr<Pending>> pending_;
};

double now_s();

}  // namespace fibra::mpi

namespace fibra::mpi {

/// How long a polling loop naps when nothing happened: short while work is flowing (a reply is
/// due within microseconds), growing to `idle_cap` once the loop has been quiet for a while, so an
/// idle process costs almost no CPU. MPI gives no blocking wait that sleeps, so fibra polls.
class Napper {
 public:
  static constexpr std::chrono::microseconds min_nap{10};
  static constexpr std::chrono::microseconds busy_cap{50};
  static constexpr std::chrono::microseconds idle_cap{2000};
  static constexpr double quiet_after_s = 0.05;

  /// Something happened: nap short again.
  void busy() {
    nap_ = min_nap;
    last_busy_ = now_s();
  }
  /// Nothing happened: the next nap to take.
  std::chrono::microseconds next() {
    const auto cap = now_s() - last_busy_ > quiet_after_s ? idle_cap : busy_cap;
    nap_ = std::min(cap, nap_ * 2);
    return nap_;
  }

 private:
  std::chrono::microseconds nap_{min_nap};
  double last_busy_ = 0;
};

}  // namespace fibra::mpi
