// hdf5_io/src/store.cpp: the checkpoint store (see docs/checkpoint-format.md for the design).
#include "fibra/hdf5_io/store.hpp"

#include <cstdio>
#include <cstring>
#include <random>

#include "checksum.hpp"
#include "journal.hpp"
#include "snapshot.hpp"

namespace fibra::hdf5_io {

namespace fs = std::filesystem;
using detail::Contents;

void Fingerprint::update(std::span<const std::byte> bytes) noexcept {
  state_ = detail::checksum(bytes.data(), bytes.size(), state_ + length_);
  length_ += bytes.size();
}

std::string Fingerprint::hex() const {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(state_));
  return text;
}

struct Store::State {
  State(fs::path p, Access a, StoreOptions o, Contents contents)
      : path(std::move(p)),
        access(a),
        options(o),
        c(std::move(contents)),
        journal(journal_path(path), {c.run_id, c.generation}),
        last_flush(std::chrono::steady_clock::now()) {}

  static fs::path journal_path(const fs::path& p) { return fs::path(p.string() + ".journal"); }

  fs::path path;
  Access access;
  StoreOptions options;
  Contents c;
  detail::JournalWriter journal;
  std::chrono::steady_clock::time_point last_flush;
  std::uint64_t blob_bytes = 0;  // bytes kind: size of all stored blobs
  detail::Fd lock;               // read_write: the flock on path + ".lock"
};

namespace {

std::uint64_t random_run_id() {
  std::random_device rd;
  return ((std::uint64_t(rd()) << 32) | rd()) ^ detail::now_ns();
}

/// Writes `c` to `path` atomically: a complete temporary file, fsync, rename, fsync of the directory.
/// Always synced, whatever StoreOptions::sync says: without it a machine crash could keep the rename
/// but lose the data, leaving a damaged .h5 file in place of a good one.
/// `renamed` says, also when it throws, whether the new file took the old one's place.
void replace_snapshot(const fs::path& path, const Contents& c, bool& renamed) {
  renamed = false;
  const fs::path tmp = path.string() + ".tmp";
  detail::write_snapshot(tmp, c);
  detail::sync_path(tmp);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw CheckpointError("fibra: cannot replace checkpoint '" + path.string() + "': " + ec.message());
  renamed = true;
  detail::sync_path(path.parent_path());
}

[[noreturn]] void damaged_journal(const fs::path& path, const std::string& why) {
  throw CheckpointError("fibra: cannot use '" + path.string() + "' as a checkpoint: its journal '" + path.string() +
                        ".journal' is damaged (" + why + ") — delete both files to start the run over");
}

std::string describe_run(const RunRecord& r) {
  return "'" + r.function + "' over " + std::to_string(r.n_inputs) + " inputs";
}

/// Throws the refusal to resume `path` (written for `old_run`) with `run`, or returns when they match.
void check_same_run(const fs::path& path, const RunRecord& old_run, const ElementType& old_type, const RunRecord& run,
                    const ElementType& type) {
  const std::string head = "fibra: cannot resume '" + path.string() + "': ";
  const std::string advice = " — delete the file or pass another checkpoint path";
  if (old_run.function != run.function || old_run.n_inputs != run.n_inputs)
    throw CheckpointError(head + "it was written for " + describe_run(old_run) + ", this run maps '" + run.function +
                          "' over " + std::to_string(run.n_inputs) + advice);
  if (old_run.inputs_fingerprint != run.inputs_fingerprint)
    throw CheckpointError(head + "it was written for " + describe_run(old_run) + " with fingerprint " +
                          old_run.inputs_fingerprint + ", this run's inputs have fingerprint " +
                          run.inputs_fingerprint + advice);
  if (!(old_type == type))
    throw CheckpointError(head + "it holds " + old_type.describe() + " results of '" + old_run.function +
                          "', this run's results are " + type.describe() + advice);
}

void mark_done(Contents& c, std::uint64_t first, std::uint64_t count) {
  for (std::uint64_t i = first; i < first + count; ++i) {
    c.n_done += c.done[i] == 0;
    c.done[i] = 1;
  }
}

void set_blob(Store::State& s, std::uint64_t i, std::span<const std::byte> bytes) {
  auto& blob = s.c.blobs[i];
  s.blob_bytes = s.blob_bytes - blob.size() + bytes.size();
  blob.assign(bytes.begin(), bytes.end());
}

bool in_range(const Contents& c, std::uint64_t first, std::uint64_t count) {
  return first <= c.run.n_inputs && count <= c.run.n_inputs - first;
}

void check_range(const Store::State& s, std::uint64_t first, std::uint64_t count) {
  if (!in_range(s.c, first, count))
    throw CheckpointError("fibra: checkpoint '" + s.path.string() + "': items [" + std::to_string(first) + ", " +
                          std::to_string(first + count) + ") are outside its " + std::to_string(s.c.run.n_inputs) +
                          " inputs");
}

/// Applies one journal record to the in-memory contents.
void replay(Store::State& s, const detail::JournalRecord& r) {
  Contents& c = s.c;
  if (!in_range(c, r.first, r.count))
    damaged_journal(s.path, "a record for items beyond n_inputs = " + std::to_string(c.run.n_inputs));
  if (c.type.kind == ElementType::Kind::native) {
    const std::size_t size = c.type.size_bytes();
    if (r.payload.size() != r.count * size) damaged_journal(s.path, "a record of the wrong size");
    std::memcpy(c.values.data() + r.first * size, r.payload.data(), r.payload.size());
  } else {
    if (r.payload.size() / 8 < r.count) damaged_journal(s.path, "a record of the wrong size");
    const std::byte* lengths = r.payload.data();
    std::size_t at = r.count * 8;
    for (std::uint64_t k = 0; k < r.count; ++k) {
      std::uint64_t len;
      std::memcpy(&len, lengths + k * 8, 8);
      if (len > r.payload.size() - at) damaged_journal(s.path, "a record of the wrong size");
      set_blob(s, r.first + k, r.payload.subspan(at, len));
      at += len;
    }
  }
  mark_done(c, r.first, r.count);
}

void check_writable(const Store::State& s) {
  if (s.access != Access::read_write)
    throw CheckpointError("fibra: checkpoint '" + s.path.string() + "' was opened read-only");
}

void compact(Store::State& s) {
  Contents& c = s.c;
  const auto old_updated = c.updated_at;
  c.generation++;
  c.updated_at = detail::iso8601(detail::now_ns());
  bool renamed = false;
  try {
    replace_snapshot(s.path, c, renamed);
  } catch (...) {
    if (renamed) {  // the new file is in place (only its directory's sync failed): follow it
      s.journal.reset({c.run_id, c.generation});
      throw;
    }
    c.generation--;
    c.updated_at = old_updated;
    throw;
  }
  // The journal's records, and those still buffered, are all in the new .h5 file now; a crash
  // before the next line leaves a journal of the previous generation, which open() ignores.
  s.journal.reset({c.run_id, c.generation});
}

}  // namespace

