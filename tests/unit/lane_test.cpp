// The lane between the driver and an executor (src/transport/lane.hpp), its three sides played in one
// process on a real memfd: the agent makes and closes it, the driver posts and takes results, the
// executor takes and finishes. Between processes the same atomics are shared through the mapping.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "transport/lane.hpp"
#include "transport/wire.hpp"

namespace {

using namespace fibra::detail;

constexpr std::uint64_t nonce = 0x5eed;

std::unique_ptr<LaneRegion> open_lane() {
  auto r = LaneRegion::create();
  r->lane().init(nonce, ::getpid());
  r->lane().reopen();
  return r;
}

std::string spill;  // take()'s fallback when the large slot cannot be mapped (not in these tests)

bool post(Lane& l, const std::string& bytes, std::uint32_t chunks = 1) {
  return l.post(bytes.size(), chunks, [&](char* out) { std::memcpy(out, bytes.data(), bytes.size()); });
}

TEST(Lane, ABatchGoesFromDriverToExecutorOldestFirstAndFreesItsSlotWhenFinished) {
  auto r = open_lane();
  Lane& l = r->lane();
  EXPECT_FALSE(l.has_batch());
  ASSERT_TRUE(post(l, "first", 3));
  ASSERT_TRUE(post(l, "second", 2));
  for (std::size_t i = 2; i < lane::down_slots; ++i) ASSERT_TRUE(post(l, "more " + std::to_string(i), 1));
  EXPECT_FALSE(post(l, "one too many")) << "only lane::down_slots batches wait at once; the rest go through the agent";
  EXPECT_EQ(l.chunks_held(), 5u + lane::down_slots - 2);
  EXPECT_EQ(l.busy(), lane::down_slots);
  std::string_view got;
  auto a = l.take(got, spill);
  ASSERT_TRUE(a);
  EXPECT_EQ(got, "first");
  auto b = l.take(got, spill);
  ASSERT_TRUE(b);
  EXPECT_EQ(got, "second");
  EXPECT_EQ(l.chunks_held(), 5u + lane::down_slots - 2) << "a taken batch is held until it is finished";
  l.finish(*a);
  EXPECT_EQ(l.chunks_held(), 2u + lane::down_slots - 2);
  EXPECT_TRUE(post(l, "in first's slot"));
  for (std::size_t i = 2; i < lane::down_slots; ++i) {
    ASSERT_TRUE(l.take(got, spill));
    EXPECT_EQ(got, "more " + std::to_string(i));
  }
  ASSERT_TRUE(l.take(got, spill));
  EXPECT_EQ(got, "in first's slot") << "oldest first, whatever the slot";
  EXPECT_FALSE(l.take(got, spill));
}

// The driver takes back a batch the executor has not taken (a stolen batch, a cancel before it
// starts): the newest posted one, whose slot is then free; the executor never gets it.
TEST(Lane, AWithdrawnBatchIsTheNewestPostedAndTheExecutorNeverTakesIt) {
  auto r = open_lane();
  Lane& l = r->lane();
  std::string back;
  EXPECT_FALSE(l.withdraw(back)) << "nothing posted";
  ASSERT_TRUE(post(l, "older", 2));
  ASSERT_TRUE(post(l, "newer", 3));
  ASSERT_TRUE(l.withdraw(back));
  EXPECT_EQ(back, "newer");
  EXPECT_EQ(l.busy(), 1u) << "its slot is free again";
  EXPECT_EQ(l.chunks_held(), 2u);
  std::string_view got;
  auto a = l.take(got, spill);
  ASSERT_TRUE(a);
  EXPECT_EQ(got, "older");
  EXPECT_FALSE(l.take(got, spill)) << "the withdrawn batch was taken too: it would run twice";
  EXPECT_FALSE(l.withdraw(back)) << "a batch the executor took cannot be taken back";
  l.finish(*a);
  EXPECT_EQ(l.busy(), 0u);
}

// Over a small slot's 1 MiB, a batch takes the large slot (one each way), mapped as far as it is
// used; over MPI's 2 GiB it is refused (the caller's check says why).
TEST(Lane, ALargeBatchAndALargeFrameTakeTheLargeSlot) {
  auto r = open_lane();
  Lane& l = r->lane();
  std::string big(3 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = char(i * 7 + i / 4096);
  ASSERT_TRUE(post(l, big, 1));
  EXPECT_FALSE(post(l, big)) << "one large batch at a time; the next goes through the agent";
  EXPECT_TRUE(post(l, "small")) << "the small slots are apart";
  EXPECT_FALSE(l.post(lane::large_bytes + 1, 1, [](char*) { FAIL() << "filled a batch over the limit"; }));
  std::string_view got;
  auto slot = l.take(got, spill);
  ASSERT_TRUE(slot);
  EXPECT_EQ(std::size_t(*slot), lane::down_slots);
  EXPECT_TRUE(got == big) << "the large batch, read where it is";
  l.finish(*slot);
  ASSERT_TRUE(l.take(got, spill));
  EXPECT_EQ(got, "small");
  ASSERT_TRUE(post(l, big + big, 2)) << "a larger one maps further";

  ASSERT_TRUE(l.post_result(big));
  EXPECT_FALSE(l.post_result(big)) << "the large up slot is full until the driver takes it";
  std::string frame;
  ASSERT_TRUE(l.take_result(frame));
  EXPECT_TRUE(frame == big);
  EXPECT_TRUE(l.post_result(big));

  // The driver may leave a large frame where it lies while its call decodes it: the slot is then
  // not the executor's to write until the driver gives it back.
  std::string_view held;
  ASSERT_EQ(l.take_result(frame, held), Lane::Took::held);
  EXPECT_TRUE(held == big) << "the frame, read where it is";
  EXPECT_FALSE(l.post_result(big + "x")) << "the executor overwrote a frame the driver still reads";
  EXPECT_EQ(l.take_result(frame, held), Lane::Took::none) << "a held frame is not taken twice";
  EXPECT_TRUE(l.post_result("small")) << "the small slots are apart";
  ASSERT_EQ(l.take_result(frame, held), Lane::Took::copied);
  EXPECT_EQ(frame, "small");
  l.release_held(big.size());
  EXPECT_TRUE(l.post_result(big + "x")) << "given back, the large slot takes the next frame";
}

TEST(Lane, ClosingAfterADeathReturnsWhatTheExecutorHeldAndRefusesMore) {
  auto r = open_lane();
  Lane& l = r->lane();
  ASSERT_TRUE(post(l, "running", 3));
  std::string_view got;
  auto slot = l.take(got, spill);
  ASSERT_TRUE(slot);
  ASSERT_TRUE(post(l, "waiting"));
  l.sent(*slot).store(1);  // it sent the results of its first chunk, then died
  const auto held = l.close();
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0].batch, "running");
  EXPECT_EQ(held[0].sent, 1u);
  EXPECT_EQ(held[1].batch, "waiting");
  EXPECT_EQ(held[1].sent, 0u) << "a batch not taken yet has sent nothing";
  EXPECT_FALSE(post(l, "after")) << "a closed lane takes nothing: the batch goes through the agent";
  l.finish(*slot);  // a late finish from the dead executor's side changes nothing
  EXPECT_FALSE(post(l, "after"));
  EXPECT_TRUE(l.close().empty());
  l.reopen();
  // Died in finish(): every result of its batch sent, the slot not yet free. Nothing to report
  // (the large slot's trim may already have zeroed the batch's tail).
  ASSERT_TRUE(post(l, "all sent", 2));
  auto done = l.take(got, spill);
  ASSERT_TRUE(done);
  l.sent(*done).store(2);
  EXPECT_TRUE(l.close().empty());
  l.reopen();
  EXPECT_EQ(l.chunks_held(), 0u);
  EXPECT_TRUE(post(l, "for the next executor"));
}

