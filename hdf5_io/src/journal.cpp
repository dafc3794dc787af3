// hdf5_io/src/journal.cpp: the append-only journal next to a checkpoint's .h5 file.
#include "journal.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

#include "checksum.hpp"
#include "fibra/error.hpp"

namespace fibra::hdf5_io::detail {

static_assert(std::endian::native == std::endian::little, "the journal is written in little-endian byte order");

namespace {
constexpr char file_magic[8] = {'F', 'I', 'B', 'R', 'A', 'J', 'N', 'L'};
constexpr std::uint32_t journal_version = 1;
constexpr std::size_t file_header_bytes = 40;
constexpr std::uint32_t record_magic = 0x43524a46;  // "FJRC"
constexpr std::size_t record_header_bytes = 48;
constexpr std::size_t write_behind_bytes = 1 << 20;

[[noreturn]] void fail(const std::string& what, const std::filesystem::path& path) {
  throw CheckpointError("fibra: cannot " + what + " '" + path.string() + "': " + std::strerror(errno));
}

template <class T>
void put_at(std::byte* p, std::size_t offset, T v) {
  std::memcpy(p + offset, &v, sizeof v);
}
template <class T>
T get_at(const std::byte* p, std::size_t offset) {
  T v;
  std::memcpy(&v, p + offset, sizeof v);
  return v;
}

std::array<std::byte, file_header_bytes> file_header(JournalKey key) {
  std::array<std::byte, file_header_bytes> h{};
  std::memcpy(h.data(), file_magic, 8);
  put_at(h.data(), 8, journal_version);
  put_at(h.data(), 16, key.run_id);
  put_at(h.data(), 24, key.generation);
  put_at(h.data(), 32, checksum(h.data(), 32));
  return h;
}

std::vector<std::byte> read_file(const std::filesystem::path& path, bool& exists) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  exists = fd.get() >= 0;
  if (!exists) {
    if (errno == ENOENT) return {};
    fail("read checkpoint journal", path);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("read checkpoint journal", path);
  std::vector<std::byte> data(std::size_t(st.st_size));
  std::size_t got = 0;
  while (got < data.size()) {
    ssize_t n = ::read(fd.get(), data.data() + got, data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("read checkpoint journal", path);
    if (n == 0) break;
    got += std::size_t(n);
  }
  data.resize(got);
  return data;
}

void write_fully(int fd, const std::byte* p, std::size_t n, const std::filesystem::path& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("write checkpoint journal", path);
    p += w;
    n -= std::size_t(w);
  }
}
}  // namespace

Fd lock_checkpoint(const std::filesystem::path& checkpoint) {
  const std::filesystem::path path = checkpoint.string() + ".lock";
  Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (fd.get() < 0) fail("create lock file", path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) fail("lock", path);
    char pid[32] = {};
    const ssize_t n = ::pread(fd.get(), pid, sizeof pid - 1, 0);
    std::string holder = n > 0 ? std::string(pid, std::size_t(n)) : "unknown";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    if (holder == std::to_string(::getpid()))
      throw CheckpointError("fibra: checkpoint '" + checkpoint.string() +
                            "' is already open in this process (an unfinished call, or an ImapResults not yet "
                            "destroyed, writes it) — let that call finish first or pass another checkpoint path");
    throw CheckpointError("fibra: checkpoint '" + checkpoint.string() + "' is being written by another process (pid " +
                          holder + ", which holds '" + path.string() +
                          "') — wait for it to end or pass another checkpoint path");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd.get(), 0) != 0 || ::pwrite(fd.get(), pid.data(), pid.size(), 0) < 0) fail("write lock file", path);
  return fd;
}

void sync_path(const std::filesystem::path& path) {
  std::filesystem::path p = path.empty() ? std::filesystem::path(".") : path;
  Fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) fail("sync", p);
}

std::uint64_t now_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000ULL + std::uint64_t(ts.tv_nsec);
}

