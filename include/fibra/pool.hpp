// fibra/pool.hpp: fibra::Pool, Python's multiprocessing.Pool over MPI-spawned workers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <ranges>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fibra/detail/checkpoint.hpp"
#include "fibra/detail/codec.hpp"
#include "fibra/detail/core.hpp"
#include "fibra/detail/registry.hpp"
#include "fibra/error.hpp"
#include "fibra/future.hpp"
#include "fibra/version.hpp"

namespace fibra {

/// @brief Settings of a pool, fixed when it starts. See docs/fault-tolerance.md.
struct PoolOptions {
  double heartbeat_s = 1.0;       ///< each side says it is alive after this much silence
  double worker_silence_s = 10;   ///< a worker silent this long is declared lost; its work runs elsewhere
  double driver_silence_s = 30;   ///< workers exit when the driver is silent this long (orphan guard)
  double start_timeout_s = 60;    ///< Pool() and resize() give up on workers not started by then
  unsigned retries = 3;           ///< default MapOptions::retries (also for apply_async)
  bool retry_exceptions = false;  ///< default MapOptions::retry_exceptions (also for apply_async)
  double task_timeout_s = 0;      ///< default MapOptions::task_timeout_s (also for apply_async); 0: none
  /// Workers run as executors (plain processes) under agents (MPI processes, one MPI_Comm_spawn
  /// each, about 0.3 s apiece here): this many workers per agent. 0: automatic, the workers spread
  /// evenly over at most 4 agents (a pool of 4 or fewer has one agent per worker). A lost agent
  /// costs the chunks of all its workers, as a lost node would; a crashed worker only its own.
  int workers_per_agent = 0;
};

/// @brief One item that failed in a call that collects errors (MapOptions::errors).
struct ItemError {
  std::size_t index = 0;     ///< the item's position in the input
  std::exception_ptr error;  ///< RemoteError, ExecutorCrashed, TaskTimeout or WorkerLost
  std::string message;       ///< the error's what()
};

/// @brief Settings of one map/imap/starmap call.
struct MapOptions {
  std::size_t chunksize = 0;            ///< items per chunk; 0: automatic (see docs/pool.md)
  std::optional<bool> progress;         ///< progress on stderr; default: on when stderr is a terminal
  std::size_t max_inflight_chunks = 0;  ///< chunks queued or running at once; 0: 4 per worker (min 8)
  /// Failed attempts of a chunk (crash, time limit, lost worker; exceptions if retry_exceptions)
  /// that are run again before the call fails. Default: PoolOptions::retries (3).
  std::optional<unsigned> retries;
  /// Run a chunk again when one of its items throws (default: no; exceptions are usually
  /// deterministic).
  std::optional<bool> retry_exceptions;
  /// Seconds one item may run before its executor is killed and the attempt counts as failed
  /// (TaskTimeout). Default: PoolOptions::task_timeout_s; 0: no limit.
  std::optional<double> task_timeout_s;
  /// When set, the call does not throw for failed items: it runs every item, puts R{} in the place
  /// of each failed one and appends an ItemError for it here (map: sorted by index; imap: as they
  /// come). Errors that stop the whole pool (PoolClosed) still throw.
  std::vector<ItemError>* errors = nullptr;
  /// A checkpoint file (HDF5) for this call; empty: none. Completed results are written to it as
  /// they arrive; a rerun with the same function and inputs loads them, runs only the rest and
  /// returns the same results. Another run's file is refused with CheckpointError. While a
  /// checkpoint is open, SIGTERM/SIGUSR1 make the driver flush and exit with status 75.
  /// Needs a sized input range. See docs/pool.md, "Checkpoints".
  std::string checkpoint;
  /// Results that arrived are flushed to the checkpoint at most this many seconds later; a SIGKILL
  /// of the driver loses at most these.
  double checkpoint_flush_s = 1.0;
};

namespace detail {

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
  static constexpr bool bulk = std::is_same_v<std::remove_cvref_t<X>, A> && is_raw_v<A>;
  template <class X>
  static void one(Writer& w, const X& x) {
    if constexpr (std::is_same_v<std::remove_cvref_t<X>, A>) encode(w, x);
    else encode(w, A(x));
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

// ---- compile-time checks of Pool calls, each with fibra's own sentence ------------------------

/// Parameters of a function pointer (noexcept or not); -1 for anything else.
template <class F>
struct arity : std::integral_constant<int, -1> {};
template <class R, class... P>
struct arity<R (*)(P...)> : std::integral_constant<int, int(sizeof...(P))> {};
template <class R, class... P>
struct arity<R (*)(P...) noexcept> : std::integral_constant<int, int(sizeof...(P))> {};
/// What a call was given as its function, decayed as a function name decays to its address.
template <class F>
inline constexpr int arity_v = arity<std::decay_t<F>>::value;

template <class From, class To>
concept brace_converts = requires(From f) { To{f}; };

/// True when an item X would lose value as the parameter A (a double into an int, an int into a
/// short or an unsigned). An integer into a floating-point parameter is let through, as Python does.
template <class X, class A>
inline constexpr bool narrows_v = [] {
  using F = std::remove_cvref_t<X>;
  using T = std::remove_cvref_t<A>;
  if constexpr (std::is_arithmetic_v<F> && std::is_arithmetic_v<T> &&
                !(std::is_integral_v<F> && std::is_floating_point_v<T>))
    return !brace_converts<F, T>;
  else
    return false;
}();

/// An input item of type X is given to a parameter of type A.
template <class X, class A>
constexpr bool check_item() {
  using P = std::remove_cvref_t<A>;
  static_assert(std::is_constructible_v<P, const std::remove_cvref_t<X>&>,
                "fibra: an input does not convert to the function's parameter type: pass items of the type the "
                "function takes");
  static_assert(!narrows_v<X, A>,
                "fibra: an input would be narrowed into the function's parameter (a double into an int, say), "
                "losing what does not fit: convert the inputs yourself first (std::views::transform and a "
                "static_cast) or change the parameter's type");
  return true;
}

/// A starmap item (a tuple, pair or array) against the function's parameters P...
template <class Item, class... P>
constexpr bool check_tuple_item() {
  constexpr bool tuple_like = requires { std::tuple_size<Item>::value; };
  static_assert(tuple_like,
                "fibra: starmap takes a range of tuples (or pairs or std::arrays) of arguments, one per call; for a "
                "function of one parameter, use map");
  if constexpr (tuple_like) {
    static_assert(std::tuple_size_v<Item> == sizeof...(P),
                  "fibra: starmap: each item has a different number of elements than the function has parameters");
    if constexpr (std::tuple_size_v<Item> == sizeof...(P)) {
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return (check_item<std::tuple_element_t<I, Item>, P>() && ...);
      }(std::index_sequence_for<P...>{});
    }
  }
  return true;
}

/// What a call was given is not a free function of the right arity: the sentence that says so.
template <class F, bool one_parameter>
constexpr void refuse_function() {
  using D = std::decay_t<F>;
  static_assert(!std::is_class_v<D>,
                "fibra: a lambda or function object cannot run on a worker (it has no name another process can "
                "look up): pass a free function registered with FIBRA_REMOTE");
  static_assert(!std::is_member_function_pointer_v<D>,
                "fibra: a member function cannot run on a worker (it needs an object the worker does not have): "
                "pass a free function, registered with FIBRA_REMOTE, that takes the object as a parameter");
  static_assert(!(one_parameter && arity_v<F> >= 0),
                "fibra: map, imap and imap_unordered call the function with one item, so it must take one "
                "parameter; for a function of several, pass tuples of arguments to starmap (or call apply_async)");
  static_assert(std::is_class_v<D> || std::is_member_function_pointer_v<D> || arity_v<F> >= 0,
                "fibra: pass a free function registered with FIBRA_REMOTE");
}

/// Feeds a range to a pool chunk by chunk, keeping at most `window` chunks unreleased, and hands
/// back their outcomes. Lives in the user's thread; not movable (it holds iterators into `view_`).
/// With a checkpoint attached, items it holds are not sent: their results come back from it as
/// outcomes of their own, and every outcome that arrives is recorded in it.
template <class View, class Enc>
class ChunkStream {
 public:
  ChunkStream(std::shared_ptr<PoolCore> core, const FunctionEntry& fn, CallMode mode, View view,
              const MapOptions& o, const char* call)
      : core_(std::move(core)), job_(std::make_shared<JobState>(fn, mode, policy_for(*core_, o))),
        view_(std::move(view)), it_(std::ranges::begin(view_)),
        progress_(std::string(call) + " " + fn.name, known_size(), o.progress), errors_(o.errors) {
    if (core_->closed()) throw PoolClosed(std::string("fibra: ") + call + "() on a pool that was closed");
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
      for (const auto& e : out.item_errors)
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
    s.attach(make_checkpoint<R>(o.checkpoint, run, o.checkpoint_flush_s));
  }
}

/// The results of imap (ordered: yields R) or imap_unordered (yields {index, R}), as an input range
/// that computes while it is read. Memory stays bounded by the window of chunks in flight.
template <class R, class View, class Enc, bool Ordered>
class ImapResults {
  using Stream = ChunkStream<View, Enc>;