TEST(Lane, APostThatRacesTheCloseFailsAndIsNotReported) {
  auto r = open_lane();
  Lane& l = r->lane();
  std::vector<Lane::Held> held;
  const bool posted = l.post(4, 1, [&](char* out) {
    std::memcpy(out, "race", 4);
    held = l.close();  // the agent closes while the driver writes
  });
  EXPECT_FALSE(posted) << "the driver must send it through the agent instead";
  EXPECT_TRUE(held.empty()) << "the agent must not report a batch the driver will send again";
  std::string_view got;
  EXPECT_FALSE(l.take(got, spill));
}

TEST(Lane, ResultFramesComeBackAndOutliveTheExecutorsRestart) {
  auto r = open_lane();
  Lane& l = r->lane();
  for (int i = 0; i < int(lane::up_slots); ++i) ASSERT_TRUE(l.post_result("frame " + std::to_string(i)));
  EXPECT_FALSE(l.post_result("one more")) << "every up slot is full: it goes through the socket";
  EXPECT_TRUE(l.post_result(std::string(lane::slot_bytes + 1, 'x'))) << "a large one has a slot of its own";
  (void)l.close();
  l.reopen();  // a restart must not drop what the dead executor left for the driver
  std::set<std::string> got;
  std::string f;
  while (l.take_result(f)) got.insert(f);
  EXPECT_EQ(got.size(), lane::up_slots + 1);
  EXPECT_TRUE(got.count("frame 0"));
  EXPECT_TRUE(l.post_result("after"));
}