Store::Store(std::unique_ptr<State> state) : s_(std::move(state)) {}
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;

Store::~Store() {
  if (!s_ || s_->access != Access::read_write || !s_->journal.has_pending()) return;
  try {
    s_->journal.flush(s_->options.sync);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fibra: could not flush checkpoint '%s' when closing it: %s\n", s_->path.c_str(), e.what());
  }
}

Store Store::create(const fs::path& path, const RunRecord& run, const ElementType& type, StoreOptions options) {
  std::error_code dir_ec;
  if (fs::is_directory(path, dir_ec))
    throw CheckpointError("fibra: cannot create checkpoint '" + path.string() +
                          "': it is a directory — pass the path " + "of a checkpoint file, such as '" +
                          (path / "run.h5").string() + "'");
  if (type.kind == ElementType::Kind::native && type.size_bytes() == 0)
    throw CheckpointError("fibra: cannot create checkpoint '" + path.string() + "': the element type " +
                          type.describe() + " has no values");
  Contents c;
  c.run = run;
  c.type = type;
  c.run_id = random_run_id();
  c.generation = 1;
  c.created_at = c.updated_at = detail::iso8601(detail::now_ns());
  c.allocate();
  detail::Fd lock = detail::lock_checkpoint(path);
  // The old journal goes first: it must never be replayed into the new file.
  std::error_code ec;
  fs::remove(State::journal_path(path), ec);
  if (ec)
    throw CheckpointError("fibra: cannot remove old checkpoint journal '" + path.string() +
                          ".journal': " + ec.message());
  bool renamed = false;
  replace_snapshot(path, c, renamed);
  auto s = std::make_unique<State>(path, Access::read_write, options, std::move(c));
  s->lock = std::move(lock);
  return Store(std::move(s));
}

