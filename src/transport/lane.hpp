// src/transport/lane.hpp: the same-host lane between the driver and one executor. Each executor shares a
// region of memory (a memfd its agent creates) with its agent: the mailbox at its start, then the
// lane. When the driver runs on the executor's host, it maps the same memfd (through
// /proc/<agent pid>/fd/<fd>) and hands batches to the executor, and takes its result frames, in
// that memory: no MPI message, no socket and no agent in between (the agent only looks at the lane
// on its rounds, to know how busy the executor is).
// Batches and result frames of up to 1 MiB take small slots; larger ones (up to MPI's 2 GiB) take
// the one large slot each way, a stretch of the memfd that is mapped as far as it is used and kept
// warm for the next (up to 256 MiB of it). What finds its slot taken goes the agent's way as
// before; so do requests (but calls on channels: the rings below), replies and actors' calls. The
// agent still watches the executor: when it dies, the agent closes the lane and reports the
// batches still in it, as it reports those it relayed.
//
// Slots change state by compare-and-swap (a plain store where no other side may change it), each
// transition made by one side:
//   down (batches): free -> writing -> posted (driver); posted -> taken -> free (executor);
//                   any -> closed (agent, once the executor is dead); closed -> free (agent, at a restart).
//   up (results):   free -> full (executor); full -> free, or full -> held -> free (driver: a large
//                   frame left in its slot while the call it answers decodes it, see take_result);
//                   large slot: free -> writing -> full, or writing -> free (executor: a frame encoded
//                   into the slot, see claim_large_result); writing -> free (agent, at a restart).
// A driver whose writing -> posted swap fails (the agent closed the slot meanwhile) sends the
// batch through the agent instead: a batch is either reported by the agent or run, never lost.
//
// Two byte rings follow the slots: a task's calls on queues, pipes and events (wire::Request, one
// writer: the executor, under its Inbox's lock) to the driver, and the driver's answers to them
// back (wire::Reply, written under the driver's lock for that ring). A call goes as fragments when
// it is larger than the room left, so that every call of a process takes the same way, in order; an
// answer goes whole or through the agent (answers carry their request's id: their order does not
// matter). Each ring is a head (its writer's) and a tail (its reader's), counted in bytes for ever;
// a record is an 8-byte header (its length, and whether more fragments follow; all ones: wrap to
// the start) and its bytes, padded to 8.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/unique_fd.hpp"
#include "fibra/detail/registry.hpp"  // Cursor

