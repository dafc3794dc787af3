// hdf5_io/src/journal.hpp: the append-only journal next to a checkpoint's .h5 file (internal).
//
// File: a 40-byte header (magic "FIBRAJNL", version, run id, generation of the .h5 file it
// extends, checksum), then records. Record: a 48-byte header (magic, first item, item count,
// payload bytes, wall time in ns, checksum of header and payload) and the payload: the native
// values, or for bytes results count uint64 lengths followed by the blobs. Host byte order
// (little-endian). Replay stops at the first record that is short or fails its checksum: a torn tail
// when nothing valid follows it; when a valid record does follow, the journal is damaged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <vector>

#include "common/unique_fd.hpp"

namespace fibra::hdf5_io::detail {

/// The one owner of a file descriptor, shared with the rest of fibra.
using Fd = fibra::detail::UniqueFd;

/// Takes an exclusive flock() on `checkpoint` + ".lock" (created if missing) and writes this pid
/// into it; the lock lasts as long as the returned descriptor.
/// @throws CheckpointError naming the holder's pid when another process holds it.
Fd lock_checkpoint(const std::filesystem::path& checkpoint);

/// fsync()s `path` (a file or a directory); throws CheckpointError naming `path` on failure.
void sync_path(const std::filesystem::path& path);

/// Wall-clock time in nanoseconds since the Unix epoch.
std::uint64_t now_ns() noexcept;

/// Identifies which .h5 file a journal extends.
struct JournalKey {
  std::uint64_t run_id = 0;      ///< random id of the run, fixed when the checkpoint was created
  std::uint64_t generation = 0;  ///< how many times the .h5 file was written
};

/// One valid journal record.
struct JournalRecord {
  std::uint64_t first = 0;
  std::uint64_t count = 0;
  std::uint64_t wall_ns = 0;
  std::span<const std::byte> payload;
};

/// What a scan found.
struct JournalScan {
  bool matches = false;            ///< the journal exists and extends this .h5 file
  std::uint64_t valid_bytes = 0;   ///< header plus every valid record
  std::uint64_t file_bytes = 0;    ///< size of the file (more than valid_bytes: a torn tail)
  std::uint64_t records = 0;       ///< valid records
  std::uint64_t last_wall_ns = 0;  ///< wall time of the newest valid record
  std::uint64_t results = 0;       ///< items in the valid records
  /// 1-based number of the record that stopped replay when a valid record follows it: not a torn
  /// tail but damage in the middle (0: none). Then `damage` says what is wrong with it ("fails its
  /// checksum") and `results_after` counts the items of the valid records after it.
  std::uint64_t damaged_record = 0;
  const char* damage = "";
  std::uint64_t results_after = 0;
};

/// Reads `path` and calls `visit` for every valid record in order, up to the first one that is not
/// (reporting it as `damaged_record` if a valid record follows it). A missing file, a torn header
/// or another run's / generation's journal yields `matches == false` and no calls.
JournalScan scan_journal(const std::filesystem::path& path, JournalKey key,
                         const std::function<void(const JournalRecord&)>& visit);

/// Appends records to a journal; records are buffered until `flush` or until 1 MiB is buffered.
class JournalWriter {
 public:
  JournalWriter(std::filesystem::path path, JournalKey key) : path_(std::move(path)), key_(key) {}

  /// Takes over the counts of an existing journal; when `writable`, opens it to append after its
  /// `valid_bytes` (cutting off a torn tail).
  void adopt(const JournalScan& scan, bool writable);
  /// Buffers a record of native values.
  void append(std::uint64_t first, std::uint64_t count, std::span<const std::byte> values);
  /// Buffers a record of blobs, one per item.
  void append_blobs(std::uint64_t first, std::span<const std::span<const std::byte>> blobs);
  /// Whether records wait in the buffer.
  bool has_pending() const noexcept { return !buffer_.empty(); }
  /// Writes the buffered records (creating the file on first use) and fdatasync()s when `sync`.
  void flush(bool sync);
  /// Writes the buffered records to the kernel, without syncing.
  void write_out();
  /// Deletes the journal file and drops buffered records, starting over for `key` (after a
  /// compaction wrote everything into the .h5 file).
  void reset(JournalKey key);

  std::uint64_t bytes_on_disk() const noexcept { return bytes_on_disk_; }
  std::uint64_t records_on_disk() const noexcept { return records_on_disk_; }
  std::uint64_t last_wall_ns() const noexcept { return last_wall_ns_; }

 private:
  void open_new();
  void finish_record(std::size_t header_at);

  std::filesystem::path path_;
  JournalKey key_;
  Fd fd_;
  std::vector<std::byte> buffer_;
  std::uint64_t buffered_records_ = 0;
  std::uint64_t buffered_last_ns_ = 0;
  std::uint64_t bytes_on_disk_ = 0;  // written to the file (not necessarily synced)
  std::uint64_t synced_bytes_ = 0;   // of which fdatasync()ed
  bool dir_synced_ = true;           // the directory entry of a new file was synced
  std::uint64_t records_on_disk_ = 0;
  std::uint64_t last_wall_ns_ = 0;
  bool broken_ = false;  // a failed write could not be cut off
};

}  // namespace fibra::hdf5_io::detail