/// How many times a reader reads a checkpoint whose writer keeps replacing it before giving up.
constexpr int max_read_attempts = 100;

Store Store::open(const fs::path& path, Access access, StoreOptions options) {
  // Lock before reading, so the file read is not one another writer is about to replace.
  detail::Fd lock = access == Access::read_write && fs::exists(path) ? detail::lock_checkpoint(path) : detail::Fd();
  std::unique_ptr<State> s;
  detail::JournalScan scan;
  // A reader takes no lock, so the writer may fold its journal into a new .h5 file (the next
  // generation; then it removes the journal and starts one of that generation) between this reader's
  // reading the .h5 file and its journal. The journal is then missing or of a newer generation, and
  // the records it held are in the new .h5 file only: whenever no journal extends the .h5 file read,
  // the file's generation is read again, and a replaced file is read whole and tried again.
  detail::Contents snapshot;
  try {
    snapshot = detail::read_snapshot(path);
  } catch (const CheckpointError&) {
    if (lock.get() >= 0) fs::remove(path.string() + ".lock");  // not a checkpoint: leave no lock file next to it
    throw;
  }
  for (int attempt = 1;; ++attempt) {
    s = std::make_unique<State>(path, access, options, std::move(snapshot));
    for (const auto& blob : s->c.blobs) s->blob_bytes += blob.size();
    State& state = *s;
    scan = detail::scan_journal(State::journal_path(path), {s->c.run_id, s->c.generation},
                                [&state](const detail::JournalRecord& r) { replay(state, r); });
    if (access == Access::read_write || scan.matches) break;
    if (detail::read_snapshot_key(path) == detail::SnapshotKey{s->c.run_id, s->c.generation}) break;
    if (attempt == max_read_attempts)
      throw CheckpointError("fibra: cannot read checkpoint '" + path.string() + "': its writer replaced it " +
                            std::to_string(max_read_attempts) +
                            " times while it was being read (it folds its journal into the .h5 file) — read it "
                            "again, or after the writer ends");
    snapshot = detail::read_snapshot(path);
  }
  s->lock = std::move(lock);
  if (scan.damaged_record) {
    // Not a torn tail (the writer never appends after a bad record): refused, since replaying up to
    // it would silently drop the valid records after it. The .h5 file alone is consistent.
    const std::string journal = State::journal_path(path).string();
    throw CheckpointError("fibra: cannot use '" + path.string() + "' as a checkpoint: its journal '" + journal +
                          "' is damaged (record " + std::to_string(scan.damaged_record) + " " + scan.damage +
                          ", but valid records follow it, so it is no torn tail from a crash) — remove '" + journal +
                          "' to resume from '" + path.string() + "' alone, losing the " +
                          std::to_string(scan.results + scan.results_after) + " results recorded in the journal (" +
                          std::to_string(scan.results_after) +
                          " of them after the damaged record), or delete both files to start the run over");
  }
  s->journal.adopt(scan, access == Access::read_write);
  return Store(std::move(s));
}

Store Store::open_or_create(const fs::path& path, const RunRecord& run, const ElementType& type, StoreOptions options) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return create(path, run, type, options);
  Store store = open(path, Access::read_write, options);
  check_same_run(path, store.run(), store.element_type(), run, type);
  return store;
}

const RunRecord& Store::run() const noexcept { return s_->c.run; }
const ElementType& Store::element_type() const noexcept { return s_->c.type; }
const fs::path& Store::path() const noexcept { return s_->path; }
std::span<const std::uint8_t> Store::done() const noexcept { return s_->c.done; }
std::uint64_t Store::n_done() const noexcept { return s_->c.n_done; }

std::vector<ItemRange> Store::pending_ranges() const {
  std::vector<ItemRange> ranges;
  const auto& done = s_->c.done;
  for (std::uint64_t i = 0; i < done.size();) {
    if (done[i]) {
      ++i;
      continue;
    }
    std::uint64_t j = i;
    while (j < done.size() && !done[j]) ++j;
    ranges.push_back({i, j - i});
    i = j;
  }
  return ranges;
}