namespace fibra::detail {

/// Shared memory between an agent and its executor, at the start of the executor's region (before
/// the lane): which chunk and item the executor is on, so that when it dies the agent can say
/// which item it died on.
struct Mailbox {
  std::atomic<std::uint64_t> chunk{0};  // 0: between chunks
  Cursor item{0};
  std::atomic<double> timeout_s{0};       // of the chunk it is on (its TaskHeader::timeout_s)
  std::atomic<std::uint64_t> results{0};  // result frames it put in its lane
  // Set by the executor's SIGSEGV handler when the fault is at the end of a task thread's stack:
  // the agent then says the executor died of a stack overflow, not just of signal 11.
  std::atomic<std::uint32_t> stack_overflow{0};
  // Set by an actor's process that calls a channel, or that runs a Process (as it starts): its
  // agent tells the driver of its lane then (not only from its second batch on), so that its calls
  // may come through the lane's ring.
  std::atomic<std::uint32_t> wants_lane{0};
  // Set by the executor while it runs its pool's initializer (PoolOptions::initializer): work that
  // waits meanwhile is not stuck, and a death then is the initializer's.
  std::atomic<std::uint32_t> initializing{0};
  // Items its tasks read ahead from queues (ReadAhead in src/executor/channel_calls.cpp), for as long as the driver
  // owes them: each slot holds ahead_packed(token, taken), 0 when free. If its process dies, these
  // say how many of each delivery it took (gone with it) and which come back.
  std::atomic<std::uint64_t> ahead_taken[8] = {};
  /// Appends the slots in use to `out` and clears them (the process they describe is gone).
  void take_ahead_taken(std::vector<std::uint64_t>& out) {
    for (auto& s : ahead_taken)
      if (const std::uint64_t v = s.exchange(0, std::memory_order_acq_rel)) out.push_back(v);
  }
};

/// A delivery's token (under 2^48) and how many of its items were taken (under 2^16), in one word.
constexpr std::uint64_t ahead_packed(std::uint64_t token, std::uint64_t taken) { return token << 16 | taken; }
constexpr std::uint64_t ahead_token(std::uint64_t packed) { return packed >> 16; }
constexpr std::uint64_t ahead_count(std::uint64_t packed) { return packed & 0xffff; }

namespace lane {
// The driver keeps at most 2 batches in flight per executor (batches_per_worker), and counts one
// done when its results arrive, a moment before the executor frees its slot: room for both and
// for that moment, and for a task that waits (PoolImpl gives its worker a batch more).
inline constexpr std::size_t down_slots = 4;
inline constexpr std::size_t up_slots = 4;
inline constexpr std::size_t slot_bytes = std::size_t(1) << 20;  // larger batches and frames take the large slot
inline constexpr std::size_t control_offset = 4096;              // after the mailbox
inline constexpr std::size_t data_offset = 8192;
/// Each of the two rings of calls and answers (requests_offset, replies_offset).
inline constexpr std::size_t ring_bytes = std::size_t(1) << 20;
inline constexpr std::size_t requests_offset = data_offset + (down_slots + up_slots) * slot_bytes;
inline constexpr std::size_t replies_offset = requests_offset + ring_bytes;
/// The small slots and the rings; mapped whole by all three processes.
inline constexpr std::size_t region_bytes = replies_offset + ring_bytes;
/// The large slots, one each way, after the small ones: the memfd's size covers them, but no page
/// exists until it is written, and each process maps only as much as it has used.
inline constexpr std::size_t large_bytes = std::size_t(2) << 30;  // over MPI's limit of a message
inline constexpr std::size_t file_bytes = region_bytes + 2 * large_bytes;
/// What a large slot keeps of its pages once used (warm for the next payload); the rest is given back.
inline constexpr std::size_t large_kept = std::size_t(256) << 20;
}  // namespace lane

/// A view of one executor's region (mailbox and lane), mapped by whoever holds it.
class Lane {
 public:
  enum State : std::uint32_t { free = 0, writing, posted, taken, closed, full, held };
  struct Slot {
    // Written by the side that owns the slot, published by the release of `state`; atomic (relaxed)
    // because the agent may glance at a slot the driver is filling anew.
    std::atomic<std::uint32_t> state{closed};
    std::atomic<std::uint32_t> chunks{0};  // down: chunks in the batch (the agent's count of its executor's load);
                                           // up: 1 if the frame's large blocks were written in place
    std::atomic<std::uint64_t> seq{0};     // down: order of posting (the executor takes the oldest first)
    std::atomic<std::uint64_t> size{0};    // bytes in the slot
    std::atomic<std::uint32_t> sent{0};    // down, taken: its first chunks whose results the executor sent
  };
  /// A batch the dead executor held, and how many of its first chunks it had sent results for.
  struct Held {
    std::string_view batch;
    std::uint32_t sent = 0;
  };
  /// One ring's ends, each on a cache line of its own.
  struct RingEnds {
    alignas(64) std::atomic<std::uint64_t> head{0};  // bytes written (its writer's)
    alignas(64) std::atomic<std::uint64_t> tail{0};  // bytes read (its reader's)
  };
  struct Control {
    std::uint64_t magic = 0;
    std::uint64_t nonce = 0;  // the pool's (AgentSetup::lane_nonce): a driver maps only its own lanes
    std::int64_t agent_pid = 0;
    std::atomic<std::uint32_t> bell{0};        // bumped by whoever gives the executor something to read
    std::atomic<std::uint32_t> sleeping{0};    // threads of the executor waiting on bell (a futex)
    std::atomic<std::uint32_t> mapped{0};      // the driver uses this lane (else the executor need not watch it)
    std::atomic<std::uint32_t> calls_read{0};  // the driver reads its ring of calls (reads_calls)
    std::atomic<std::uint64_t> next_seq{1};
    Slot down[lane::down_slots + 1];  // the last: the large one
    Slot up[lane::up_slots + 1];
    RingEnds requests;  // executor -> driver: calls on channels
    RingEnds replies;   // driver -> executor: their answers
  };