 public:
  using value_type = std::conditional_t<Ordered, R, std::pair<std::size_t, R>>;

  ImapResults(std::unique_ptr<Stream> s) : s_(std::move(s)) {}

  class iterator {
   public:
    using value_type = ImapResults::value_type;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    explicit iterator(ImapResults* r) : r_(r) { r_->advance(); }
    value_type& operator*() const { return r_->current_; }
    value_type* operator->() const { return &r_->current_; }
    iterator& operator++() {
      r_->advance();
      return *this;
    }
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return r_ == nullptr || r_->at_end_; }

   private:
    ImapResults* r_ = nullptr;
  };

  /// Starts (or resumes) reading; an ImapResults is read once.
  iterator begin() { return iterator(this); }
  std::default_sentinel_t end() { return {}; }

 private:
  void advance() {
    if (at_end_) return;
    while (pos_ >= buf_.size()) {
      if (!load_chunk()) {
        at_end_ = true;
        return;
      }
    }
    if constexpr (Ordered) current_ = std::move(buf_[pos_]);
    else current_ = value_type(static_cast<std::size_t>(first_ + pos_), std::move(buf_[pos_]));
    ++pos_;
  }

  // Decodes the next chunk to yield into buf_; false when all are done.
  bool load_chunk() {
    static_assert(!std::is_same_v<R, bool>,
                  "fibra: imap cannot return bool results (std::vector<bool> is packed): return int or char");
    if (have_chunk_) s_->release();
    have_chunk_ = false;
    ChunkOutcome o;
    if constexpr (Ordered) {
      while (!waiting_.count(next_first_)) {
        if (!s_->next(o)) return false;
        std::uint64_t f = o.first;
        waiting_.emplace(f, std::move(o));
      }
      auto node = waiting_.extract(next_first_);
      o = std::move(node.mapped());
      next_first_ += o.count;
    } else {
      if (!s_->next(o)) return false;
    }
    buf_.assign(o.count, R{});
    decode_items(o.bytes(), buf_.data(), o.count);
    first_ = o.first;
    pos_ = 0;
    have_chunk_ = true;
    return true;
  }

