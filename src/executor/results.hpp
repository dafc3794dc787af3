// src/executor/results.hpp: a chunk run and its result encoded into its batch's result frame, and
// the frame sent: into the lane (its large blocks written in place, FrameSpill), to the agent, or
// kept on this host in a memfd (KeepSpill, results.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fibra/detail/core.hpp"
#include "transport/lane.hpp"
#include "transport/object_memory.hpp"
#include "executor/state.hpp"
#include "transport/wire.hpp"

namespace fibra::detail::exec {

// A result frame of a batch that came by the lane, whose large blocks (a large result vector, say)
// are encoded straight into the lane's large up slot, at the offsets they have in the frame, while
// that slot is free: the frame string grows past each block without writing it (spill_large), and
// posting the frame copies only the rest. Without this, each large result was copied once more,
// from the frame into the slot (docs/architecture.md, "Large payloads").
struct FrameSpill {
  std::string* frame = nullptr;
  bool claimed = false;               // the large up slot is this frame's (writing)
  std::vector<Lane::Range> in_place;  // in order, apart
  std::size_t written_to = 0;         // how far into the slot blocks were written
  FrameSpill* outer = nullptr;        // the frame of the batch a waiting task's wait interrupted

  FrameSpill(std::string& f, bool via_lane) : frame(via_lane ? &f : nullptr), outer(current) { current = this; }
  ~FrameSpill() {
    give_back();
    current = outer;
  }
  FrameSpill(const FrameSpill&) = delete;
  FrameSpill& operator=(const FrameSpill&) = delete;

  // The frame was cut to its first `size` bytes (a failed chunk's results dropped).
  void cut(std::size_t size) {
    while (!in_place.empty() && in_place.back().at >= size) in_place.pop_back();
    if (!in_place.empty() && in_place.back().at + in_place.back().n > size)
      in_place.back().n = size - in_place.back().at;
    if (in_place.empty()) give_back();  // nothing of the frame in the slot: free for a nested run's
  }
  // Makes the frame whole (its bytes all in the string) and lets the slot go.
  void give_back() {
    if (claimed) g_executor.lane->unclaim(*frame, in_place, written_to);
    claimed = false;
    in_place.clear();
    written_to = 0;
  }
  // Grows the frame to n bytes past a block written in place; a new buffer gets only the bytes
  // around the blocks (copying the unwritten ones would fault their pages in for nothing).
  void extend(std::size_t n) {
    extend_unwritten(*frame, n, [this](char* to, const char* from, std::size_t size) {
      Lane::copy_around(to, from, size, in_place);
    });
  }
  // Posts the frame into the claimed slot; false if it holds none (or the slot cannot be mapped
  // that far: then the frame is made whole for the agent's way).
  bool post() {
    if (!claimed) return false;
    if (in_place.empty() || !g_executor.lane->post_claimed(*frame, in_place, written_to)) {
      give_back();
      return false;
    }
    claimed = false;
    in_place.clear();
    written_to = 0;
    return true;
  }

  static thread_local constinit FrameSpill* current;
};

// Results kept on this host (TaskHeader::keep_from): their memfds, until the frame that names them
// has gone to the agent with them.
using KeptResults = std::vector<std::unique_ptr<ObjectMemory>>;

// A batch's result frame: into the lane if the batch came that way and the frame fits, else to the
// agent (whose count of what this executor holds needs the results of what it gave). A frame that
// names kept results goes to the agent, with their memfds.
void send_results(int sock, const std::string& frame, bool via_lane, FrameSpill& spill, KeptResults& kept);

// Runs one chunk and appends its result to the frame: its results, encoded straight into the
// frame, or what replaced them (the failure of an item, the failed items of a keep_going call, a
// function this binary does not have). `kept` (none on an actor's call
// thread): where a result kept on this host goes.
void run_chunk(const wire::TaskView& t, Mailbox& box, std::string& results, FrameSpill& spill, RunControl& ctl,
               std::vector<ItemFailure>& failures, KeptResults* kept = nullptr);

}  // namespace fibra::detail::exec
