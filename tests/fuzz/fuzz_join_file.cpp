// libFuzzer target: the join file's parser (src/transport/join.hpp), which a joining worker runs on
// a file the driver wrote: any text is parsed or refused with ConfigError, never a crash.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string_view>

#include "transport/join.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)fibra::detail::join::parse(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const std::exception&) {
  }
  return 0;
}