JournalScan scan_journal(const std::filesystem::path& path, JournalKey key,
                         const std::function<void(const JournalRecord&)>& visit) {
  bool exists = false;
  std::vector<std::byte> data = read_file(path, exists);
  JournalScan scan;
  scan.file_bytes = data.size();
  if (data.size() < file_header_bytes || std::memcmp(data.data(), file_header(key).data(), file_header_bytes) != 0)
    return scan;  // missing, torn while being created, or another run's or generation's journal
  scan.matches = true;
  // The record at `at` if it is whole and its checksum matches, else nullptr (and why not in `why`).
  auto valid_at = [&data](std::size_t at, const char*& why) -> const std::byte* {
    const std::byte* h = data.data() + at;
    if (get_at<std::uint32_t>(h, 0) != record_magic) return why = "does not start with a record marker", nullptr;
    const auto payload_bytes = get_at<std::uint64_t>(h, 24);
    if (payload_bytes > data.size() - at - record_header_bytes)
      return why = "is longer than the rest of the file", nullptr;
    if (checksum(h + record_header_bytes, payload_bytes, checksum(h, 40)) != get_at<std::uint64_t>(h, 40))
      return why = "fails its checksum", nullptr;
    return h;
  };
  std::size_t at = file_header_bytes;
  const char* why = nullptr;
  while (data.size() - at >= record_header_bytes) {
    const std::byte* h = valid_at(at, why);
    if (!h) break;
    const auto payload_bytes = get_at<std::uint64_t>(h, 24);
    JournalRecord r{get_at<std::uint64_t>(h, 8),
                    get_at<std::uint64_t>(h, 16),
                    get_at<std::uint64_t>(h, 32),
                    {h + record_header_bytes, std::size_t(payload_bytes)}};
    visit(r);
    scan.records++;
    scan.results += r.count;
    scan.last_wall_ns = r.wall_ns;
    at += record_header_bytes + payload_bytes;
  }
  scan.valid_bytes = at;
  if (at == data.size()) return scan;
  // The writer never appends after a partial record (a failed write is cut off, and so is a torn
  // tail before appending), so what stopped replay is the torn tail of a crash, unless a valid
  // record follows somewhere after it: then a record in the middle was damaged. It is looked for
  // at every byte, since the damage may be in the length that says where the next record starts.
  const std::byte* next = nullptr;
  std::size_t q = at + 1;
  for (const char* ignored = nullptr; data.size() - q >= record_header_bytes; ++q) {
    const std::byte* hit = static_cast<const std::byte*>(
        std::memchr(data.data() + q, int(record_magic & 0xff), data.size() - q - record_header_bytes + 1));
    if (!hit) break;
    q = std::size_t(hit - data.data());
    if ((next = valid_at(q, ignored))) break;
  }
  if (!next) return scan;  // a torn tail
  scan.damaged_record = scan.records + 1;
  scan.damage = why ? why : "is damaged";
  // Count the valid records after it, for the message that says what removing the journal loses.
  for (const char* ignored = nullptr; data.size() - q >= record_header_bytes;) {
    const std::byte* h = valid_at(q, ignored);
    if (!h) break;
    scan.results_after += get_at<std::uint64_t>(h, 16);
    q += record_header_bytes + get_at<std::uint64_t>(h, 24);
  }
  return scan;
}