  std::unique_ptr<Stream> s_;
  std::vector<R> buf_;
  std::size_t pos_ = 0;
  std::uint64_t first_ = 0;
  std::uint64_t next_first_ = 0;
  bool have_chunk_ = false;
  bool at_end_ = false;
  std::map<std::uint64_t, ChunkOutcome> waiting_;
  value_type current_{};
};

}  // namespace detail

/// @brief A pool of worker processes, spawned with MPI_Comm_spawn, with the API of Python's
/// `multiprocessing.Pool`.
///
/// @code
///   fibra::Pool pool(8);
///   std::vector<double> r = pool.map(rollout, params);          // ordered results
///   for (auto&& [i, v] : pool.imap_unordered(rollout, params)) { ... }
///   fibra::Future<double> f = pool.apply_async(rollout, p);
/// @endcode
/// Functions must be registered with FIBRA_REMOTE. A task that throws makes the call throw
/// fibra::RemoteError; the pool keeps working. The destructor terminates the workers.
class Pool {
 public:
  /// @brief Starts `workers` workers (0: one per core of this machine) and waits until all are ready.
  /// @throws MpiError if MPI cannot spawn them (too few slots: the message says what to set),
  ///         ConfigError if fibra::Runtime was not created first.
  explicit Pool(int workers = 0, PoolOptions options = {});
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  Pool(Pool&&) noexcept = default;
  Pool& operator=(Pool&&) noexcept = default;

