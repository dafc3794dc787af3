// fibra/version.hpp: the library version.
#pragma once

#define FIBRA_VERSION_MAJOR 0
#define FIBRA_VERSION_MINOR 1
#define FIBRA_VERSION_PATCH 0
#define FIBRA_VERSION_STRING "0.1.0"

namespace fibra {
/// @brief The version of the fibra library this program was built against, "MAJOR.MINOR.PATCH".
inline constexpr const char* version = FIBRA_VERSION_STRING;
}  // namespace fibra
