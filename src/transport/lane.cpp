// The same-host lane between the driver and one executor (src/transport/lane.hpp).
#include "transport/lane.hpp"

#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "fibra/detail/codec.hpp"
#include "fibra/error.hpp"
#include "transport/wire.hpp"

namespace fibra::detail {
namespace {

constexpr std::uint64_t lane_magic = 0x656e616c61726266;  // "fbralane"

static_assert(sizeof(Mailbox) <= lane::control_offset);
static_assert(sizeof(Lane::Control) <= lane::data_offset - lane::control_offset);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free && std::atomic<std::uint64_t>::is_always_lock_free,
              "the lane's atomics are shared between processes");

// Shared (not FUTEX_PRIVATE): the word lives in memory mapped by two processes.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen, std::chrono::milliseconds d) {
  timespec ts{static_cast<time_t>(d.count() / 1000), static_cast<long>(d.count() % 1000) * 1000000L};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

bool swap(std::atomic<std::uint32_t>& s, std::uint32_t from, std::uint32_t to) {
  return s.compare_exchange_strong(from, to, std::memory_order_acq_rel, std::memory_order_acquire);
}

}  // namespace

Mailbox& Lane::mailbox() const { return *reinterpret_cast<Mailbox*>(base_); }
Lane::Control& Lane::control() const { return *reinterpret_cast<Control*>(base_ + lane::control_offset); }

Lane::~Lane() {
  for (auto& m : large_)
    if (m.p) ::munmap(m.p, m.len);
}

// Where a large slot starts in the memfd.
static constexpr off_t large_offset(bool down) {
  return static_cast<off_t>(lane::region_bytes + (down ? 0 : lane::large_bytes));
}

// What slot i of a way holds at most: a size past it was not written by its owner's post (a task's
// wild pointer scribbled it) and is never read as it says.
std::size_t Lane::capacity(std::size_t i, bool down) {
  return i < (down ? lane::down_slots : lane::up_slots) ? lane::slot_bytes : lane::large_bytes;
}

char* Lane::slot_data(bool down, std::size_t i, std::size_t need) {
  const std::size_t small = down ? lane::down_slots : lane::up_slots;
  if (i < small) return base_ + lane::data_offset + ((down ? 0 : lane::down_slots) + i) * lane::slot_bytes;
  // The large slot: mapped as far as needed, in steps that double, so that a payload of a size
  // seen before finds its mapping (and its pages) in place.
  if (need > lane::large_bytes) return nullptr;
  Mapping& m = large_[down ? 0 : 1];
  if (need > m.len) {
    std::size_t len = std::max<std::size_t>(m.len * 2, std::size_t(2) << 20);
    while (len < need) len *= 2;
    len = std::min(len, lane::large_bytes);
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, large_offset(down));
    if (p == MAP_FAILED) return nullptr;
    // Huge pages if the kernel gives them to shared memory (shmem_enabled "advise" or "within_size";
    // Debian's default "never" ignores this): a copy through 4 KiB pages costs about 3x here.
    (void)::madvise(p, len, MADV_HUGEPAGE);
    if (m.p) ::munmap(m.p, m.len);
    m = {static_cast<char*>(p), len};
  }
  return m.p;
}