  /// @brief Number of workers the pool runs.
  int size() const { return core().size(); }

  /// @brief Applies `fn` to every item of `inputs`; returns the results in input order.
  /// @throws RemoteError for the first item whose task threw (the pool keeps working).
  template <class R, class A, std::ranges::input_range Range>
  std::vector<std::remove_cvref_t<R>> map(R (*fn)(A), Range&& inputs, const MapOptions& o = {}) {
    static_assert(detail::check_signature<R, A>() && detail::check_item<std::ranges::range_reference_t<Range>, A>());
    using Enc = detail::SingleArg<std::remove_cvref_t<A>>;
    return collect<std::remove_cvref_t<R>, Enc>(fn, detail::CallMode::single, std::forward<Range>(inputs), o, "map");
  }

  /// @brief Like map for a function of several parameters: each item is a tuple (or pair) of them.
  template <class R, class... P, std::ranges::input_range Range>
  std::vector<std::remove_cvref_t<R>> starmap(R (*fn)(P...), Range&& inputs, const MapOptions& o = {}) {
    static_assert(detail::check_signature<R, P...>() &&
                  detail::check_tuple_item<std::ranges::range_value_t<Range>, P...>());
    using Enc = detail::TupleArgs<std::tuple<std::remove_cvref_t<P>...>>;
    return collect<std::remove_cvref_t<R>, Enc>(fn, detail::CallMode::tuple, std::forward<Range>(inputs), o,
                                                 "starmap");
  }

  /// @brief Lazily applies `fn` over `inputs`, yielding results in input order as they are ready.
  /// Keeps at most MapOptions::max_inflight_chunks chunks in memory, so the input may be huge.
  /// The input range must outlive the iteration if passed as an lvalue.
  template <class R, class A, std::ranges::input_range Range>
  auto imap(R (*fn)(A), Range&& inputs, const MapOptions& o = {}) {
    static_assert(detail::check_signature<R, A>() && detail::check_item<std::ranges::range_reference_t<Range>, A>());
    return stream<std::remove_cvref_t<R>, detail::SingleArg<std::remove_cvref_t<A>>, true>(
        fn, std::forward<Range>(inputs), o, "imap");
  }

  /// @brief Like imap, but yields `{index, result}` pairs in the order they finish.
  template <class R, class A, std::ranges::input_range Range>
  auto imap_unordered(R (*fn)(A), Range&& inputs, const MapOptions& o = {}) {
    static_assert(detail::check_signature<R, A>() && detail::check_item<std::ranges::range_reference_t<Range>, A>());
    return stream<std::remove_cvref_t<R>, detail::SingleArg<std::remove_cvref_t<A>>, false>(
        fn, std::forward<Range>(inputs), o, "imap_unordered");
  }

  /// @brief Runs `fn(args...)` on a worker; the future holds its result.
  template <class R, class... P, class... Args>
  Future<std::remove_cvref_t<R>> apply_async(R (*fn)(P...), Args&&... args) {
    static_assert(sizeof...(P) == sizeof...(Args),
                  "fibra: apply_async got a different number of arguments than the function takes");
    static_assert(detail::check_signature<R, P...>());
    if constexpr (sizeof...(P) == sizeof...(Args)) static_assert((detail::check_item<Args, P>() && ...));
    auto& core = this->core();  // a moved-from pool throws PoolClosed before anything else
    const auto& entry = detail::function_by_address(reinterpret_cast<const void*>(fn), "apply_async");
    std::string payload;
    detail::Writer w(payload);
    detail::CallMode mode = detail::CallMode::tuple;
    if constexpr (sizeof...(P) == 1) {
      mode = detail::CallMode::single;
      (detail::SingleArg<std::remove_cvref_t<P>>::one(w, args), ...);
    } else {
      detail::encode(w, std::tuple<std::remove_cvref_t<P>...>(std::forward<Args>(args)...));
    }
    auto job = std::make_shared<detail::JobState>(entry, mode, core.default_policy());
    core.submit(job, 0, 1, std::move(payload));
    return Future<std::remove_cvref_t<R>>(std::move(job));
  }