// A frame encoded into the large up slot as it goes (the executor's FrameSpill): the claimed slot
// is neither the driver's to read nor another frame's; it is posted with the bytes around the
// stretch written in place, or given back with that stretch copied into the frame; a restart
// frees the claim of a dead executor.
TEST(Lane, AFrameWrittenInPlaceIsPostedWholeOrGivenBack) {
  auto r = open_lane();
  Lane& l = r->lane();
  const std::size_t at = 1 << 20, n = 4 << 20;
  std::string whole(6 << 20, '\0');
  for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = char(i * 13 + i / 4096);
  std::string holey = whole;  // what the frame string holds: not the stretch written in place
  std::memset(holey.data() + at, 'x', n);
  const std::vector<Lane::Range> in_place{{at, n}};

  char* slot = l.claim_large_result(whole.size());
  ASSERT_NE(slot, nullptr);
  EXPECT_EQ(l.claim_large_result(10), nullptr) << "claimed twice";
  std::memcpy(slot + at, whole.data() + at, n);
  std::string got;
  std::string_view held;
  EXPECT_EQ(l.take_result(got, held), Lane::Took::none) << "the driver read a frame still being written";
  EXPECT_FALSE(l.post_result(whole)) << "another frame took the claimed slot";
  ASSERT_TRUE(l.post_claimed(holey, in_place, at + n));
  bool in_place_seen = false;
  ASSERT_EQ(l.take_result(got, held, &in_place_seen), Lane::Took::held);
  EXPECT_TRUE(in_place_seen) << "the driver is told the frame was written in place";
  EXPECT_TRUE(std::string(held) == whole) << "the bytes around the stretch, or the stretch, are wrong";
  l.release_held(held.size());
  ASSERT_NE(l.claim_large_result(whole.size()), nullptr);  // the same again, taken by copy this time
  ASSERT_TRUE(l.post_claimed(holey, in_place, at + n));
  ASSERT_TRUE(l.take_result(got));
  EXPECT_TRUE(got == whole) << "the bytes around the stretch, or the stretch, are wrong";

  slot = l.claim_large_result(whole.size());
  ASSERT_NE(slot, nullptr);
  std::memcpy(slot + at, whole.data() + at, n);
  std::string back = holey;
  l.unclaim(back, in_place, at + n);
  EXPECT_TRUE(back == whole) << "the frame given back lacks what was written in place";
  EXPECT_TRUE(l.post_result(whole)) << "a slot given back takes the next frame";
  ASSERT_EQ(l.take_result(got, held, &in_place_seen), Lane::Took::held);
  EXPECT_FALSE(in_place_seen) << "a frame copied into the slot is not one written in place";
  l.release_held(held.size());

  // Two stretches, the second at the frame's end.
  const std::vector<Lane::Range> two{{16, 1 << 20}, {whole.size() - (2 << 20), 2 << 20}};
  std::string holey2 = whole;
  slot = l.claim_large_result(whole.size());
  ASSERT_NE(slot, nullptr);
  std::memset(slot, 0, whole.size());  // not the last frame's bytes: only what is written now counts
  for (const auto& s : two) {
    std::memcpy(slot + s.at, whole.data() + s.at, s.n);
    std::memset(holey2.data() + s.at, 'y', s.n);
  }
  ASSERT_TRUE(l.post_claimed(holey2, two, whole.size()));
  ASSERT_TRUE(l.take_result(got));
  EXPECT_TRUE(got == whole) << "two stretches: the bytes around or between them are wrong";

  ASSERT_NE(l.claim_large_result(10), nullptr);
  (void)l.close();  // the executor died while it wrote
  l.reopen();
  EXPECT_NE(l.claim_large_result(10), nullptr) << "a restart left the dead executor's claim";
}

