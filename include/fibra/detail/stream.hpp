// fibra/detail/stream.hpp: how a map/imap/starmap call feeds its inputs to a pool, chunk by chunk,
// in the caller's thread (ChunkStream), with the call's retry policy and its checkpoint.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <iterator>
#include <memory>
#include <optional>
#include <ranges>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fibra/detail/checkpoint.hpp"
#include "fibra/detail/codec.hpp"
#include "fibra/detail/core.hpp"
#include "fibra/detail/registry.hpp"
#include "fibra/error.hpp"
#include "fibra/options.hpp"
#include "fibra/version.hpp"

namespace fibra::detail {

/// The retry policy of a call: its options over the pool's defaults. Throws ConfigError.
inline RetryPolicy make_policy(RetryPolicy base, std::optional<unsigned> retries, std::optional<bool> retry_exceptions,
                               std::optional<double> task_timeout_s) {
  if (retries) base.retries = *retries;
  if (retry_exceptions) base.retry_exceptions = *retry_exceptions;
  if (task_timeout_s) {
    if (!(*task_timeout_s >= 0) || *task_timeout_s > 4e6)
      throw ConfigError("fibra: task_timeout_s must be between 0 (no limit) and 4e6 seconds, got " +
                        std::to_string(*task_timeout_s));
    base.task_timeout_s = *task_timeout_s;
  }
  return base;
}

inline RetryPolicy policy_for(const PoolCore& core, const MapOptions& o) {
  RetryPolicy p = make_policy(core.default_policy(), o.retries, o.retry_exceptions, o.task_timeout_s);
  p.keep_going = o.errors != nullptr;
  p.need = o.resources;
  return p;
}

inline std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown error";
  }
}

/// Encodes map/imap items as a function's only parameter `A` (converting when the input differs).
template <class A>
struct SingleArg {
  template <class X>
  static constexpr bool bulk = std::is_same_v<std::remove_cvref_t<X>, A>&& is_raw_v<A>;
  template <class X>
  static void one(Writer& w, const X& x) {
    if constexpr (std::is_same_v<std::remove_cvref_t<X>, A>)
      encode(w, x);
    else
      encode(w, A(x));
  }
};

/// Encodes starmap items (tuple-like: tuple, pair, array) as the tuple of a function's parameters.
template <class Tuple>
struct TupleArgs {
  template <class X>
  static constexpr bool bulk = false;
  template <class X>
  static void one(Writer& w, const X& x) {
    encode(w, std::apply([](const auto&... a) { return Tuple(a...); }, x));
  }
};

/// Feeds a range to a pool chunk by chunk, keeping at most `window` chunks unreleased, and hands
/// back their outcomes. Lives in the user's thread; not movable (it holds iterators into `view_`).
/// With a checkpoint attached, items it holds are not sent: their results come back from it as
/// outcomes of their own, and every outcome that arrives is recorded in it.
template <class View, class Enc>
class ChunkStream {
 public:
  ChunkStream(std::shared_ptr<PoolCore> core, const FunctionEntry& fn, CallMode mode, View view, const MapOptions& o,
              const char* call)
      : core_(std::move(core)),
        job_(std::make_shared<JobState>(fn, mode, policy_for(*core_, o))),
        view_(std::move(view)),
        it_(std::ranges::begin(view_)),
        progress_(std::string(call) + " " + fn.name, known_size(), o.progress),
        errors_(o.errors) {
    job_->time_items();  // later chunks are paced by what the first took
    if (core_->closed())
      throw PoolClosed(std::string("fibra: ") + call + "() on a pool that " + core_->closed_reason());
    const std::size_t workers = static_cast<std::size_t>(std::max(1, core_->size()));
    chunksize_ = o.chunksize;
    adaptive_ = chunksize_ == 0;
    if (adaptive_) {
      auto n = known_size();
      chunksize_ = n ? std::clamp<std::size_t>((*n + 4 * workers - 1) / (4 * workers), 1, 65536) : 65536;
    }
    window_ = o.max_inflight_chunks ? o.max_inflight_chunks : std::max<std::size_t>(8, 4 * workers);
  }
  ChunkStream(const ChunkStream&) = delete;
  ChunkStream& operator=(const ChunkStream&) = delete;
  ~ChunkStream() { job_->cancel(); }