  /// `base`: a mapping of lane::region_bytes of the memfd `fd` (which maps the large slots).
  Lane(void* base, int fd) : base_(static_cast<char*>(base)), fd_(fd) {}
  ~Lane();
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;
  Mailbox& mailbox() const;
  Control& control() const;

  // ---- the agent ----
  /// Writes the header (once, when the region is made); the lane stays closed until reopen().
  void init(std::uint64_t nonce, std::int64_t agent_pid);
  /// Opens every slot for a fresh executor (its first start and each restart).
  void reopen();
  /// The executor is dead: no slot takes a batch any more. Returns the batches it held (posted or
  /// taken), oldest first, as views into the region, valid until reopen().
  std::vector<Held> close();
  /// Chunks in batches given to the executor and not finished.
  std::size_t chunks_held() const;
  /// Wakes the executor if it sleeps (after the agent wrote to its socket).
  void ring();

  // ---- the driver ----
  /// Posts a batch of `size` bytes, written by `fill`, to a free slot; false if none is free, the
  /// batch is too large or the lane is closed (then it goes the agent's way).
  bool post(std::size_t size, std::uint32_t chunks, const std::function<void(char*)>& fill);
  /// Down slots holding a batch (the executor's queue, as the driver sees it).
  std::size_t busy() const;
  /// Takes back the newest batch the executor has not taken yet, copied into `batch` (posted ->
  /// free); false if none is posted or the executor took it first. A batch withdrawn as the agent closes the lane (the
  /// executor died) may also be reported by the agent as not run: the driver's requeue of an attempt is idempotent.
  bool withdraw(std::string& batch);
  /// The chunk the executor is in now (its mailbox), 0 between chunks.
  std::uint64_t running_chunk() const;
  /// Takes one result frame, if there is one, copied into `frame`.
  bool take_result(std::string& frame);
  enum class Took { none, copied, held };
  /// As take_result, except that a frame in the large slot is left where it lies: `held` views it,
  /// and the slot stays the driver's (the executor writes its next large frame to its socket) until
  /// release_held().
  Took take_result(std::string& frame, std::string_view& held, bool* in_place = nullptr);
  /// Gives back the large up slot a `held` frame of `size` bytes was left in.
  void release_held(std::size_t size);

  // ---- the executor ----
  /// Takes the oldest posted batch: `out` views it where it is (valid until finish()), or in
  /// `spill` when the large slot cannot be mapped (a tight `ulimit -v`); returns its slot, to
  /// finish() after its results were sent.
  std::optional<int> take(std::string_view& out, std::string& spill);
  void finish(int slot);
  /// Where the executor counts the chunks of a taken batch whose results it sent.
  std::atomic<std::uint32_t>& sent(int slot) { return control().down[std::size_t(slot)].sent; }
  /// The number of slots each way, the large one included.
  static constexpr std::size_t all_down = lane::down_slots + 1, all_up = lane::up_slots + 1;
  bool has_batch() const;
  /// The driver has mapped the lane: batches may come this way.
  bool in_use() const { return control().mapped.load(std::memory_order_relaxed) != 0; }
  /// The driver says it uses the lane.
  void mark_in_use() { control().mapped.store(1, std::memory_order_relaxed); }
  /// The driver reads the ring of calls of the process on this lane: it opened it when it mapped
  /// the lane of a process that wanted it (Mailbox::wants_lane). A process that has sent nothing
  /// through its socket yet (which a call in the ring could overtake) may then write its calls on
  /// channels there without asking (ChannelOp::ring).
  bool reads_calls() const { return control().calls_read.load(std::memory_order_acquire) != 0; }
  void mark_reads_calls() { control().calls_read.store(1, std::memory_order_release); }
  /// Puts a result frame in a free up slot; false if it does not fit or none is free.
  bool post_result(std::string_view frame);
  /// A stretch of a result frame whose bytes are in the claimed large up slot already.
  struct Range {
    std::size_t at = 0, n = 0;
  };
  /// Copies the first `size` bytes of `from` to `to`, all but the `gaps` (in order and apart).
  static void copy_around(char* to, const char* from, std::size_t size, const std::vector<Range>& gaps);
  /// For a result frame written into the large up slot as it is encoded (src/executor/results.cpp,
  /// FrameSpill): claims the slot (free -> writing; only this side leaves `free`, and the driver
  /// reads only a full slot) and maps at least `need` bytes of it; nullptr if it is not free or
  /// cannot be mapped.
  char* claim_large_result(std::size_t need);
  /// The claimed slot, mapped for at least `need` bytes; nullptr if it cannot be mapped that far.
  char* claimed_large_result(std::size_t need);
  /// Posts `frame` into the claimed slot, copying all but its `in_place` stretches; false if the
  /// slot cannot be mapped that far (then unclaim). `written_to`: how far the slot was written (a
  /// stretch cut from the frame may lie past its end); pages past the frame and lane::large_kept
  /// are given back.
  bool post_claimed(std::string_view frame, const std::vector<Range>& in_place, std::size_t written_to);
  /// Gives the claimed slot back unposted, after copying the `in_place` stretches into `frame`,
  /// which then holds all its bytes (for a frame that goes to the agent instead); its pages past
  /// lane::large_kept are given back.
  void unclaim(std::string& frame, const std::vector<Range>& in_place, std::size_t written_to);
  // ---- the rings of calls (src/executor/inbox.cpp) and answers (src/driver/pool_requests.cpp) ----
  /// The executor: writes the next fragment of `rest` (a call) and drops it from `rest`; false if
  /// there is no room now (the driver reads the ring at each of its passes).
  bool put_request(std::string_view& rest);
  /// The driver: a whole call, if its last fragment is there (`partial` keeps the first ones).
  /// Throws wire::Malformed if the ring holds what no executor writes.
  bool take_request(std::string& partial, std::string& out);
  bool has_request() const;
  /// The driver: an answer, whole; false if it does not fit now (then it goes through the agent).
  /// Rings the executor's bell.
  bool put_reply(std::string_view reply);
  /// The executor: the next answer, if there is one.
  bool take_reply(std::string& partial, std::string& out);
  bool has_reply() const;