// Pages a frame wrote in place past what the large slot keeps (lane::large_kept) are given back
// when the frame goes another way, or is posted shorter than they reach (a result cut from it).
TEST(Lane, PagesWrittenInPlacePastWhatTheSlotKeepsAreGivenBack) {
  // Counted in 4 KiB pages: a kernel that gives shared memory huge pages would count 2 MiB ones.
  namespace fs = std::filesystem;
  const auto never = [](const fs::path& p) {
    std::ifstream f(p);
    std::string s((std::istreambuf_iterator<char>(f)), {});
    return s.find("[never]") != std::string::npos || s.find("[inherit]") != std::string::npos;
  };
  const fs::path thp = "/sys/kernel/mm/transparent_hugepage";
  bool small_pages = never(thp / "shmem_enabled");
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(thp, ec))
    if (d.path().filename().string().starts_with("hugepages-") && fs::exists(d.path() / "shmem_enabled"))
      small_pages = small_pages && never(d.path() / "shmem_enabled");
  if (!small_pages) GTEST_SKIP() << "shared memory may get huge pages here (shmem_enabled)";
  auto r = open_lane();
  Lane& l = r->lane();
  const auto blocks = [&] {
    struct stat st {};
    ::fstat(r->fd(), &st);
    return st.st_blocks;  // of 512 bytes
  };
  const std::size_t far = lane::large_kept + (4 << 20);
  const auto before = blocks();
  char* slot = l.claim_large_result(far + 4096);
  ASSERT_NE(slot, nullptr);
  std::memset(slot + far, 'z', 4096);
  EXPECT_GT(blocks(), before);
  std::string frame = "given back";
  l.unclaim(frame, {}, far + 4096);
  EXPECT_EQ(blocks(), before) << "a page past large_kept stayed after the frame was given back";

  slot = l.claim_large_result(far + 4096);
  ASSERT_NE(slot, nullptr);
  std::memset(slot + far, 'z', 4096);
  ASSERT_TRUE(l.post_claimed("posted", {}, far + 4096));
  EXPECT_LE(blocks(), before + 8) << "a page past the frame and large_kept stayed after it was posted";
}

