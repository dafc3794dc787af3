// fibra/detail/checkpoint.hpp: a map/imap call's checkpoint (MapOptions::checkpoint), over the
// store of fibra::hdf5_io, and the driver's handling of SIGTERM/SIGUSR1 while checkpoints are open.
//
// The call opens the store before it dispatches anything, skips the items it holds (their results
// come from the store), records every chunk that comes back (failed items excepted) and flushes at
// most MapOptions::checkpoint_flush_s after a result arrived. See docs/pool.md, "Checkpoints".
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <typeinfo>
#include <string_view>
#include <vector>

#include "fibra/detail/codec.hpp"
#include "fibra/detail/core.hpp"
#include "fibra/detail/events.hpp"
#include "fibra/hdf5_io/store.hpp"

namespace fibra::detail {

/// The exit status of a driver stopped by SIGTERM/SIGUSR1 while a checkpoint was open (sysexits.h's
/// EX_TEMPFAIL): a batch script requeues the job when it sees it.
inline constexpr int stop_exit_status = 75;
/// How long a stopped call waits for the chunks it had already handed out before it flushes and
/// exits; chunks still out then run again on resume.
inline constexpr std::chrono::milliseconds stop_grace{3000};
/// How long the teardown after a stop may take before the process exits anyway (status 75).
inline constexpr std::chrono::seconds stop_teardown_limit{15};
/// The bytes_encoding recorded for results stored as bytes: fibra's codec (docs/checkpoint-format.md).
inline constexpr const char* checkpoint_bytes_encoding = "fibra-codec";

/// Called once a checkpoint is open: from then on SIGTERM and SIGUSR1 stop the driver with
/// status 75 instead of killing it (installs the handlers and the watcher thread on first use).
void checkpoint_opened();
/// The stop signal received (SIGTERM or SIGUSR1), 0 if none.
int stop_signal() noexcept;
/// Counts the checkpointed calls running, so that a stop with none running exits right away.
struct ActiveCheckpoint {
  ActiveCheckpoint();
  ~ActiveCheckpoint();
  ActiveCheckpoint(const ActiveCheckpoint&) = delete;
  ActiveCheckpoint& operator=(const ActiveCheckpoint&) = delete;
};
/// Ends the driver after a stop signal with status 75. Callers flush their checkpoint first.
/// `graceful` (the caller is the user's thread, in a checkpointed call): stop every pool and
/// finalize MPI first; otherwise (the signal watcher thread) only wait for checkpoint folds. Either
/// way the process exits within stop_teardown_limit. Runs once; a second caller waits.
[[noreturn]] void exit_for_stop(const std::string& what_was_saved, bool graceful = true);

/// The digest of a call's encoded inputs, in blocks of a fixed size so that it does not depend on
/// how the items were chunked.
class InputsDigest {
 public:
  static constexpr std::size_t block = 64 * 1024;
  /// Adds encoded bytes.
  void add(std::string_view bytes);
  /// The digest of everything added, as 16 hex digits.
  std::string hex();

 private:
  hdf5_io::Fingerprint fp_;
  std::string pending_;
};

/// The untyped part of a call's checkpoint: the store, flushing and the stop.
class CallCheckpoint {
 public:
  CallCheckpoint() = default;
  virtual ~CallCheckpoint();
  CallCheckpoint(const CallCheckpoint&) = delete;
  CallCheckpoint& operator=(const CallCheckpoint&) = delete;

  /// Resumes `path` if it was written for the same run, else creates it. A new file is created on
  /// a background thread while the call starts sending work (nothing is done in it); an error
  /// creating it surfaces when the first result is recorded.
  /// @throws CheckpointError for another run's file, one that is not a checkpoint, or damaged.
  void open(const std::string& path, const hdf5_io::RunRecord& run, const hdf5_io::ElementType& type, double flush_s);

  bool is_done(std::uint64_t i) const { return store_ && store_->is_done(i); }
  /// Items from `first` (at most `max`) that are all done, or all pending, like item `first`.
  std::uint64_t run_length(std::uint64_t first, std::uint64_t max) const;
  /// The encoded results of done items [first, first + count), as a worker would send them.
  virtual std::string encoded(std::uint64_t first, std::uint64_t count) const = 0;
  /// Records a chunk's results, leaving out its failed items (they run again on resume), and hands
  /// them to the kernel: once the caller sees a result, a SIGKILL of the driver cannot lose it.
  void record(const ChunkOutcome& o) {
    recorded_ = true;
    record_items(o);
    store().write_out();
  }
  /// From now on, each flush and fold goes to `sink` as a `checkpoint` event (the call's pool's
  /// event log; fibra/detail/events.hpp). An empty sink: none.
  void set_events(EventSink sink) { events_ = std::move(sink); }
  /// Flushes when the flush interval has passed; cheap otherwise.
  void flush_if_due();
  /// Makes everything recorded durable (the journal; cheap).
  void flush();
  /// Folds everything into the .h5 file (h5py then reads the whole run); nothing to do when the
  /// call recorded nothing and the file already held everything.
  void finish();
  /// The call is over (its checkpoint may still be folded in the background).
  void end_call() { active_.reset(); }
  /// Flushes, then ends the driver with status 75 (after a stop signal).
  [[noreturn]] void stop_and_exit();
  /// The store (waits for a new one to be created).
  hdf5_io::Store& store() const;

