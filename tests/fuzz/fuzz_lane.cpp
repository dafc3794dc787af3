// libFuzzer target: the lanes' shared memory as the driver and the agent read it
// (src/transport/lane.hpp). An executor is the user's process: a task with a wild pointer may
// scribble over its lane before it dies. Whatever the slots' states and sizes, the rings' ends and
// their bytes hold, the readers must not read past a slot, a ring or the region, nor allocate what
// a size merely announces: a result slot or a ring record that cannot be whole is a
// wire::Malformed (the driver then declares that worker lost), a batch that cannot be read back
// stays where it is. The input is a list of writes (a 4-byte offset into the control block, the
// first slot of each way or a ring, then up to 8 bytes) over a real region (a memfd, as the agent
// makes it), after the driver posted a batch and the executor a result the honest way.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "transport/lane.hpp"
#include "transport/wire.hpp"

using namespace fibra::detail;

namespace {
// Where a write may land: the control block, the start of the first slot each way, and both
// ends of each ring.
std::size_t target_of(std::uint32_t pick, std::size_t& room) {
  room = 4096;
  switch (pick % 7) {
    case 0: room = lane::data_offset; return 0;                              // mailbox and control
    case 1: return lane::data_offset;                                        // the first down slot
    case 2: return lane::data_offset + lane::down_slots * lane::slot_bytes;  // the first up slot
    case 3: return lane::requests_offset;                                    // the calls' ring
    case 4: return lane::requests_offset + lane::ring_bytes - room;          // ... its end
    case 5: return lane::replies_offset;                                     // the answers' ring
    default: return lane::replies_offset + lane::ring_bytes - room;          // ... its end
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static auto region = LaneRegion::create();
  Lane& lane = region->lane();
  auto* base = reinterpret_cast<char*>(&lane.mailbox());
  lane.init(0x5eed, 1);
  lane.reopen();
  std::memset(base + lane::requests_offset, 0, 64);
  std::memset(base + lane::replies_offset, 0, 64);
  // The honest traffic first: a batch down, a result and a call up.
  const std::string batch(100, 'b'), frame(60, 'r');
  (void)lane.post(batch.size(), 1, [&](char* p) { std::memcpy(p, batch.data(), batch.size()); });
  (void)lane.post_result(frame);
  std::string_view call = "a call";
  (void)lane.put_request(call);
  (void)lane.put_reply("an answer");
  // Then the scribbles.
  for (std::size_t at = 0; at + 5 <= size;) {
    std::uint32_t pick = 0;
    std::memcpy(&pick, data + at, 4);
    const std::size_t n = std::min<std::size_t>(1 + data[at + 4] % 8, size - at - 5);
    at += 5;
    std::size_t room = 0;
    const std::size_t start = target_of(pick, room);
    const std::size_t offset = (pick >> 2) % (room - 8);
    std::memcpy(base + start + offset, data + at, n);
    at += n;
  }
  // A large slot's size may be up to 2 GiB of bytes that are there in the memfd (a real frame):
  // kept to a slot's worth here, so that a copy of them is not taken for an announced allocation.
  auto& c = lane.control();
  for (auto* s : {&c.down[lane::down_slots], &c.up[lane::up_slots]})
    if (s->size.load() > lane::slot_bytes) s->size.store(lane::slot_bytes);
  // What the driver reads (results, calls; a batch taken back), and the agent (its held batches).
  try {
    std::string out, partial;
    std::string_view held;
    for (int i = 0; i < 8; ++i)
      if (lane.take_result(out, held) == Lane::Took::held) lane.release_held(held.size());
    for (int i = 0; i < 8 && lane.take_request(partial, out); ++i) {
    }
  } catch (const fibra::wire::Malformed&) {
  }
  // The driver answers on a ring the executor may have scribbled, and the executor reads it.
  (void)lane.put_reply(std::string(300, 'a'));
  try {
    std::string out, partial;
    for (int i = 0; i < 8 && lane.take_reply(partial, out); ++i) {
    }
  } catch (const fibra::wire::Malformed&) {
  }
  std::string back;
  (void)lane.withdraw(back);
  (void)lane.busy();
  (void)lane.chunks_held();
  (void)lane.close();
  return 0;
}
