// hdf5_io/src/snapshot.hpp: the .h5 file of a checkpoint, read and written whole (internal).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "fibra/hdf5_io/store.hpp"

namespace fibra::hdf5_io::detail {

/// Everything a checkpoint holds, in memory.
struct Contents {
  RunRecord run;
  ElementType type;
  std::uint64_t run_id = 0;      ///< random, fixed at creation; ties the journal to this run
  std::uint64_t generation = 0;  ///< incremented by every rewrite of the .h5 file
  std::string created_at;        ///< ISO-8601 UTC
  std::string updated_at;        ///< ISO-8601 UTC, when this generation was written
  std::vector<std::uint8_t> done;
  std::uint64_t n_done = 0;
  std::vector<std::byte> values;              ///< native kind: n_inputs * type.size_bytes()
  std::vector<std::vector<std::byte>> blobs;  ///< bytes kind: one per item

  /// Sizes `done` and the results for `run.n_inputs` items, none done.
  void allocate();
};

/// Writes `c` as a complete HDF5 file at `file` (not atomically: the caller renames it in place).
/// @throws Hdf5Error
void write_snapshot(const std::filesystem::path& file, const Contents& c);

/// Reads a checkpoint's .h5 file.
/// @throws CheckpointError when it is missing, not HDF5, not a fibra checkpoint, of a newer
///         format version, or damaged.
Contents read_snapshot(const std::filesystem::path& file);

/// Which .h5 file a checkpoint's path names now: a writer's fold replaces the file by another of
/// the next generation.
struct SnapshotKey {
  std::uint64_t run_id = 0;
  std::uint64_t generation = 0;
  bool operator==(const SnapshotKey&) const = default;
};

/// Reads only the run id and generation of a checkpoint's .h5 file (cheap, whatever its size).
/// @throws CheckpointError as read_snapshot does.
SnapshotKey read_snapshot_key(const std::filesystem::path& file);

/// "2026-11-30T07:40:00Z" for a wall time in ns since the epoch.
std::string iso8601(std::uint64_t wall_ns);

}  // namespace fibra::hdf5_io::detail
