// src/task_side.cpp: see task_side.hpp.
#include "task_side.hpp"

#include <atomic>

namespace fibra::detail {
namespace {
std::atomic<TaskSide*> g_side{nullptr};
std::atomic<std::uint64_t> g_next_holder{1};
thread_local constinit std::uint64_t t_holder = 0;
}  // namespace

TaskSide* task_side() noexcept { return g_side.load(std::memory_order_acquire); }

void register_task_side(TaskSide& side) noexcept { g_side.store(&side, std::memory_order_release); }

std::uint64_t lock_holder() noexcept {
  if (t_holder == 0) t_holder = g_next_holder++;
  return t_holder;
}

HolderScope::HolderScope() noexcept : was_(t_holder) { t_holder = g_next_holder++; }
HolderScope::~HolderScope() { t_holder = was_; }

// (declared in fibra/detail/codec.hpp: the executor's, through its side; nowhere else)
bool spill_large(std::string& out, const void* p, std::size_t n) {
  TaskSide* t = task_side();
  return t && t->spill_large(out, p, n);
}

}  // namespace fibra::detail
