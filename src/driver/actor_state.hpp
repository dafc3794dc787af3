// src/driver/actor_state.hpp: the driver's record of one actor of a pool and of its calls
// (src/driver/pool_actors.cpp places them, sends the calls and handles deaths).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include "fibra/detail/core.hpp"
#include "fibra/detail/registry.hpp"
#include "transport/lane.hpp"

namespace fibra::detail {

// Actor calls are chunks of one item with ids of their own (this bit set), kept out of the
// scheduler: they go to one process in the order made, and are never retried elsewhere.
constexpr std::uint64_t actor_chunk_bit = std::uint64_t(1) << 63;

struct ActorCall {
  std::uint64_t chunk = 0;
  std::shared_ptr<JobState> job;
  std::shared_ptr<const std::string> payload;
  bool ctor = false;  // the constructor, which starts (and restarts) the actor
};

// One actor, on the driver (src/driver/pool_actors.cpp). Each start of it has a key of its own (the
// agent's name for its process), so that what the previous process sent is told apart.
struct ActorState {
  enum class State { placing, placed, dead };
  std::uint64_t id = 0;
  std::uint64_t key = 0;  // of the current start; 0 while placing
  const FunctionEntry* ctor = nullptr;
  std::shared_ptr<const std::string> ctor_args;
  ActorSettings settings;
  State state = State::placing;
  int worker = -1;  // Worker::id of its host while placed
  int restarts = 0;
  int handles = 1;                               // the driver's handles (start, and each Actor<T>::get)
  bool ended = false;                            // its last handle was dropped
  bool end_sent = false;                         // ... and its agent was told
  std::deque<ActorCall> queue;                   // not sent yet, in order
  std::map<std::uint64_t, ActorCall> in_flight;  // sent to the current process, by chunk id (= order)
  // The current process's lane, when its agent is on the driver's host (wire::ActorLane): once the
  // calls sent through MPI are back (`lane_active`), every batch goes there, one at a time, so
  // that none overtakes another.
  std::shared_ptr<LaneRegion> lane;
  bool lane_active = false;
  std::string death;  // why it is gone for good
};

}  // namespace fibra::detail
