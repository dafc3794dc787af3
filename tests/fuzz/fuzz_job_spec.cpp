// libFuzzer target: the Slurm job spec's parser and checks (slurm/include/fibra/slurm/spec.hpp),
// run on a user's TOML file: any text is a spec or a clear error, never a crash.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string_view>

#include "fibra/slurm/spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)fibra::slurm::parse_spec(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.toml");
  } catch (const std::exception&) {
  }
  try {
    (void)fibra::slurm::parse_time_limit(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const std::exception&) {
  }
  return 0;
}
