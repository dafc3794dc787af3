// fibra/hdf5_io/store.hpp: the checkpoint store, an HDF5 file plus an append-only journal.
//
// A Store records one run (function, inputs, chunking, fibra version), which items are done and
// their results. `put` records results, `flush` makes them durable, `finish` folds everything into a
// compact `.h5` file that h5py and h5dump read. A SIGKILL at any moment loses at most what was put
// since the last flush; the files left behind always open. docs/checkpoint-format.md has the layout.
//
//   auto store = Store::open_or_create("run.h5", run, element_type_of<double>());
//   for (auto [first, count] : store.pending_ranges()) { ... store.put_values<double>(first, out); }
//   store.flush();        // durable
//   store.finish();       // compact .h5, journal removed
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "fibra/error.hpp"
#include "fibra/hdf5_io/element_type.hpp"
#include "fibra/hdf5_io/error.hpp"

namespace fibra::hdf5_io {

/// @brief The version of the checkpoint layout this library writes and reads.
inline constexpr std::uint32_t format_version = 1;

/// @brief What a run asked for; a checkpoint is resumed only by the same run.
struct RunRecord {
  std::string function;            ///< registered name of the mapped function
  std::uint64_t n_inputs = 0;      ///< number of input items
  std::string inputs_fingerprint;  ///< a digest of the inputs (see `Fingerprint`)
  std::uint64_t chunksize = 0;     ///< items per chunk when the run was written (informative)
  std::string fibra_version;       ///< fibra version that wrote the run (informative)
};

/// @brief An incremental 64-bit digest of input bytes, printed as 16 hex digits.
///
/// Not cryptographic: it tells an accidental change of inputs, not a forged one.
class Fingerprint {
 public:
  /// @brief Adds bytes to the digest; the result depends on the order and the split of the calls.
  void update(std::span<const std::byte> bytes) noexcept;
  /// @brief The digest so far as 16 lower-case hex digits.
  std::string hex() const;

 private:
  std::uint64_t state_ = 0x66696272612d6670ULL;
  std::uint64_t length_ = 0;
};

/// @brief A half-open range of items [first, first + count).
struct ItemRange {
  std::uint64_t first = 0;  ///< first item
  std::uint64_t count = 0;  ///< number of items
  friend bool operator==(const ItemRange&, const ItemRange&) = default;
};

/// @brief Tunables of a Store; the defaults suit a run of millions of small results.
struct StoreOptions {
  /// fdatasync the journal on every flush. Off (the default), a flush survives a SIGKILL of the
  /// process, and a machine crash leaves a resumable checkpoint that may lack the results of the
  /// last seconds (what the kernel had not written back). On, a flush also survives a machine crash,
  /// at the cost of an fdatasync (about 80 ms for 8 MB here). Rewrites of the .h5 file are always synced.
  bool sync = false;
  /// `flush_if_due` flushes when this long has passed since the last flush.
  std::chrono::milliseconds flush_interval{1000};
  /// The journal is folded into the .h5 file when it holds more than
  /// max(compact_min_bytes, size of all results) bytes, so resume stays fast and the cost of
  /// rewriting the .h5 stays proportional to what was written.
  std::uint64_t compact_min_bytes = 64ull << 20;
};

/// @brief Whether the HDF5 library was built thread-safe (Debian's is). When it is not, no two
/// threads may call HDF5 at once, so callers keep every Store call on one thread.
bool hdf5_is_threadsafe() noexcept;

/// @brief Whether a Store may change its files.
enum class Access : std::uint8_t { read_write, read_only };

/// @brief What a checkpoint holds, for `fibra inspect` and logs.
struct Info {
  std::filesystem::path path;         ///< the .h5 file
  RunRecord run;                      ///< the run it was written for
  ElementType element_type;           ///< the type of one result
  std::uint64_t n_done = 0;           ///< items done (in the .h5 file and the journal)
  std::string state;                  ///< "complete" when every item is done, else "running"
  std::string created_at;             ///< ISO-8601 UTC, when the run was first written
  std::string updated_at;             ///< ISO-8601 UTC, the newest durable write (.h5 or journal)
  std::uint64_t generation = 0;       ///< how many times the .h5 file was written
  std::uint64_t journal_records = 0;  ///< records in the journal not yet folded into the .h5
  std::uint64_t journal_bytes = 0;    ///< size of those records
};

/// @brief A checkpoint on disk: `path` (HDF5) and `path` + ".journal" (append-only, internal).
///
/// Move-only. Not thread-safe; one process at a time may write a checkpoint.
class Store {
 public:
  /// @brief Creates a new checkpoint, replacing whatever `path` held.
  /// @throws Hdf5Error, CheckpointError when the files cannot be written.
  static Store create(const std::filesystem::path& path, const RunRecord& run, const ElementType& type,
                      StoreOptions options = {});
  /// @brief Opens an existing checkpoint and loads what is done (the .h5 file, then the journal).
  /// @throws CheckpointError when the file is missing, not HDF5, not a fibra checkpoint, of a newer
  ///         format version, or damaged.
  static Store open(const std::filesystem::path& path, Access access = Access::read_write, StoreOptions options = {});
  /// @brief Opens `path` when it exists and was written for the same run, else creates it.
  /// @throws CheckpointError naming both runs when `path` was written for another function, number
  ///         of inputs, inputs fingerprint or result type; the errors of `open` otherwise.
  static Store open_or_create(const std::filesystem::path& path, const RunRecord& run, const ElementType& type,
                              StoreOptions options = {});

  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  /// @brief Flushes what was put (never throws; a failure is written to stderr), keeps the journal.
  ~Store();

