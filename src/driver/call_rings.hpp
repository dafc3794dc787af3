// src/driver/call_rings.hpp: the rings through which processes on the driver's host send their
// calls on channels (ChannelOp::ring), one per process, each in that process's lane
// (src/transport/lane.hpp). The communication thread reads them at every pass, whether their
// worker is busy or not, until the process ends (its route is gone, its actor died, its worker
// said bye or was lost); what is left in a ring is read as it closes, so that a put that returned
// in the process is never lost with it. The rings are the communication thread's; a ring's
// answers are written by whichever thread gives them, under its reply_mu.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"
#include "transport/lane.hpp"

namespace fibra::detail {

struct Worker;

struct CallRing {
  Worker* worker = nullptr;
  int worker_id = 0;
  std::uint64_t route = 0;
  std::shared_ptr<LaneRegion> region;  // keeps the mapping while an answer may still be written
  std::string partial;                 // the first fragments of a call (the communication thread's)
  bool closing = false;                // let go of (the communication thread's): a bad call loses no worker now
  std::mutex reply_mu;                 // answers are written by whichever thread gives them
  bool closed = false;                 // under reply_mu: its process ended; answers still due are dropped (another
                                       // process may write this lane by now, under a CallRing of its own)
  std::map<std::uint64_t, UniqueFd> shared;  // under reply_mu: items handed over in memfds, by delivery
                                             // token, until the process acknowledges them
};

class CallRings {
 public:
  /// Handles one call read from a ring; throws wire::Malformed for one that does not decode.
  using OnCall = std::function<void(const std::shared_ptr<CallRing>&, const std::string&)>;
  /// A ring held a call that does not decode (`why`), read while its process still ran: every
  /// ring of its worker is closed by then, and the worker is to be declared lost.
  using OnBad = std::function<void(Worker&, const std::string& why)>;
  CallRings(OnCall on_call, OnBad on_bad) : on_call_(std::move(on_call)), on_bad_(std::move(on_bad)) {}

  /// The process at `route` of `w` sends its calls through `region` from now on (a ring at that
  /// route before it, whose process ended, is closed first, unread).
  void open(Worker& w, int worker_id, std::uint64_t route, std::shared_ptr<LaneRegion> region);
  /// Reads every ring; true if a call came.
  bool read_all();
  /// Reads the ring of `w`'s process at `route`, if it has one: a request it sent through its
  /// agent comes after the calls it put in its ring before.
  void read_of(const Worker& w, std::uint64_t route);
  /// Lets go of the rings of `w`'s processes (`route`: one of them), read first unless told not to.
  void close(const Worker& w, std::optional<std::uint64_t> route, bool read_first = true);
  bool empty() const { return rings_.empty(); }

 private:
  bool read(const std::shared_ptr<CallRing>& ring);

  OnCall on_call_;
  OnBad on_bad_;
  std::vector<std::shared_ptr<CallRing>> rings_;
};

}  // namespace fibra::detail