bool Lane::read_large(bool down, std::size_t n, std::string& out) const {
  resize_large(out, n);
  const off_t base = large_offset(down);
  for (std::size_t done = 0; done < n;) {
    const ssize_t k = ::pread(fd_, out.data() + done, n - done, base + static_cast<off_t>(done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    done += static_cast<std::size_t>(k);
  }
  return true;
}

void Lane::trim_large(bool down, std::size_t used, std::size_t from) {
  from = std::max(from, lane::large_kept);
  if (used <= from) return;
  ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, large_offset(down) + static_cast<off_t>(from),
              static_cast<off_t>(used - from));
}

// ---- the agent ----------------------------------------------------------------------------------

void Lane::init(std::uint64_t nonce, std::int64_t agent_pid) {
  new (base_) Mailbox();
  Control& c = *new (base_ + lane::control_offset) Control();
  c.nonce = nonce;
  c.agent_pid = agent_pid;
  // Up slots stay open for good: results a dead executor left there are still the driver's to take.
  for (auto& u : c.up) u.state.store(free, std::memory_order_relaxed);  // the large one too
  std::atomic_thread_fence(std::memory_order_release);
  c.magic = lane_magic;
}

void Lane::reopen() {
  // A frame the dead executor was encoding into the large up slot: never posted, never read. Freed
  // first: the new executor, already running, may claim the slot once a batch comes.
  if (swap(control().up[lane::up_slots].state, writing, free)) trim_large(false, lane::large_bytes);
  // A large batch the dead executor held (or a post that failed) leaves pages behind: given back.
  trim_large(true, lane::large_bytes);
  spilled_.clear();
  control().calls_read.store(0, std::memory_order_relaxed);  // a new process asks for its ring (or is told)
  for (auto& s : control().down) (void)swap(s.state, closed, free);
}

std::vector<Lane::Held> Lane::close() {
  Control& c = control();
  std::vector<std::pair<std::uint64_t, Held>> held;
  for (std::size_t i = 0; i < all_down; ++i) {
    Slot& s = c.down[i];
    for (;;) {
      std::uint32_t st = s.state.load(std::memory_order_acquire);
      if (st == closed) break;
      if (st == posted && !swap(s.state, posted, closed)) continue;  // the driver took it back meanwhile
      if (st == posted || st == taken) {
        // The executor is dead; a posted slot is closed already, so the driver can neither take
        // it back nor write it again: its batch stays as it is.
        const std::uint32_t sent = st == taken ? s.sent.load(std::memory_order_acquire) : 0;
        // (no further than the slot: what a scribbled size says past it was never the batch)
        const std::size_t n = std::min(s.size.load(std::memory_order_relaxed), capacity(i, true));
        // A batch whose every result was sent is done: it died in finish(), whose trim may have
        // zeroed the batch's tail already.
        if (sent < s.chunks.load(std::memory_order_relaxed)) {
          const char* data = slot_data(true, i, n);
          if (!data) {  // out of address space (a tight `ulimit -v`): read it instead
            spilled_.emplace_back();
            data = read_large(true, n, spilled_.back()) ? spilled_.back().data() : nullptr;
          }
          if (data) held.emplace_back(s.seq.load(std::memory_order_relaxed), Held{std::string_view(data, n), sent});
        }
        s.state.store(closed, std::memory_order_release);
        break;
      }
      if (swap(s.state, st, closed)) break;  // free, or the driver writing it: its post will fail
    }
  }
  std::sort(held.begin(), held.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::vector<Held> out;
  for (auto& [seq, h] : held) out.push_back(h);
  return out;
}

std::size_t Lane::chunks_held() const {
  std::size_t n = 0;
  for (const auto& s : control().down) {
    const auto st = s.state.load(std::memory_order_acquire);
    if (st == posted || st == taken) n += s.chunks.load(std::memory_order_relaxed);
  }
  return n;
}

void Lane::ring() {
  Control& c = control();
  c.bell.fetch_add(1, std::memory_order_seq_cst);
  if (c.sleeping.load(std::memory_order_seq_cst) > 0) futex_wake(c.bell);
}

// ---- the driver ---------------------------------------------------------------------------------

bool Lane::post(std::size_t size, std::uint32_t chunks, const std::function<void(char*)>& fill) {
  if (size > lane::large_bytes) return false;
  Control& c = control();
  const bool large = size > lane::slot_bytes;
  for (std::size_t i = large ? lane::down_slots : 0; i < (large ? all_down : lane::down_slots); ++i) {
    Slot& s = c.down[i];
    if (!swap(s.state, free, writing)) continue;
    char* data = slot_data(true, i, size);
    if (!data) {  // the large slot could not be mapped: the agent's way
      (void)swap(s.state, writing, free);
      return false;
    }
    fill(data);
    s.size.store(size, std::memory_order_relaxed);
    s.chunks.store(chunks, std::memory_order_relaxed);
    s.seq.store(c.next_seq.fetch_add(1, std::memory_order_relaxed), std::memory_order_relaxed);
    if (!swap(s.state, writing, posted)) return false;  // closed meanwhile: the executor died
    ring();
    return true;
  }
  return false;
}

std::size_t Lane::busy() const {
  std::size_t n = 0;
  for (std::size_t i = 0; i < lane::down_slots; ++i) {  // the small ones: the executor's queue
    const auto& s = control().down[i];
    const auto st = s.state.load(std::memory_order_acquire);
    n += st == posted || st == taken || st == writing;
  }
  return n;
}

bool Lane::take_result(std::string& frame) {
  std::string_view unused;
  return take_result(frame, unused, false, nullptr) != Took::none;
}

Lane::Took Lane::take_result(std::string& frame, std::string_view& held, bool* in_place) {
  return take_result(frame, held, true, in_place);
}

void Lane::release_held(std::size_t size) {
  Slot& s = control().up[lane::up_slots];
  trim_large(false, size);
  s.state.store(free, std::memory_order_release);
}

Lane::Took Lane::take_result(std::string& frame, std::string_view& held, bool may_hold, bool* in_place) {
  Control& c = control();
  for (std::size_t i = 0; i < all_up; ++i) {
    Slot& s = c.up[i];
    if (s.state.load(std::memory_order_acquire) != full) continue;
    const std::size_t n = s.size.load(std::memory_order_relaxed);
    if (n > capacity(i, false))  // the driver then declares that worker lost
      throw wire::Malformed("fibra: a malformed message: a lane's result slot says it holds " + std::to_string(n) +
                            " bytes, more than its " + std::to_string(capacity(i, false)));
    if (in_place) *in_place = s.chunks.load(std::memory_order_relaxed) == 1;
    const char* data = slot_data(false, i, n);
    if (data && may_hold && i == lane::up_slots) {
      held = std::string_view(data, n);
      s.state.store(Lane::held, std::memory_order_relaxed);  // only this side reads it from here on
      return Took::held;
    }
    if (data) {
      resize_large(frame, n);  // huge pages for a large one: it becomes the call's outcome
      copy_large(frame.data(), data, n);
    } else if (!read_large(false, n, frame)) {  // no address space for the mapping: read it
      continue;                                 // (cannot fail on a memfd of this size; tried again)
    }
    if (i == lane::up_slots) trim_large(false, n);
    s.state.store(free, std::memory_order_release);
    return Took::copied;
  }
  return Took::none;
}

// ---- the executor -------------------------------------------------------------------------------

bool Lane::withdraw(std::string& batch) {
  Control& c = control();
  int newest = -1;
  for (std::size_t i = 0; i < all_down; ++i) {
    if (c.down[i].state.load(std::memory_order_acquire) != posted) continue;
    if (newest < 0 ||
        c.down[i].seq.load(std::memory_order_relaxed) > c.down[std::size_t(newest)].seq.load(std::memory_order_relaxed))
      newest = int(i);
  }
  if (newest < 0) return false;
  Slot& s = c.down[std::size_t(newest)];
  // Read while posted (nobody writes a posted slot), then taken back only if the executor has not
  // taken it meanwhile: it reads a slot before its own posted -> taken, and loses to this one.
  const std::size_t n = s.size.load(std::memory_order_relaxed);
  if (n > capacity(std::size_t(newest), true)) return false;  // scribbled: not read; it stays for the executor
  const char* data = slot_data(true, std::size_t(newest), n);
  if (data)
    batch.assign(data, n);
  else if (!read_large(true, n, batch))
    return false;                      // cannot be read back: it stays for the executor
  return swap(s.state, posted, free);  // false: taken, or closed by the agent (which reports it)
}

std::uint64_t Lane::running_chunk() const { return mailbox().chunk.load(std::memory_order_relaxed); }

std::optional<int> Lane::take(std::string_view& out, std::string& spill) {
  Control& c = control();
  int oldest = -1;
  for (std::size_t i = 0; i < all_down; ++i) {
    if (c.down[i].state.load(std::memory_order_acquire) != posted) continue;
    if (oldest < 0 ||
        c.down[i].seq.load(std::memory_order_relaxed) < c.down[std::size_t(oldest)].seq.load(std::memory_order_relaxed))
      oldest = int(i);
  }
  if (oldest < 0) return std::nullopt;
  Slot& s = c.down[std::size_t(oldest)];
  s.sent.store(0, std::memory_order_relaxed);
  // Taken first, read after: the driver may take a posted batch back (withdraw) and post another
  // in the same slot, so its size is read only once the slot is this executor's.
  if (!swap(s.state, posted, taken)) return std::nullopt;  // taken back, or closed by the agent
  const std::size_t n = s.size.load(std::memory_order_relaxed);
  const char* data = slot_data(true, std::size_t(oldest), n);
  if (!data) {  // no address space for the mapping (a tight `ulimit -v`): read it
    if (!read_large(true, n, spill)) {
      (void)swap(s.state, taken, posted);  // left for a later try (or for the agent's report)
      return std::nullopt;
    }
    data = spill.data();
  }
  out = std::string_view(data, n);
  return oldest;
}

void Lane::finish(int slot) {
  Slot& s = control().down[std::size_t(slot)];
  if (std::size_t(slot) == lane::down_slots) trim_large(true, s.size.load(std::memory_order_relaxed));
  // Taken -> free; after a death the agent has closed it, and closed it stays.
  (void)swap(s.state, taken, free);
}

bool Lane::has_batch() const {
  for (const auto& s : control().down)  // the large one too
    if (s.state.load(std::memory_order_acquire) == posted) return true;
  return false;
}

bool Lane::post_result(std::string_view frame) {
  const bool large = frame.size() > lane::slot_bytes;
  Control& c = control();
  for (std::size_t i = large ? lane::up_slots : 0; i < (large ? all_up : lane::up_slots); ++i) {
    Slot& s = c.up[i];
    if (s.state.load(std::memory_order_acquire) != free) continue;
    char* data = slot_data(false, i, frame.size());
    if (!data) return false;
    copy_large(data, frame.data(), frame.size());
    s.size.store(frame.size(), std::memory_order_relaxed);
    s.chunks.store(0, std::memory_order_relaxed);
    s.state.store(full, std::memory_order_release);
    return true;
  }
  return false;
}

char* Lane::claim_large_result(std::size_t need) {
  Slot& s = control().up[lane::up_slots];
  if (!swap(s.state, free, writing)) return nullptr;
  char* data = slot_data(false, lane::up_slots, need);
  if (!data) s.state.store(free, std::memory_order_release);
  return data;
}

char* Lane::claimed_large_result(std::size_t need) { return slot_data(false, lane::up_slots, need); }

void Lane::copy_around(char* to, const char* from, std::size_t size, const std::vector<Range>& gaps) {
  std::size_t at = 0;
  for (const Range& g : gaps) {
    copy_large(to + at, from + at, g.at - at);
    at = g.at + g.n;
  }
  copy_large(to + at, from + at, size - at);
}

bool Lane::post_claimed(std::string_view frame, const std::vector<Range>& in_place, std::size_t written_to) {
  Slot& s = control().up[lane::up_slots];
  char* data = slot_data(false, lane::up_slots, frame.size());
  if (!data) return false;
  copy_around(data, frame.data(), frame.size(), in_place);
  trim_large(false, written_to, frame.size());
  s.size.store(frame.size(), std::memory_order_relaxed);
  s.chunks.store(1, std::memory_order_relaxed);  // written in place
  s.state.store(full, std::memory_order_release);
  return true;
}

void Lane::unclaim(std::string& frame, const std::vector<Range>& in_place, std::size_t written_to) {
  // The slot is mapped past every stretch: each was written through this mapping or a smaller one.
  const char* data = large_[1].p;
  for (const Range& r : in_place) copy_large(frame.data() + r.at, data + r.at, r.n);
  trim_large(false, written_to);
  control().up[lane::up_slots].state.store(free, std::memory_order_release);
}

void Lane::wait(std::chrono::microseconds spin, std::chrono::milliseconds sleep, const std::function<bool()>& ready) {
  const auto spin_until = std::chrono::steady_clock::now() + spin;
  while (std::chrono::steady_clock::now() < spin_until) {
    if (ready()) return;
    std::this_thread::yield();
  }
  Control& c = control();
  const std::uint32_t seen = c.bell.load(std::memory_order_seq_cst);
  c.sleeping.fetch_add(1, std::memory_order_seq_cst);
  if (!ready()) futex_wait(c.bell, seen, sleep);
  c.sleeping.fetch_sub(1, std::memory_order_relaxed);
}

// ---- the rings --------------------------------------------------------------------------------

namespace {

constexpr std::uint64_t ring_wrap = ~std::uint64_t(0);
constexpr std::uint64_t ring_more = std::uint64_t(1) << 32;
constexpr std::uint64_t padded(std::uint64_t n) { return (n + 7) & ~std::uint64_t(7); }

// Writes the next fragment of `rest` (`whole`: all of it, or nothing) at the ring's head.
bool ring_put(Lane::RingEnds& r, char* data, std::string_view& rest, bool whole) {
  constexpr std::uint64_t cap = lane::ring_bytes;
  std::uint64_t head = r.head.load(std::memory_order_relaxed);
  const std::uint64_t tail = r.tail.load(std::memory_order_acquire);
  // Ends its writer and reader never leave like this (a multiple of 8 each, at most the ring apart)
  // were scribbled by the other side (a task's wild pointer): nothing is written past the ring or
  // over what waits to be read; the caller goes another way (the agent's).
  if (((head | tail) & 7) != 0 || head - tail > cap) return false;
  std::uint64_t free = cap - (head - tail);
  std::uint64_t at = head % cap, to_end = cap - at;
  const std::uint64_t all = 8 + padded(rest.size());
  const std::uint64_t need = whole ? all : std::min<std::uint64_t>(16, all);  // at least a header and 8 bytes
  if (need > cap) return false;
  // To the start when what is needed does not fit before the end, or when all of it fits after
  // the wrap (a call is cut only when it could not go whole).
  if (to_end < need || (to_end < all && free >= to_end + all)) {  // (to_end is a multiple of 8: the marker fits)
    if (free < to_end + need) return false;
    std::memcpy(data + at, &ring_wrap, 8);
    head += to_end;
    free -= to_end;
    at = 0;
    to_end = cap;
  }
  if (free < need) return false;
  const std::uint64_t n = std::min<std::uint64_t>(rest.size(), (std::min(free, to_end) - 8) & ~std::uint64_t(7));
  const std::uint64_t header = n | (n < rest.size() ? ring_more : 0);
  std::memcpy(data + at, &header, 8);
  std::memcpy(data + at + 8, rest.data(), n);
  rest.remove_prefix(n);
  r.head.store(head + 8 + padded(n), std::memory_order_release);
  return true;
}

bool ring_take(Lane::RingEnds& r, const char* data, std::string& partial, std::string& out) {
  constexpr std::uint64_t cap = lane::ring_bytes;
  for (;;) {
    const std::uint64_t tail = r.tail.load(std::memory_order_relaxed);
    const std::uint64_t head = r.head.load(std::memory_order_acquire);
    if (tail == head) return false;
    // Ends further apart than the ring is long, or a tail off its 8-byte steps, were not left by
    // the two sides (a task's wild pointer): read on, records would come round again and again,
    // or a header be read across the ring's end.
    if (head - tail > cap || (tail & 7) != 0)
      throw wire::Malformed("fibra: a malformed message: a lane's ring has its ends at " + std::to_string(tail) +
                            " and " + std::to_string(head) + ", which its two sides never leave (a ring of " +
                            std::to_string(cap) + " bytes)");
    const std::uint64_t at = tail % cap, to_end = cap - at;
    std::uint64_t header = 0;
    std::memcpy(&header, data + at, 8);
    if (header == ring_wrap && to_end <= head - tail) {
      r.tail.store(tail + to_end, std::memory_order_release);
      continue;
    }
    const std::uint64_t n = header & 0xffffffff;
    if ((header & ~(ring_more | 0xffffffff)) != 0 || 8 + padded(n) > to_end || 8 + padded(n) > head - tail ||
        partial.size() + n > lane::large_bytes)
      throw wire::Malformed("fibra: a malformed message: a lane's ring holds a record of " + std::to_string(n) +
                            " bytes where " + std::to_string(std::min(to_end, head - tail)) + " are left");
    partial.append(data + at + 8, n);
    r.tail.store(tail + 8 + padded(n), std::memory_order_release);
    if ((header & ring_more) == 0) {
      out.swap(partial);
      partial.clear();
      return true;
    }
  }
}

bool ring_has(const Lane::RingEnds& r) {
  return r.head.load(std::memory_order_acquire) != r.tail.load(std::memory_order_relaxed);
}

}  // namespace

bool Lane::put_request(std::string_view& rest) {
  return ring_put(control().requests, base_ + lane::requests_offset, rest, false);
}

bool Lane::take_request(std::string& partial, std::string& out) {
  return ring_take(control().requests, base_ + lane::requests_offset, partial, out);
}

bool Lane::has_request() const { return ring_has(control().requests); }

bool Lane::put_reply(std::string_view reply) {
  if (!ring_put(control().replies, base_ + lane::replies_offset, reply, true)) return false;
  ring();
  return true;
}

bool Lane::take_reply(std::string& partial, std::string& out) {
  return ring_take(control().replies, base_ + lane::replies_offset, partial, out);
}

bool Lane::has_reply() const { return ring_has(control().replies); }

// ---- regions ------------------------------------------------------------------------------------

std::unique_ptr<LaneRegion> LaneRegion::create() {
  UniqueFd fd(::memfd_create("fibra-executor", MFD_CLOEXEC));
  if (!fd || ::ftruncate(fd.get(), lane::file_bytes) != 0)  // sparse: pages come as they are written
    throw Error(std::string("fibra agent: cannot create an executor's shared memory (memfd_create): ") +
                std::strerror(errno));
  void* m = ::mmap(nullptr, lane::region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (m == MAP_FAILED)
    throw Error(std::string("fibra agent: cannot map an executor's shared memory: ") + std::strerror(errno));
  return std::unique_ptr<LaneRegion>(new LaneRegion(std::move(fd), m));
}

std::unique_ptr<LaneRegion> LaneRegion::adopt(UniqueFd fd) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || std::size_t(st.st_size) < lane::region_bytes) return nullptr;
  void* m = ::mmap(nullptr, lane::region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (m == MAP_FAILED) return nullptr;
  return std::unique_ptr<LaneRegion>(new LaneRegion(std::move(fd), m));
}

std::unique_ptr<LaneRegion> LaneRegion::open(const std::string& path, std::uint64_t nonce, std::int64_t agent_pid,
                                             std::string& why) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd) {
    why = "cannot open " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  auto r = adopt(std::move(fd));
  if (!r) {
    why = path + " is not an executor's shared memory";
    return nullptr;
  }
  const Lane::Control& c = r->lane().control();
  if (c.magic != lane_magic || c.nonce != nonce || c.agent_pid != agent_pid) {
    why = path + " belongs to another pool or process";
    return nullptr;  // ~LaneRegion closes fd
  }
  return r;
}

LaneRegion::~LaneRegion() { ::munmap(base_, lane::region_bytes); }  // fd_ closes itself

}  // namespace fibra::detail