  /// Spins for `spin` (yielding), then sleeps until rung or `sleep` passed, unless `ready` holds.
  void wait(std::chrono::microseconds spin, std::chrono::milliseconds sleep, const std::function<bool()>& ready);

 private:
  /// Where slot i's bytes are (nullptr: the large slot could not be mapped that far).
  static std::size_t capacity(std::size_t i, bool down);  // what slot i of a way holds at most
  char* slot_data(bool down, std::size_t i, std::size_t need);
  Took take_result(std::string& frame, std::string_view& held, bool may_hold, bool* in_place);
  /// Reads a large slot's bytes with pread, for when it cannot be mapped: no address space needed.
  bool read_large(bool down, std::size_t n, std::string& out) const;
  std::vector<std::string> spilled_;  // close(): large batches read that way (its views point here)
  /// Gives back the pages of the large slot in [from, used) past lane::large_kept.
  void trim_large(bool down, std::size_t used, std::size_t from = 0);
  char* base_;
  int fd_;
  struct Mapping {
    char* p = nullptr;
    std::size_t len = 0;
  };
  Mapping large_[2];  // down, up: this process's mappings of the large slots
};

/// A region mapped from a file descriptor (the agent's memfd, or the driver's open of it), owned.
class LaneRegion {
 public:
  /// Creates a memfd of lane::region_bytes and maps it (the agent); throws Error.
  static std::unique_ptr<LaneRegion> create();
  /// Maps the executor region behind `path` (the driver, "/proc/<agent pid>/fd/<fd>") if it is a
  /// lane of this pool's (`nonce`) made by `agent_pid`; nullptr otherwise, with the reason in `why`.
  static std::unique_ptr<LaneRegion> open(const std::string& path, std::uint64_t nonce, std::int64_t agent_pid,
                                          std::string& why);
  /// Maps the region of an inherited descriptor (the executor), which it then owns; nullptr (the
  /// descriptor closed) if it cannot.
  static std::unique_ptr<LaneRegion> adopt(UniqueFd fd);
  ~LaneRegion();
  LaneRegion(const LaneRegion&) = delete;
  LaneRegion& operator=(const LaneRegion&) = delete;
  Lane& lane() { return lane_; }
  int fd() const { return fd_.get(); }

 private:
  LaneRegion(UniqueFd fd, void* base) : fd_(std::move(fd)), base_(base), lane_(base, fd_.get()) {}
  UniqueFd fd_;
  void* base_;
  Lane lane_;
};

}  // namespace fibra::detail