void JournalWriter::adopt(const JournalScan& scan, bool writable) {
  if (!scan.matches) return;  // a stale or torn journal is replaced on the first flush
  records_on_disk_ = scan.records;
  last_wall_ns_ = scan.last_wall_ns;
  bytes_on_disk_ = scan.valid_bytes;
  synced_bytes_ = scan.valid_bytes;
  if (!writable) return;
  fd_ = Fd(::open(path_.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd_.get() < 0) fail("open checkpoint journal", path_);
  if (scan.file_bytes > scan.valid_bytes && ::ftruncate(fd_.get(), off_t(scan.valid_bytes)) != 0)
    fail("cut the torn tail of checkpoint journal", path_);
  if (::lseek(fd_.get(), off_t(scan.valid_bytes), SEEK_SET) < 0) fail("seek in checkpoint journal", path_);
}

void JournalWriter::append(std::uint64_t first, std::uint64_t count, std::span<const std::byte> values) {
  std::size_t at = buffer_.size();
  buffer_.resize(at + record_header_bytes + values.size());
  std::memcpy(buffer_.data() + at + record_header_bytes, values.data(), values.size());
  put_at(buffer_.data() + at, 8, first);
  put_at(buffer_.data() + at, 16, count);
  finish_record(at);
}

void JournalWriter::append_blobs(std::uint64_t first, std::span<const std::span<const std::byte>> blobs) {
  std::size_t total = blobs.size() * 8;
  for (auto b : blobs) total += b.size();
  std::size_t at = buffer_.size();
  buffer_.resize(at + record_header_bytes + total);
  std::byte* p = buffer_.data() + at + record_header_bytes;
  for (auto b : blobs) put_at(p, 0, std::uint64_t(b.size())), p += 8;
  for (auto b : blobs) {
    if (!b.empty()) std::memcpy(p, b.data(), b.size());
    p += b.size();
  }
  put_at(buffer_.data() + at, 8, first);
  put_at(buffer_.data() + at, 16, std::uint64_t(blobs.size()));
  finish_record(at);
}

void JournalWriter::finish_record(std::size_t at) {
  std::byte* h = buffer_.data() + at;
  const std::uint64_t payload_bytes = buffer_.size() - at - record_header_bytes;
  buffered_last_ns_ = now_ns();
  put_at(h, 0, record_magic);
  put_at(h, 4, std::uint32_t(0));
  put_at(h, 24, payload_bytes);
  put_at(h, 32, buffered_last_ns_);
  put_at(h, 40, checksum(h + record_header_bytes, payload_bytes, checksum(h, 40)));
  buffered_records_++;
  // Hand full buffers to the kernel early: a small buffer is reused (no page faults), and the
  // records are complete, so writing them before a flush changes nothing for a reader.
  if (buffer_.size() >= write_behind_bytes) write_out();
}

void JournalWriter::open_new() {
  fd_ = Fd(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd_.get() < 0) fail("create checkpoint journal", path_);
  auto header = file_header(key_);
  write_fully(fd_.get(), header.data(), header.size(), path_);
  bytes_on_disk_ = header.size();
  records_on_disk_ = 0;
}

void JournalWriter::write_out() {
  if (buffer_.empty()) return;
  if (broken_)
    throw CheckpointError("fibra: checkpoint journal '" + path_.string() +
                          "' is unusable after a failed write; call finish() to rewrite the checkpoint");
  if (fd_.get() < 0) {
    open_new();
    dir_synced_ = false;
  }
  try {
    write_fully(fd_.get(), buffer_.data(), buffer_.size(), path_);
  } catch (...) {
    // Cut what this write left, so later records never follow a partial one (replay would stop there).
    if (::ftruncate(fd_.get(), off_t(bytes_on_disk_)) != 0 || ::lseek(fd_.get(), 0, SEEK_END) < 0) broken_ = true;
    throw;
  }
  bytes_on_disk_ += buffer_.size();
  records_on_disk_ += buffered_records_;
  last_wall_ns_ = buffered_last_ns_;
  buffer_.clear();
  buffered_records_ = 0;
}

void JournalWriter::flush(bool sync) {
  write_out();
  if (!sync || fd_.get() < 0 || synced_bytes_ == bytes_on_disk_) return;
  if (::fdatasync(fd_.get()) != 0) fail("sync checkpoint journal", path_);
  if (!dir_synced_) sync_path(path_.parent_path());  // the new file's directory entry
  dir_synced_ = true;
  synced_bytes_ = bytes_on_disk_;
}

void JournalWriter::reset(JournalKey key) {
  fd_ = Fd();
  broken_ = false;
  buffer_.clear();
  buffered_records_ = 0;
  key_ = key;  // first: records after a failed unlink must still carry the new key
  bytes_on_disk_ = 0;
  synced_bytes_ = 0;
  records_on_disk_ = 0;
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT) fail("remove checkpoint journal", path_);
}

}  // namespace fibra::hdf5_io::detail
