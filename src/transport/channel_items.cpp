// fibra/detail/channel.hpp's ChannelItems: what of it is not a template (the checks of its layout).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "fibra/detail/channel.hpp"
#include "fibra/error.hpp"

namespace fibra::detail {

void ChannelItems::check_fixed() const {
  if (stride_ != 0 && (count_ > bytes_.size() / stride_ || count_ * stride_ != bytes_.size()))
    throw Error(std::to_string(bytes_.size()) + " bytes do not hold " + std::to_string(count_) + " items of " +
                std::to_string(stride_) + " bytes");
}

void ChannelItems::unfix() {
  check_fixed();
  ChannelItems sized;
  sized.bytes_.reserve(bytes_.size() + count_ * sizeof(std::uint64_t));
  each([&](std::string_view item) { sized.add_encoded(item); });
  *this = std::move(sized);
}

std::vector<std::uint64_t> ChannelItems::offsets() const {
  std::vector<std::uint64_t> at;
  if (stride_ != 0) {
    check_fixed();
    at.resize(count_ + 1);
    for (std::uint64_t i = 0; i <= count_; ++i) at[i] = i * stride_;
    return at;
  }
  at.reserve(std::min<std::uint64_t>(count_, bytes_.size() / sizeof(std::uint64_t)) + 1);
  std::uint64_t p = 0;
  for (std::uint64_t i = 0; i < count_; ++i) {
    std::uint64_t n = 0;
    if (bytes_.size() - p < sizeof n)
      throw Error("item " + std::to_string(i) + " of " + std::to_string(count_) + " is cut short (" +
                  std::to_string(bytes_.size()) + " bytes)");
    std::memcpy(&n, bytes_.data() + p, sizeof n);
    if (n > bytes_.size() - p - sizeof n)
      throw Error("item " + std::to_string(i) + " of " + std::to_string(count_) + " says it has " + std::to_string(n) +
                  " bytes, past the end of its message");
    at.push_back(p);
    p += sizeof n + n;
  }
  if (p != bytes_.size())
    throw Error(std::to_string(bytes_.size() - p) + " bytes follow the last of " + std::to_string(count_) + " items");
  at.push_back(p);
  return at;
}

}  // namespace fibra::detail