  // What is not a free function (a lambda, a member function) or has the wrong number of parameters
  // lands here, where a static_assert says so in fibra's words instead of "no matching function".
  template <class F, class Range>
    requires(detail::arity_v<F> != 1)
  void map(F&&, Range&&, const MapOptions& = {}) { detail::refuse_function<F, true>(); }
  template <class F, class Range>
    requires(detail::arity_v<F> != 1)
  void imap(F&&, Range&&, const MapOptions& = {}) { detail::refuse_function<F, true>(); }
  template <class F, class Range>
    requires(detail::arity_v<F> != 1)
  void imap_unordered(F&&, Range&&, const MapOptions& = {}) { detail::refuse_function<F, true>(); }
  template <class F, class Range>
    requires(detail::arity_v<F> < 0)
  void starmap(F&&, Range&&, const MapOptions& = {}) { detail::refuse_function<F, false>(); }
  template <class F, class... Args>
    requires(detail::arity_v<F> < 0)
  void apply_async(F&&, Args&&...) { detail::refuse_function<F, false>(); }

  /// @brief Counters of work done, failures seen, retries and lost workers (see docs/fault-tolerance.md).
  PoolStats stats() const { return core().stats(); }

  /// @brief Grows or shrinks the pool to `workers` while it runs.
  void resize(int workers) { core().resize(workers); }
  /// @brief No more work may be submitted; queued work still runs.
  void close() { core().close(); }
  /// @brief After close(): waits for queued work to finish, then stops the workers.
  void join() { core().join(); }
  /// @brief Stops the workers now; unfinished futures fail with PoolClosed.
  void terminate() { core().terminate(); }

 private:
  detail::PoolCore& core() const {
    return *live_core();
  }
  // The pool's core, shared with a call's stream; a moved-from pool has none.
  const std::shared_ptr<detail::PoolCore>& live_core() const {
    if (!core_) throw PoolClosed("fibra: this Pool was moved from");
    return core_;
  }

  template <class R, class Enc, class Fn, class Range>
  std::vector<R> collect(Fn fn, detail::CallMode mode, Range&& inputs, const MapOptions& o, const char* call) {
    static_assert(!std::is_same_v<R, bool>,
                  "fibra: map/starmap cannot return bool results (std::vector<bool> is packed): return int or char");
    const auto& core = live_core();  // a moved-from pool throws PoolClosed before anything else
    const auto& entry = detail::function_by_address(reinterpret_cast<const void*>(fn), call);
    using View = std::views::all_t<Range>;
    detail::ChunkStream<View, Enc> s(core, entry, mode, std::views::all(std::forward<Range>(inputs)), o, call);
    detail::attach_checkpoint<R>(s, entry, o, call);
    std::vector<R> out;
    const std::size_t errors_before = o.errors ? o.errors->size() : 0;
    if (auto n = s.known_size()) out.resize(*n);
    detail::ChunkOutcome c;
    while (s.next(c)) {
      if (out.size() < c.first + c.count) out.resize(c.first + c.count);
      detail::decode_items(c.bytes(), out.data() + c.first, c.count);
      s.release();
    }
    if (o.errors)  // only what this call added
      std::stable_sort(o.errors->begin() + static_cast<std::ptrdiff_t>(errors_before), o.errors->end(),
                       [](auto& a, auto& b) { return a.index < b.index; });
    return out;
  }

  template <class R, class Enc, bool Ordered, class Fn, class Range>
  auto stream(Fn fn, Range&& inputs, const MapOptions& o, const char* call) {
    const auto& core = live_core();  // a moved-from pool throws PoolClosed before anything else
    const auto& entry = detail::function_by_address(reinterpret_cast<const void*>(fn), call);
    using View = std::views::all_t<Range>;
    auto s = std::make_unique<detail::ChunkStream<View, Enc>>(core, entry, detail::CallMode::single,
                                                              std::views::all(std::forward<Range>(inputs)), o, call);
    detail::attach_checkpoint<R>(*s, entry, o, call);
    return detail::ImapResults<R, View, Enc, Ordered>(std::move(s));
  }

  std::shared_ptr<detail::PoolCore> core_;
};

}  // namespace fibra
