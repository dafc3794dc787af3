// What every page's ```cpp blocks may use without saying so (tests/docs/check_blocks.cmake): fibra
// and the standard headers. A page's own names (`pool`, its inputs, its functions) are declared in
// tests/docs/<page>.hpp.
#pragma once

#include <fibra/fibra.hpp>

#include <chrono>
#include <mutex>
#include <thread>
#include <cstdio>
#include <optional>
#include <ranges>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>