// The ring of calls: each comes out whole and in order however it was cut, at the ring's end too;
// a call larger than the ring goes as fragments while the reader takes them.
TEST(LaneRings, CallsComeOutWholeInOrderAcrossTheWrapAndInFragments) {
  auto r = open_lane();
  Lane& l = r->lane();
  std::string partial, out;
  EXPECT_FALSE(l.has_request());
  EXPECT_FALSE(l.take_request(partial, out));
  // Sizes that are not multiples of 8, written until far past the ring's size: the wrap is crossed.
  std::size_t written = 0;
  for (int k = 0; written < 5 * lane::ring_bytes; ++k) {
    const std::string call(std::size_t(1 + (k * 7919) % 40000), char('a' + k % 26));
    std::string_view rest = call;
    ASSERT_TRUE(l.put_request(rest)) << "call " << k << " of " << call.size()
                                     << " bytes found no room in an empty ring";
    ASSERT_TRUE(rest.empty()) << "call " << k << " was cut although it fits";
    ASSERT_TRUE(l.has_request());
    ASSERT_TRUE(l.take_request(partial, out));
    ASSERT_EQ(out, call) << "call " << k;
    written += call.size();
  }
  // Calls queued up until the ring is full: the next waits (no fragment fits), and comes once one is read.
  std::vector<std::string> queued;
  for (int k = 0;; ++k) {
    const std::string call(1000, char('A' + k % 26));
    std::string_view rest = call;
    while (!rest.empty() && l.put_request(rest)) {
    }
    if (rest.size() == call.size()) break;        // no room for any of it
    if (!rest.empty()) {                          // its first part went: it is finished once room comes
      ASSERT_TRUE(l.take_request(partial, out));  // frees the room of the first call
      EXPECT_EQ(out, queued.front());
      queued.erase(queued.begin());
      while (!rest.empty()) ASSERT_TRUE(l.put_request(rest)) << "no room after a call was read";
      queued.push_back(call);
      break;
    }
    queued.push_back(call);
  }
  ASSERT_GT(queued.size(), lane::ring_bytes / 1100);
  for (const auto& call : queued) {
    ASSERT_TRUE(l.take_request(partial, out));
    EXPECT_EQ(out, call);
  }
  EXPECT_FALSE(l.take_request(partial, out));
  // A call of 3 ring sizes: written in fragments, read as they come, whole at the end.
  std::string big(3 * lane::ring_bytes + 5, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = char(i * 131 % 251);
  std::string_view rest = big;
  int fragments = 0;
  bool whole = false;
  while (!rest.empty() || !whole) {
    if (!rest.empty() && l.put_request(rest)) {
      ++fragments;
      continue;
    }
    whole = l.take_request(partial, out);
    ASSERT_TRUE(whole || !rest.empty()) << "the ring holds the whole call but it does not come out";
  }
  EXPECT_EQ(out, big);
  EXPECT_GE(fragments, 4);
}

// Answers go whole or not at all (one that does not fit goes through the agent); each rings the bell.
TEST(LaneRings, AnAnswerGoesWholeOrNotAtAllAndRingsTheBell) {
  auto r = open_lane();
  Lane& l = r->lane();
  std::string partial, out;
  const std::uint32_t bell = l.control().bell.load();
  EXPECT_TRUE(l.put_reply("first"));
  EXPECT_EQ(l.control().bell.load(), bell + 1);
  EXPECT_FALSE(l.put_reply(std::string(lane::ring_bytes, 'x'))) << "an answer larger than the ring";
  std::size_t put = 0;
  while (l.put_reply(std::string(100000, 'y'))) ++put;
  EXPECT_EQ(put, (lane::ring_bytes - 16) / 100008);
  ASSERT_TRUE(l.take_reply(partial, out));
  EXPECT_EQ(out, "first");
  for (std::size_t k = 0; k < put; ++k) {
    ASSERT_TRUE(l.take_reply(partial, out));
    EXPECT_EQ(out, std::string(100000, 'y'));
  }
  EXPECT_FALSE(l.has_reply());
}

// What no executor writes is refused by name, not read past the ring.
TEST(LaneRings, ARecordLongerThanTheRingIsMalformed) {
  auto r = open_lane();
  Lane& l = r->lane();
  std::string_view rest = "a call";
  ASSERT_TRUE(l.put_request(rest));
  const std::uint64_t huge = 0xfffffff0;
  std::memcpy(reinterpret_cast<char*>(&l.mailbox()) + lane::requests_offset, &huge, 8);
  std::string partial, out;
  try {
    l.take_request(partial, out);
    FAIL() << "a record of 4 GiB was taken";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("a lane's ring holds a record of"), std::string::npos) << e.what();
  }
}

