// libFuzzer target: every decoder of bytes that arrive from another process (src/transport/wire.hpp):
// the first byte picks the decoder, the rest is its input. A decoder may refuse its input (it
// throws); it must not crash, read out of bounds, overflow, or allocate what the input merely
// announces.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "transport/wire.hpp"

using namespace fibra;

namespace {
template <class M>
void whole(std::string_view in) {
  (void)wire::decode<M>(in);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 24) {
      case 0: whole<wire::AgentSetup>(in); break;
      case 1: whole<wire::Hello>(in); break;
      case 2: whole<wire::JoinHello>(in); break;
      case 3: whole<wire::JoinAnswer>(in); break;
      case 4: whole<wire::ObjectFetch>(in); break;
      case 5: (void)wire::decode_object_request(in); break;
      case 6: (void)wire::decode_object_reply(in); break;
      case 7: (void)wire::decode_auth_hello(in); break;
      case 8: (void)wire::frame_length(in.substr(0, wire::frame_head), wire::max_join_message); break;
      case 9: (void)wire::parse_tasks(in); break;
      case 10: (void)wire::parse_results(in); break;
      case 11: (void)wire::decode_partial(in); break;
      case 12: (void)wire::parse_routed_request(in); break;
      case 13: whole<wire::Request>(in); break;
      case 14: whole<wire::Reply>(in); break;
      case 15: whole<wire::ChannelCall>(in); break;
      case 16: whole<wire::ChannelReply>(in); break;
      case 17: whole<wire::ActorStart>(in); break;
      case 18: whole<wire::ObjectFree>(in); break;
      case 19: whole<wire::ActorDeath>(in); break;
      case 20: (void)wire::policy_from_text(in); break;
      case 21: (void)wire::initializer_from_text(in); break;
      case 22: {
        wire::ObjectHead h;
        (void)wire::object_bytes(in, h);
        break;
      }
      case 23: whole<wire::Output>(in); break;
    }
  } catch (const std::exception&) {  // refused: what a decoder should do with bad bytes
  }
  return 0;
}
