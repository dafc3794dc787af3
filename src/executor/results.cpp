// A chunk's result into its frame, and the frame on its way (results.hpp).
#include "executor/results.hpp"

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <utility>

#include "fibra/detail/codec.hpp"
#include "executor/objects.hpp"
#include "task_side.hpp"
#include "executor/state.hpp"

namespace fibra::detail::exec {

thread_local constinit FrameSpill* FrameSpill::current = nullptr;

namespace {

// A task's result that may be kept on this host (TaskHeader::keep_from), whose large blocks are
// written straight into a memfd at the offsets they have in the result, rather than into the
// frame and again from there: the frame grows past each block without writing it, as FrameSpill's
// does. keep() writes the rest and seals it; undo() reads the blocks back into the frame when the
// result is sent after all (too small, or failed items).
class KeepSpill {
 public:
  KeepSpill(std::string* frame, std::size_t body, std::uint64_t id)
      : frame_(frame), body_(body), id_(id), outer_(current) {
    if (frame_) current = this;
  }
  ~KeepSpill() { stop(); }
  KeepSpill(const KeepSpill&) = delete;
  KeepSpill& operator=(const KeepSpill&) = delete;

  // The encoding is over: blocks go into the frame from now on.
  void stop() {
    if (frame_ && current == this) current = outer_;
  }
  // spill_large for this frame: true if the block went into the memfd.
  bool spill(std::string& out, const void* p, std::size_t n) {
    if (&out != frame_) return false;
    if (!fd_) open();
    const std::size_t at = out.size();
    if (!fd_ || !ObjectMemory::write_at(fd_.get(), {static_cast<const char*>(p), n}, at - body_))
      return false;  // (/dev/shm full)
    extend_unwritten(out, at + n, [this](char* to, const char* from, std::size_t size) {
      Lane::copy_around(to, from, size, blocks_);
    });
    blocks_.push_back({at, n});
    return true;
  }
  // The result (the frame from `body` on) whole in a sealed memfd; nullptr if it cannot be (the
  // frame is whole again then).
  std::unique_ptr<ObjectMemory> keep() {
    const std::string_view f(*frame_);
    const std::size_t size = f.size() - body_;
    if (size > max_result_bytes) {  // sent, and refused as too large for one message, as before
      undo();
      return nullptr;
    }
    if (!fd_) open();
    bool ok = !!fd_ && ::ftruncate(fd_.get(), off_t(std::max<std::size_t>(size, 1))) == 0;
    std::size_t at = body_;
    for (const auto& b : blocks_) {  // the bytes around the blocks written as they were encoded
      ok = ok && ObjectMemory::write_at(fd_.get(), f.substr(at, b.at - at), at - body_);
      at = b.at + b.n;
    }
    ok = ok && ObjectMemory::write_at(fd_.get(), f.substr(at), at - body_);
    if (!ok) {
      undo();
      return nullptr;
    }
    ObjectMemory::seal(fd_.get());
    blocks_.clear();
    return ObjectMemory::adopt(std::move(fd_), object_memfd_name(::getpid(), id_), size);
  }
  // The blocks read back into the frame, where they were skipped.
  void undo() {
    for (const auto& b : blocks_) {
      if (b.at + b.n > frame_->size()) break;
      for (std::size_t done = 0; done < b.n;) {
        const ssize_t k = ::pread(fd_.get(), frame_->data() + b.at + done, b.n - done, off_t(b.at + done - body_));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
          throw std::system_error(errno ? errno : EIO, std::generic_category(), "fibra: reading a result back");
        done += std::size_t(k);
      }
    }
    blocks_.clear();
  }

  static thread_local KeepSpill* current;

