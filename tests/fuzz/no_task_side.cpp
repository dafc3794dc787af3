// What src/task_side.cpp's spill_large does in a process that runs no task (the driver, an agent):
// nothing is spilled. That file would bring the whole task side into the fuzz targets.
#include <cstddef>
#include <string>

namespace fibra::detail {
bool spill_large(std::string&, const void*, std::size_t) { return false; }
}  // namespace fibra::detail
