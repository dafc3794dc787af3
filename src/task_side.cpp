#include "task_side.hpp"

#include <atomic>

namespace fibra::detail {
namespace {
std::atomic<TaskSide*> g_side{nullptr};
}  // namespace

TaskSide* task_side() noexcept { return g_side.load(std::memory_order_acquire); }

void register_task_side(TaskSide& side) noexcept { g_side.store(&side, std::memory_order_release); }

}  // namespace fibra::detail
