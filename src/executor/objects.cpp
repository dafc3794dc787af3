// src/executor/objects.cpp: see objects.hpp, and docs/architecture.md, "The object store".
#include "executor/objects.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>

#include "fibra/detail/codec.hpp"
#include "fibra/error.hpp"
#include "transport/object_memory.hpp"
#include "common/env.hpp"

namespace fibra::detail {

namespace {

// Mapped objects by id. The task thread uses them (and a thread that runs a nested batch while the
// task thread waits: one at a time), so a lock costs nothing and keeps it simple.
std::mutex g_mu;
std::map<std::uint64_t, std::unique_ptr<ObjectMemory>> g_mapped;

std::string_view mapped(const wire::ObjectRef& ref, pid_t agent) {
  std::lock_guard lk(g_mu);
  auto it = g_mapped.find(ref.id);
  if (it != g_mapped.end()) return it->second->bytes();
  const std::string name = object_memfd_name(ref.origin, ref.id);
  // The agent's copy first (the driver sent it one: another host, or no shared memory with the
  // driver), then the driver's own memfd (this host's, when its name matches there).
  std::unique_ptr<ObjectMemory> m;
  if (const std::string at_agent = ObjectMemory::find(agent, name); !at_agent.empty())
    m = ObjectMemory::open(at_agent, name, ref.size);
  if (!m) m = ObjectMemory::open("/proc/" + std::to_string(ref.pid) + "/fd/" + std::to_string(ref.fd), name, ref.size);
  if (!m)
    throw Error(
        "fibra: the stored object " + std::to_string(ref.id) + " (fibra::put, " + std::to_string(ref.size) +
        " bytes) that this task takes is not on this host: neither the driver (pid " + std::to_string(ref.pid) +
        ") nor this worker's agent (pid " + std::to_string(agent) +
        ") has it open; it was freed, its agent could not keep a copy (its log says why), or /proc does not let "
        "this process read theirs");
  return g_mapped.emplace(ref.id, std::move(m)).first->second->bytes();
}

}  // namespace

std::string_view executor_arguments(const wire::TaskView& t, pid_t agent, std::string& joined) {
  const auto& refs = t.header.objects;
  if (refs.empty()) return t.payload;
  if (refs.size() == 1 && t.payload.empty()) return mapped(refs[0], agent);  // read where it lies
  std::size_t total = t.payload.size();
  for (const auto& r : refs) total += r.size;
  joined.clear();
  reserve_large(joined, total);
  std::size_t from = 0;
  for (const auto& r : refs) {
    if (r.at < from || r.at > t.payload.size()) throw Error("fibra: a malformed task: a stored object out of place");
    joined.append(t.payload.substr(from, r.at - from));
    const std::string_view b = mapped(r, agent);
    if (b.size() >= large_buffer)
      append_large(joined, b.data(), b.size());
    else
      joined.append(b);
    from = r.at;
  }
  joined.append(t.payload.substr(from));
  return joined;
}

void executor_keep_objects_of(const std::vector<wire::TaskView>& batch) {
  std::set<std::uint64_t> used;
  for (const auto& t : batch)
    for (const auto& r : t.header.objects) used.insert(r.id);
  executor_keep_objects(used);
}

void executor_keep_objects(const std::set<std::uint64_t>& ids) {
  std::lock_guard lk(g_mu);
  std::erase_if(g_mapped, [&](const auto& e) { return !ids.count(e.first); });
}

namespace {
class TaskObject final : public StoredObject {
 public:
  TaskObject(std::uint64_t id, std::unique_ptr<ObjectMemory> m) : memory_(std::move(m)) {
    this->id = id;
    pid = origin = ::getpid();
    fd = memory_->fd();
    bytes = memory_->bytes();
  }

 private:
  std::unique_ptr<ObjectMemory> memory_;
};
}  // namespace

bool executor_on_driver_host() {
  static const bool on = env::flag("FIBRA_DRIVER_HOST").value_or(false);
  return on;
}

std::shared_ptr<const StoredObject> executor_store_object(std::string& encoded) {
  if (!executor_on_driver_host()) return nullptr;
  // Unique in the driver's run, as far as chance goes: the driver's ids count up from 1; these have
  // bit 61 set, 36 random bits drawn once per process (pids are reused), and a count.
  static const std::uint64_t nonce = [] {
    try {
      std::random_device r;
      return r() ^ (std::uint64_t(r()) << 32);
    } catch (const std::exception&) {  // no source of randomness: the time and the pid
      return std::uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) ^
             (std::uint64_t(::getpid()) << 40);
    }
  }();
  static std::atomic<std::uint32_t> next{1};
  const std::uint64_t id =
      (std::uint64_t(1) << 61) | ((nonce & 0xfffffffffULL) << 24) | (next.fetch_add(1) & 0xffffffu);
  std::unique_ptr<ObjectMemory> m;
  try {
    m = ObjectMemory::create(object_memfd_name(::getpid(), id), encoded, "fibra::put in a task");
  } catch (const Error&) {
    return nullptr;  // /dev/shm full, say: the Future holds the value
  }
  give_back_large(encoded);
  encoded.clear();
  return std::make_shared<TaskObject>(id, std::move(m));
}

}  // namespace fibra::detail
