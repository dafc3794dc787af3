// src/mpi.hpp: thin checked wrappers over the MPI C calls fibra makes.
#pragma once

#include <mpi.h>

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