 private:
  void open() { fd_ = ObjectMemory::new_memfd(object_memfd_name(::getpid(), id_)); }
  std::string* frame_;
  std::size_t body_;
  std::uint64_t id_;  // TaskHeader::keep_id
  KeepSpill* outer_;
  UniqueFd fd_;
  std::vector<Lane::Range> blocks_;  // in the frame, in order
};
thread_local KeepSpill* KeepSpill::current = nullptr;

// A chunk's results in its frame, over what one MPI message can carry: they go, and a failure
// that says why takes their place.
void refuse_oversized(std::string& results, std::size_t at, wire::ResultHeader h, const wire::TaskHeader& t,
                      FrameSpill& spill) {
  const std::string why = "the results of items " + std::to_string(t.first) + ".." +
                          std::to_string(t.first + t.count - 1) + " encode to " + std::to_string(results.size() - at) +
                          " bytes, over the 2 GiB one MPI message can carry; use a smaller chunksize";
  results.resize(at);  // the result goes, and is no longer counted
  spill.cut(at);
  wire::set_count(results, wire::result_count(results) - 1);
  h.status = wire::Status::raised;
  wire::append_result(results, h, wire::encode(ItemFailure{0, "fibra::ConfigError", why}));
}

// A task's result, from `body` on in the frame, goes into a memfd of this process's (`spill` holds
// its large blocks already), which goes to the agent with the frame; a wire::Kept takes its place
// (docs/architecture.md, "The object store"). Without shared memory to be had it stays in the frame.
void keep_result(const wire::TaskHeader& t, std::string& results, std::size_t body, wire::ResultHeader& h,
                 KeepSpill& spill, KeptResults& kept) {
  std::unique_ptr<ObjectMemory> m = spill.keep();
  if (!m) return;  // /dev/shm full, say: sent as any result is
  const wire::Kept k{t.keep_id, results.size() - body};
  results.resize(body);
  results += wire::encode(k);
  h.status = wire::Status::kept;
  kept.push_back(std::move(m));
}

}  // namespace

void send_results(int sock, const std::string& frame, bool via_lane, FrameSpill& spill, KeptResults& kept) {
  if (!kept.empty()) {  // to the agent with their memfds, which it holds from then on
    spill.give_back();
    std::vector<int> fds;
    for (const auto& m : kept) fds.push_back(m->fd());
    send_frame(sock, frame, wire::frame_results, fds);
    kept.clear();
    return;
  }
  if (via_lane && (spill.post() || g_executor.lane->post_result(frame))) {
    Mailbox& box = g_executor.lane->mailbox();
    box.results.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  send_frame(sock, frame);
}

void run_chunk(const wire::TaskView& t, Mailbox& box, std::string& results, FrameSpill& spill, RunControl& ctl,
               std::vector<ItemFailure>& failures, KeptResults* kept) {
  const HolderScope holder;  // the locks it takes are its own, not those of a task waiting under it
  const FunctionEntry* fn = function_by_id(t.header.fn);
  ChunkRunner run = !fn ? nullptr : t.header.mode == CallMode::single ? fn->run_single : fn->run_tuple;
  wire::ResultHeader h{t.header.chunk, t.header.attempt, wire::Status::ok};
  if (g_executor.init_failure) {  // its pool's initializer threw: it runs no task
    h.status = wire::Status::init_failed;
    wire::append_result(results, h, wire::encode(*g_executor.init_failure));
    return;
  }
  if (!run) {
    h.status = wire::Status::unknown_fn;
    wire::append_result(results, h,
                        "a function this worker does not have (id " + std::to_string(t.header.fn) +
                            "): driver and workers must run the same binary");
    return;
  }
  const std::int64_t began = now_ns();
  h.start_us = wall_us_at(began);
  const std::size_t at = wire::open_result(results, h);
  const std::size_t body = results.size();
  ItemFailure fail;
  failures.clear();
  ctl.keep_going = t.header.keep_going;
  ctl.skip = t.header.skip;
  ctl.failures = &failures;
  thread_local std::string joined;  // arguments around stored objects (fibra::put), joined
  std::string_view args;
  bool ran = true;
  try {
    args = executor_arguments(t, g_executor.agent, joined);
  } catch (...) {
    fail = Items<Unit>::failure_at(0);
    ran = false;
  }
  // A result that may be kept has its large blocks written into a memfd, not the lane's slot.
  const bool may_keep = kept && t.header.keep_from > 0;
  KeepSpill keeping(may_keep ? &results : nullptr, body, t.header.keep_id);
  FrameSpill* const spilling = may_keep ? std::exchange(FrameSpill::current, nullptr) : FrameSpill::current;
  std::uint64_t waited = 0;  // (help_while_waiting adds to it)
  {
    ScopedSet<std::uint64_t*> counting(t_chunk_wait_ns, &waited);
    if (ran) ran = run(args, t.header.count, results, fail, box.item, ctl);
  }
  FrameSpill::current = spilling;
  keeping.stop();
  const bool keep = may_keep && ran && failures.empty() && results.size() - body >= t.header.keep_from;
  if (may_keep && ran && !keep) keeping.undo();
  if (joined.capacity() >= large_buffer) give_back_large(joined);  // not kept past its task
  h.run_ns = static_cast<std::uint64_t>(now_ns() - began);
  h.wait_ns = waited;
  if (!ran) {  // a failure replaces what the chunk wrote
    h.status = wire::Status::raised;
    results.resize(body);
    spill.cut(body);
    results += wire::encode(fail);
  } else if (!failures.empty()) {
    h.status = wire::Status::partial;
    spill.give_back();  // the results are read again below
    const std::string partial = wire::encode_partial(failures, std::string_view(results).substr(body));
    results.resize(body);
    results += partial;
  }
  if (keep) keep_result(t.header, results, body, h, keeping, *kept);
  wire::close_result(results, at, h);
  if (results.size() - at > max_result_bytes) refuse_oversized(results, at, h, t.header, spill);
}

}  // namespace fibra::detail::exec

namespace fibra::detail {

bool executor_spill_large(std::string& out, const void* p, std::size_t n) {
  using namespace exec;
  if (KeepSpill* k = KeepSpill::current; k && k->spill(out, p, n)) return true;
  FrameSpill* s = FrameSpill::current;
  if (!s || &out != s->frame) return false;  // not the frame of a batch from the lane
  const std::size_t at = out.size();
  if (at > lane::large_bytes || n > lane::large_bytes - at) return false;
  char* slot = s->claimed ? g_executor.lane->claimed_large_result(at + n) : g_executor.lane->claim_large_result(at + n);
  if (!slot) return false;  // the driver still holds the slot (or it cannot be mapped): the frame's way
  s->claimed = true;
  s->extend(at + n);
  copy_large(slot + at, p, n);
  s->in_place.push_back({at, n});
  s->written_to = std::max(s->written_to, at + n);
  return true;
}

}  // namespace fibra::detail
