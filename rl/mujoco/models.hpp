// rl/mujoco/models.hpp: the project's own MJCF models, embedded (models.cpp).
#pragma once

namespace fibra::rl::detail {

extern const char* const hopper_xml;
extern const char* const half_cheetah_xml;

}  // namespace fibra::rl::detail