  std::optional<std::uint64_t> known_size() const {
    if constexpr (std::ranges::sized_range<View>) return std::ranges::size(view_);
    return std::nullopt;
  }
  /// The chunk size asked for, or with chunksize 0 the largest one used.
  std::size_t chunksize() const { return chunksize_; }

  /// The digest of every input as it would be sent (a pass over the range before the call starts).
  std::string inputs_digest() requires std::ranges::forward_range<View> {
    InputsDigest d;
    const auto end = std::ranges::end(view_);
    using Item = std::ranges::range_value_t<View>;
    if constexpr (std::ranges::contiguous_range<View> && Enc::template bulk<Item> && !may_have_padding_v<Item>) {
      const auto* p = std::ranges::data(view_);
      d.add(std::string_view(reinterpret_cast<const char*>(p), std::ranges::size(view_) * sizeof(*p)));
    } else {
      std::string buf;
      Writer w(buf, /*for_digest=*/true);
      for (auto it = std::ranges::begin(view_); it != end; ++it) {
        Enc::one(w, *it);
        if (buf.size() >= InputsDigest::block) {
          d.add(buf);
          buf.clear();
        }
      }
      d.add(buf);
    }
    return d.hex();
  }

  /// From now on, items done in `c` are skipped and what arrives is recorded in it.
  void attach(std::unique_ptr<CallCheckpoint> c) { ckpt_ = std::move(c); }
  /// The pool's uid (PoolCore::uid), as its event log names it.
  std::uint64_t pool_uid() const { return core_->uid(); }

  /// Takes the next finished chunk (any order); false when every chunk has come back.
  /// Rethrows the chunk's error (RemoteError, ExecutorCrashed, PoolClosed).
  bool next(ChunkOutcome& out) {
    if (ckpt_ && stop_signal()) stop_now();
    fill();
    if (outstanding_ == 0) {
      if (ckpt_) finish_in_background(std::move(ckpt_));
      return false;
    }
    if (!resumed_.empty()) {
      out = std::move(resumed_.front());
      resumed_.pop_front();
    } else if (ckpt_) {
      wait_recorded(out);
    } else {
      job_->wait_next(out);
    }
    --outstanding_;
    if (out.error) std::rethrow_exception(out.error);
    if (errors_) {
      for (const auto& e : out.item_errors())
        errors_->push_back({static_cast<std::size_t>(out.first + e.offset), e.error, what_of(e.error)});
    }
    progress_.advance(out.count);
    if (outstanding_ == 0 && exhausted()) progress_.finish();
    return true;
  }
  /// A chunk's results were consumed: its slot in the window is free again.
  void release() { --unreleased_; }

 private:
  bool exhausted() { return it_ == std::ranges::end(view_); }

  void fill() {
    while (unreleased_ < window_ && !exhausted()) {
      if (!ckpt_) {
        submit_chunk(next_chunk_size());
      } else if (ckpt_->is_done(next_index_)) {
        take_resumed();
      } else {
        submit_chunk(ckpt_->run_length(next_index_, next_chunk_size()));
      }
    }
  }

  // An explicit chunksize is obeyed. With chunksize 0, chunks follow the measured time of the
  // call's items: one item until the first results are timed, then about target_chunk_s of work
  // (long enough to hide the per-chunk overhead, short enough to balance and to lose little on a
  // fault), never more than chunksize_ (about four chunks per worker).
  std::size_t next_chunk_size() const {
    if (!adaptive_) return chunksize_;
    const double per_item = job_->seconds_per_item();
    if (per_item <= 0) return 1;
    const double items = std::ceil(target_chunk_s / per_item);
    return items >= double(chunksize_) ? chunksize_ : std::max<std::size_t>(1, static_cast<std::size_t>(items));
  }

  void submit_chunk(std::size_t limit) {
    std::string payload;
    std::uint32_t n = 0;
    const auto end = std::ranges::end(view_);
    if constexpr (std::ranges::contiguous_range<View> && Enc::template bulk<std::ranges::range_value_t<View>>) {
      n = static_cast<std::uint32_t>(std::min<std::size_t>(limit, static_cast<std::size_t>(end - it_)));
      encode_items(payload, it_, n);
      it_ += n;
    } else {
      Writer w(payload);
      for (; n < limit && it_ != end; ++n, ++it_) Enc::one(w, *it_);
    }
    core_->submit(job_, next_index_, n, std::move(payload));
    next_index_ += n;
    ++outstanding_;
    ++unreleased_;
  }