  /// @brief The run this checkpoint was written for.
  const RunRecord& run() const noexcept;
  /// @brief The type of one result.
  const ElementType& element_type() const noexcept;
  /// @brief The .h5 path.
  const std::filesystem::path& path() const noexcept;

  /// @brief One byte per item, 1 when the item is done.
  std::span<const std::uint8_t> done() const noexcept;
  /// @brief Whether item `i` is done.
  bool is_done(std::uint64_t i) const { return done()[i] != 0; }
  /// @brief Number of items done.
  std::uint64_t n_done() const noexcept;
  /// @brief The maximal ranges of items not done yet, in input order.
  std::vector<ItemRange> pending_ranges() const;

  /// @brief Native kind: all results, n_inputs * element_type().size_bytes() bytes in input order
  ///        (items not done hold zeros).
  std::span<const std::byte> native_results() const;
  /// @brief Native kind: the result of item `i` as `T` (T must match the element type).
  template <class T>
  T value(std::uint64_t i) const {
    check_native_access(sizeof(T), i, 1);
    T v;
    std::memcpy(&v, native_results().data() + i * sizeof(T), sizeof(T));
    return v;
  }
  /// @brief Bytes kind: the stored bytes of item `i` (empty when not done).
  std::span<const std::byte> item_bytes(std::uint64_t i) const;

  /// @brief Native kind: records results of items [first, first + count); `values` holds
  ///        count * element_type().size_bytes() bytes. Durable after the next `flush`.
  /// @throws CheckpointError for a wrong range or size, or a read-only store.
  void put(std::uint64_t first, std::uint64_t count, std::span<const std::byte> values);
  /// @brief Native kind: `put` for a span of results of type `T`.
  template <class T>
  void put_values(std::uint64_t first, std::span<const T> values) {
    check_native_access(sizeof(T), first, values.size());
    put(first, values.size(), std::as_bytes(values));
  }
  /// @brief Bytes kind: records one blob per item for items [first, first + blobs.size()).
  void put_bytes(std::uint64_t first, std::span<const std::span<const std::byte>> blobs);

  /// @brief Makes everything put so far durable: after it returns a SIGKILL loses none of it (and,
  ///        with StoreOptions::sync, neither does a machine crash). Folds the journal into the .h5
  ///        file when it has grown past the bound of StoreOptions.
  void flush();
  /// @brief Hands what was put to the kernel (one write of the journal's buffered records): after it
  ///        returns a SIGKILL of this process loses none of it; a machine crash may (no fdatasync,
  ///        no fold). Cheap enough to call after every put.
  void write_out();
  /// @brief `flush` when StoreOptions::flush_interval has passed since the last one; returns
  ///        whether it flushed. Cheap when not due: meant to be called after every put.
  bool flush_if_due();
  /// @brief Ends a session: writes every result into a fresh .h5 file (atomically replacing the
  ///        old one) and removes the journal, so the .h5 alone holds everything. The state becomes
  ///        "complete" when every item is done. The store stays usable.
  void finish();

  /// @brief The run, progress and timestamps.
  Info info() const;

  struct State;  ///< opaque; defined in store.cpp

 private:
  explicit Store(std::unique_ptr<State> state);
  void check_native_access(std::size_t value_size, std::uint64_t first, std::uint64_t count) const;
  std::unique_ptr<State> s_;
};

}  // namespace fibra::hdf5_io
