// src/transport/mpi.hpp: thin checked wrappers over the MPI C calls fibra makes.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace fibra::mpi {

/// MPI's own text for an error code.
std::string error_text(int code);
/// Throws MpiError("fibra: <call> failed: <MPI's text>") unless rc is MPI_SUCCESS.
void check(int rc, const char* call);

/// An MPI_Info, owned: created on the first set(), freed with its owner.
class Info {
 public:
  Info() = default;
  ~Info();
  Info(const Info&) = delete;
  Info& operator=(const Info&) = delete;
  /// Sets a key (MPI_Info_create on first use); throws MpiError.
  void set(const char* key, const char* value);
  MPI_Info get() const { return info_; }

 private:
  MPI_Info info_ = MPI_INFO_NULL;
};

/// Serializes MPI calls between the threads of one process (fibra asks for MPI_THREAD_SERIALIZED).
std::recursive_mutex& lock();

struct Message {
  int source = 0;
  int tag = 0;
  std::string data;
};

/// Receives one waiting message from any source on `comm`, if there is one. Never blocks on a
/// message that has not arrived.
bool try_recv(MPI_Comm comm, Message& m, int source = MPI_ANY_SOURCE);

/// One message made of header bytes and shared bodies, in the order
/// heads[0, ends[0]) + *bodies[0] + heads[ends[0], ends[1]) + *bodies[1] + ... + heads[ends.back(), end).
/// A large body is sent from where it is, not copied into the message.
struct Pieces {
  /// Bytes sent from where they are, kept alive by `keep` until the send is done.
  struct Body {
    std::string_view bytes;
    std::shared_ptr<const void> keep;
    Body(std::shared_ptr<const std::string> s) : bytes(*s), keep(std::move(s)) {}  // NOLINT: implicit on purpose
    Body(std::string_view b, std::shared_ptr<const void> k) : bytes(b), keep(std::move(k)) {}
  };
  std::string heads;
  std::vector<std::size_t> ends;  // one per body: where the heads before it end
  std::vector<Body> bodies;
  /// A message of `head` followed by `body` (a stored object's ObjectHead and bytes, say).
  static Pieces head_and_body(std::string head, std::string_view body, std::shared_ptr<const void> keep) {
    Pieces p;
    p.heads = std::move(head);
    p.ends.push_back(p.heads.size());
    p.bodies.emplace_back(body, std::move(keep));
    return p;
  }
  std::size_t size() const;
  /// Writes the message's size() bytes, in order, to `out`.
  void write_to(char* out) const;
  std::string joined() const;
};

/// Sends without blocking; keeps each buffer alive until MPI is done with it.
class SendQueue {
 public:
  SendQueue() = default;
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;
  ~SendQueue();
  void send(MPI_Comm comm, int dest, int tag, std::string data);
  /// Sends pieces as one message; bodies of 1 MiB or more in all are not copied.
  void send(MPI_Comm comm, int dest, int tag, Pieces pieces);
  /// Completes finished sends; returns how many are still going. A send that MPI reports failed
  /// throws MpiError, or, given `on_error`, is dropped and reported there with its communicator
  /// and destination rank.
  std::size_t progress(const std::function<void(MPI_Comm, int, const std::string&)>& on_error = {});
  /// Completes finished sends, waiting at most `seconds` for the rest; returns how many are left.
  std::size_t drain(double seconds);
  /// Sends still under way.
  std::size_t pending() const { return pending_.size(); }
  /// Cancels what is still going (for peers that are gone).
  void abandon() noexcept;
  /// Cancels what is still going to rank `dest` of `comm` (declared dead), with a tag in
  /// [first_tag, end_tag) (one simulated agent of a process, wire::tags_per_agent).
  void abandon(MPI_Comm comm, int dest, int first_tag = 0, int end_tag = INT_MAX) noexcept;

 private:
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Comm comm = MPI_COMM_NULL;
    int dest = 0;
    int tag = 0;
    std::string data;
    Pieces pieces;  // a message sent from its pieces
  };
  void start(std::unique_ptr<Pending> p, int tag, int dest, MPI_Datatype type, const void* buf, int count);
  std::deque<std::unique_ptr<Pending>> pending_;
};

double now_s();

/// Whether Open MPI's recovery is on in this job (orte_enable_recovery), so that a process of a
/// spawned job may end, even without MPI_Finalize, and the rest of the job runs on. Noted by the
/// Runtime before it sets its defaults (note_recovery): on for ./app (fibra sets it before
/// MPI_Init starts Open MPI's daemon), and under mpirun only if mpirun had it (--enable-recovery,
/// passed on as OMPI_MCA_orte_enable_recovery): set later, it changes nothing.
bool recovery_enabled() noexcept;
void note_recovery() noexcept;

}  // namespace fibra::mpi

namespace fibra::mpi {

/// How long a polling loop naps when nothing happened. MPI offers no wait that sleeps, so fibra
/// polls; the nap grows with the time since the last activity (a fortieth of it), so the delay it
/// adds to a reply stays under ~2.5% of the wait, while a long-idle process wakes only every
/// `idle_cap` and costs almost no CPU. Right after activity it spins briefly: a reply to a message
/// just sent usually comes within tens of microseconds.
class Napper {
 public:
  static constexpr double spin_s = 200e-6;
  static constexpr std::chrono::microseconds min_nap{10};
  /// `idle_cap`: the longest nap (an idle process wakes this often).
  explicit Napper(std::chrono::microseconds idle_cap = std::chrono::microseconds(10000)) : idle_cap_(idle_cap) {}

  /// Something happened.
  void busy() { last_busy_ = now_s(); }
  /// Nothing happened: how long to nap now (zero while still in the spin window, or while sends
  /// are under way: Open MPI's TCP transport moves a large message only while its sender makes MPI
  /// calls, so any nap would cut its bandwidth).
  std::chrono::microseconds next(bool sends_pending = false) const {
    const double quiet = now_s() - last_busy_;
    if (quiet < spin_s || sends_pending) return std::chrono::microseconds(0);
    auto nap = std::chrono::microseconds(static_cast<long>(quiet / 40 * 1e6));
    return std::clamp(nap, min_nap, idle_cap_);
  }

 private:
  std::chrono::microseconds idle_cap_;
  double last_busy_ = 0;
};

/// Makes this thread's timed sleeps end when asked (Linux's default slack adds ~50 us to each).
void precise_sleeps() noexcept;

}  // namespace fibra::mpi