 protected:
  /// Calls put(k, n) for each run [k, k + n) of a chunk's items that did not fail (item_errors is
  /// sorted by offset).
  template <class Put>
  static void put_ok_ranges(const ChunkOutcome& o, Put&& put) {
    std::uint32_t k = 0;
    for (const auto& e : o.item_errors()) {
      if (e.offset > k) put(k, e.offset - k);
      k = std::max(k, e.offset + 1);
    }
    if (k < o.count) put(k, o.count - k);
  }
  virtual void record_items(const ChunkOutcome& o) = 0;

 private:
  mutable std::optional<hdf5_io::Store> store_;
  mutable std::future<hdf5_io::Store> creating_;  // a new checkpoint, created in the background
  std::uint64_t n_inputs_ = 0;
  std::optional<ActiveCheckpoint> active_{std::in_place};
  bool recorded_ = false;
  bool folded_at_open_ = false;  // the .h5 file held everything when the call opened it
  EventSink events_;             // the pool's event log, or empty
  std::string path_;             // as given to open()
  void note(const char* how);    // a `checkpoint` event, if there is a sink
};

/// A checkpoint for results of type R: native numbers, or the codec's bytes per item.
template <class R>
class TypedCheckpoint final : public CallCheckpoint {
  static constexpr bool native = hdf5_io::is_native_element<R>;

 public:
  std::string encoded(std::uint64_t first, std::uint64_t count) const override {
    if constexpr (native) {
      auto all = store().native_results().subspan(first * sizeof(R), count * sizeof(R));
      return std::string(reinterpret_cast<const char*>(all.data()), all.size());
    } else {
      std::string out;
      for (std::uint64_t i = first; i < first + count; ++i) {
        auto b = store().item_bytes(i);
        out.append(reinterpret_cast<const char*>(b.data()), b.size());
      }
      return out;
    }
  }

  void record_items(const ChunkOutcome& o) override {
    const char* p = o.bytes().data();
    if constexpr (native) {
      static_assert(is_raw_v<R>, "fibra: a native checkpoint element must be encoded byte for byte");
      put_ok_ranges(o, [&](std::uint32_t k, std::uint32_t n) {
        store().put(o.first + k, n,
                    std::as_bytes(std::span(p + std::size_t(k) * sizeof(R), std::size_t(n) * sizeof(R))));
      });
    } else {
      std::vector<std::span<const std::byte>> blobs = split(o);
      put_ok_ranges(
          o, [&](std::uint32_t k, std::uint32_t n) { store().put_bytes(o.first + k, std::span(blobs).subspan(k, n)); });
    }
  }

 private:
  // Each item's bytes within a chunk's payload (decoding walks over items of variable size).
  static std::vector<std::span<const std::byte>> split(const ChunkOutcome& o) {
    std::vector<std::span<const std::byte>> blobs(o.count);
    const auto* base = reinterpret_cast<const std::byte*>(o.bytes().data());
    Reader r(o.bytes());
    std::size_t at = 0;
    for (std::uint32_t i = 0; i < o.count; ++i) {
      if constexpr (is_raw_v<R>) {
        r.take(sizeof(R));
      } else {
        R skip{};
        decode(r, skip);
      }
      const std::size_t end = o.bytes().size() - r.left();
      blobs[i] = std::span(base + at, end - at);
      at = end;
    }
    return blobs;
  }
};

/// Ends a call that got every result: flushes its checkpoint now (every result is then durable),
/// and folds the journal into the .h5 file on a background thread, so that the caller does not wait
/// for that rewrite and its fsync. `wait_for_checkpoints` waits for those threads.
void finish_in_background(std::unique_ptr<CallCheckpoint> c);
/// Waits until every checkpoint handed to finish_in_background is folded. Called before a
/// checkpoint is opened, when the Runtime ends and before a stop; never throws.
void wait_for_checkpoints() noexcept;

/// The checkpoint of a call whose results are of type R (see CallCheckpoint::open).
template <class R>
std::unique_ptr<CallCheckpoint> make_checkpoint(const std::string& path, const hdf5_io::RunRecord& run,
                                                double flush_s) {
  auto c = std::make_unique<TypedCheckpoint<R>>();
  // Results stored as codec bytes name their C++ type and size, so a rerun whose function now
  // returns another type is refused rather than decoded wrongly.
  const std::string encoding =
      std::string(checkpoint_bytes_encoding) + ":" + demangle(typeid(R).name()) + ":" + std::to_string(sizeof(R));
  c->open(path, run, hdf5_io::element_type_of<R>(encoding), flush_s);
  return c;
}

}  // namespace fibra::detail