  // Done items from the checkpoint become an outcome without a trip to the workers.
  void take_resumed() {
    const auto n = static_cast<std::uint32_t>(ckpt_->run_length(next_index_, std::max<std::size_t>(chunksize_, 4096)));
    std::ranges::advance(it_, static_cast<std::ranges::range_difference_t<View>>(n));
    resumed_.push_back({next_index_, n, ckpt_->encoded(next_index_, n), {}, {}});
    next_index_ += n;
    ++outstanding_;
    ++unreleased_;
  }

  // Waits for the next outcome, flushing on time while waiting, and records it.
  void wait_recorded(ChunkOutcome& out) {
    while (!job_->wait_next(out, std::chrono::milliseconds(50))) {
      ckpt_->flush_if_due();
      if (stop_signal()) stop_now();
    }
    if (!out.error) ckpt_->record(out);
    ckpt_->flush_if_due();
  }

  // After SIGTERM/SIGUSR1: nothing more is handed out; what is out may come back for a short
  // grace and is recorded; then the checkpoint is written and the driver exits with status 75.
  [[noreturn]] void stop_now() {
    const auto deadline = std::chrono::steady_clock::now() + stop_grace;
    ChunkOutcome o;
    for (std::size_t waiting = outstanding_ - resumed_.size(); waiting > 0; --waiting) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= left.zero() || !job_->wait_next(o, left)) break;
      if (!o.error) ckpt_->record(o);
    }
    job_->cancel();
    ckpt_->stop_and_exit();
  }

  std::shared_ptr<PoolCore> core_;
  std::shared_ptr<JobState> job_;
  View view_;
  std::ranges::iterator_t<View> it_;
  Progress progress_;
  static constexpr double target_chunk_s = 0.02;
  std::size_t chunksize_ = 1;
  bool adaptive_ = false;  // chunksize 0: sizes follow the measured time of items
  std::size_t window_ = 8;
  std::size_t outstanding_ = 0;  // submitted or resumed, outcome not yet taken
  std::size_t unreleased_ = 0;   // submitted or resumed, results not yet consumed
  std::uint64_t next_index_ = 0;
  std::vector<ItemError>* errors_ = nullptr;
  std::unique_ptr<CallCheckpoint> ckpt_;
  std::deque<ChunkOutcome> resumed_;  // outcomes taken from the checkpoint, not yet handed back
};

/// Opens the checkpoint a call asked for (MapOptions::checkpoint) and attaches it to the stream.
/// Throws ConfigError for an input range it cannot checkpoint, CheckpointError for another run's file.
template <class R, class Stream>
void attach_checkpoint(Stream& s, const FunctionEntry& fn, const MapOptions& o, const char* call) {
  if (o.checkpoint.empty()) return;
  constexpr bool ok = requires { s.inputs_digest(); };
  if constexpr (!ok) {
    throw ConfigError(std::string("fibra: ") + call + "() with checkpoint '" + o.checkpoint +
                      "' needs an input range that is sized and can be read twice (a checkpoint records the "
                      "number of inputs and a digest of them before the run starts); this one cannot: collect "
                      "the inputs into a std::vector first");
  } else {
    if (!s.known_size())
      throw ConfigError(std::string("fibra: ") + call + "() with checkpoint '" + o.checkpoint +
                        "' needs a sized input range (a checkpoint records the number of inputs before the run "
                        "starts); this one is not sized: collect the inputs into a std::vector first");
    hdf5_io::RunRecord run{fn.name, *s.known_size(), s.inputs_digest(), s.chunksize(), fibra::version};
    auto c = make_checkpoint<R>(o.checkpoint, run, o.checkpoint_flush_s);
    c->set_events(pool_event_sink(s.pool_uid()));  // its flushes in the pool's event log, if it writes one
    s.attach(std::move(c));
  }
}

}  // namespace fibra::detail