TEST(Lane, TheDriverMapsOnlyALaneOfItsOwnPool) {
  auto r = open_lane();
  const std::string path = "/proc/self/fd/" + std::to_string(r->fd());
  std::string why;
  EXPECT_EQ(LaneRegion::open(path, nonce + 1, ::getpid(), why), nullptr);
  EXPECT_NE(why.find("another pool"), std::string::npos) << why;
  EXPECT_EQ(LaneRegion::open(path, nonce, ::getpid() + 1, why), nullptr);
  EXPECT_EQ(LaneRegion::open("/proc/self/fd/99999", nonce, ::getpid(), why), nullptr);
  EXPECT_NE(why.find("cannot open"), std::string::npos) << why;
  EXPECT_FALSE(r->lane().in_use());
  auto d = LaneRegion::open(path, nonce, ::getpid(), why);
  ASSERT_NE(d, nullptr) << why;
  EXPECT_FALSE(r->lane().in_use()) << "in use once the driver has every lane of the agent";
  d->lane().mark_in_use();
  EXPECT_TRUE(r->lane().in_use()) << "the executor watches a lane the driver uses";
  // Two mappings of one memfd: what the driver posts, the agent's mapping sees.
  ASSERT_TRUE(post(d->lane(), "shared", 7));
  EXPECT_EQ(r->lane().chunks_held(), 7u);
  std::string_view got;
  ASSERT_TRUE(r->lane().take(got, spill));
  EXPECT_EQ(got, "shared");
}

TEST(Lane, TheMailboxSitsAtTheStartOfTheRegion) {
  auto r = open_lane();
  r->lane().mailbox().chunk.store(42);
  auto e = LaneRegion::adopt(fibra::detail::UniqueFd(::dup(r->fd())));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->lane().mailbox().chunk.load(), 42u);
}

}  // namespace

// What a task's wild pointer may leave in its lane before it dies (found by tests/fuzz/fuzz_lane):
// a result slot whose size says more than the slot holds is a malformed message (the driver then
// declares the worker lost), not a read past it; a posted batch whose size was scribbled is not
// taken back (it stays for the executor); a ring whose ends are further apart than it is long is
// malformed at once, not read round and round for ever; the agent reads no held batch past its slot.
TEST(LaneScribbled, SizesAndRingEndsPastTheirBoundsAreRefusedNotRead) {
  auto r = open_lane();
  Lane& l = r->lane();
  ASSERT_TRUE(l.post_result("a frame"));
  l.control().up[0].size.store(lane::slot_bytes + 1);
  std::string frame;
  EXPECT_THROW(l.take_result(frame), fibra::wire::Malformed);

  ASSERT_TRUE(post(l, "batch", 1));
  auto& posted = l.control().down[0];
  posted.size.store(std::uint64_t(1) << 40);
  std::string back;
  EXPECT_FALSE(l.withdraw(back)) << "a batch the size of which is no longer its own was read back";
  const auto held = l.close();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].batch.size(), lane::slot_bytes) << "the agent read a held batch past its slot";

  auto r2 = open_lane();
  Lane& l2 = r2->lane();
  std::string_view call = "a call";
  ASSERT_TRUE(l2.put_request(call));
  l2.control().requests.head.store(l2.control().requests.tail.load() + 3 * lane::ring_bytes);
  std::string partial, out;
  EXPECT_THROW(l2.take_request(partial, out), fibra::wire::Malformed);

  // The answers' ring with its ends scribbled: the driver writes nothing (the agent's way then),
  // in particular no wrap marker across the ring's end, which is the region's.
  auto& replies = l2.control().replies;
  replies.head.store(lane::ring_bytes - 3);
  replies.tail.store(lane::ring_bytes - 3);
  EXPECT_FALSE(l2.put_reply("an answer")) << "an answer was written at an end off the ring's 8-byte steps";
  replies.head.store(5 * lane::ring_bytes);
  replies.tail.store(0);
  EXPECT_FALSE(l2.put_reply("an answer")) << "an answer was written over what waits to be read";
}