std::span<const std::byte> Store::native_results() const {
  if (s_->c.type.kind != ElementType::Kind::native)
    throw CheckpointError("fibra: checkpoint '" + s_->path.string() + "' holds bytes results, not native numbers");
  return s_->c.values;
}

std::span<const std::byte> Store::item_bytes(std::uint64_t i) const {
  if (s_->c.type.kind != ElementType::Kind::bytes)
    throw CheckpointError("fibra: checkpoint '" + s_->path.string() + "' holds native numbers, not bytes results");
  return s_->c.blobs.at(i);
}

void Store::check_native_access(std::size_t value_size, std::uint64_t first, std::uint64_t count) const {
  const auto& c = s_->c;
  if (c.type.kind != ElementType::Kind::native || value_size != c.type.size_bytes())
    throw CheckpointError("fibra: checkpoint '" + s_->path.string() + "' holds " + c.type.describe() +
                          " results, not a " + std::to_string(value_size) + "-byte type");
  check_range(*s_, first, count);
}

void Store::put(std::uint64_t first, std::uint64_t count, std::span<const std::byte> values) {
  State& s = *s_;
  check_writable(s);
  if (s.c.type.kind != ElementType::Kind::native)
    throw CheckpointError("fibra: checkpoint '" + s.path.string() +
                          "' holds bytes results: use put_bytes(), not put()");
  check_range(s, first, count);
  const std::size_t size = s.c.type.size_bytes();
  if (values.size() != count * size)
    throw CheckpointError("fibra: checkpoint '" + s.path.string() + "': put of " + std::to_string(count) +
                          " items needs " + std::to_string(count * size) + " bytes, got " +
                          std::to_string(values.size()));
  if (count == 0) return;
  std::memcpy(s.c.values.data() + first * size, values.data(), values.size());
  mark_done(s.c, first, count);
  s.journal.append(first, count, values);
}

void Store::put_bytes(std::uint64_t first, std::span<const std::span<const std::byte>> blobs) {
  State& s = *s_;
  check_writable(s);
  if (s.c.type.kind != ElementType::Kind::bytes)
    throw CheckpointError("fibra: checkpoint '" + s.path.string() + "' holds " + s.c.type.describe() +
                          " results: use put(), not put_bytes()");
  check_range(s, first, blobs.size());
  if (blobs.empty()) return;
  for (std::size_t k = 0; k < blobs.size(); ++k) set_blob(s, first + k, blobs[k]);
  mark_done(s.c, first, blobs.size());
  s.journal.append_blobs(first, blobs);
}

void Store::flush() {
  State& s = *s_;
  s.last_flush = std::chrono::steady_clock::now();
  if (s.access != Access::read_write) return;
  s.journal.flush(s.options.sync);
  const std::uint64_t results_bytes = s.c.values.size() + s.blob_bytes;
  if (s.journal.bytes_on_disk() > std::max(s.options.compact_min_bytes, results_bytes)) compact(s);
}

void Store::write_out() {
  State& s = *s_;
  if (s.access != Access::read_write) return;
  s.journal.write_out();
}

bool Store::flush_if_due() {
  if (std::chrono::steady_clock::now() - s_->last_flush < s_->options.flush_interval) return false;
  flush();
  return true;
}

void Store::finish() {
  State& s = *s_;
  check_writable(s);
  s.last_flush = std::chrono::steady_clock::now();
  std::error_code ec;
  const bool journal_exists = fs::exists(State::journal_path(s.path), ec);
  if (!s.journal.has_pending() && s.journal.records_on_disk() == 0 && !journal_exists)
    return;    // the .h5 file already holds everything
  compact(s);  // buffered records go straight into the new .h5 file, not through the journal
}

Info Store::info() const {
  const State& s = *s_;
  Info info;
  info.path = s.path;
  info.run = s.c.run;
  info.element_type = s.c.type;
  info.n_done = s.c.n_done;
  info.state = s.c.n_done == s.c.run.n_inputs ? "complete" : "running";
  info.created_at = s.c.created_at;
  info.updated_at = s.journal.records_on_disk() > 0 ? detail::iso8601(s.journal.last_wall_ns()) : s.c.updated_at;
  info.generation = s.c.generation;
  info.journal_records = s.journal.records_on_disk();
  info.journal_bytes = s.journal.records_on_disk() > 0 ? s.journal.bytes_on_disk() : 0;
  return info;
}

}  // namespace fibra::hdf5_io
