// src/driver/objects.cpp: fibra::put's store in the driver (docs/architecture.md, "The object store").
#include "driver/objects.hpp"

#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "task_side.hpp"
#include "fibra/detail/codec.hpp"
#include "fibra/detail/core.hpp"
#include "fibra/error.hpp"
#include "fibra/object.hpp"
#include "transport/object_memory.hpp"

namespace fibra::detail {

namespace {

// What one MPI message carries (an agent on another host is sent the object in one).
constexpr std::size_t max_object_bytes = (std::size_t(1) << 31) - 4096;

struct Listeners {
  std::mutex mu;
  std::uint64_t next = 1;
  std::map<std::uint64_t, std::function<void(std::uint64_t)>> all;
};
Listeners& listeners() {
  static auto* l = new Listeners;  // never destroyed: objects may be freed during static destruction
  return *l;
}

void tell_freed(std::uint64_t id) noexcept {
  Listeners& l = listeners();
  std::lock_guard lk(l.mu);
  for (auto& [token, f] : l.all) {
    try {
      f(id);
    } catch (...) {  // a pool that cannot queue the message: its agents keep a copy until they end
    }
  }
}

class DriverObject final : public StoredObject {
 public:
  DriverObject(std::uint64_t id, std::int64_t origin, std::unique_ptr<ObjectMemory> m) : memory_(std::move(m)) {
    this->id = id;
    this->origin = origin;
    pid = ::getpid();
    fd = memory_->fd();
    bytes = memory_->bytes();
  }
  ~DriverObject() override {
    memory_.reset();
    tell_freed(id);
  }

 private:
  std::unique_ptr<ObjectMemory> memory_;
};

}  // namespace

std::uint64_t next_object_id() {
  static std::atomic<std::uint64_t> next_id{1};
  return next_id.fetch_add(1);
}

std::shared_ptr<const StoredObject> store_bytes(std::string_view bytes, const char* who) {
  const std::uint64_t id = next_object_id();
  auto memory = ObjectMemory::create(object_memfd_name(::getpid(), id), bytes, who);
  return std::make_shared<DriverObject>(id, ::getpid(), std::move(memory));
}

std::shared_ptr<const StoredObject> store_object(std::string& encoded) {
  if (encoded.size() > max_object_bytes)
    throw ConfigError("fibra::put: the value encodes to " + std::to_string(encoded.size()) +
                      " bytes, more than the 2 GiB one message carries; split it into parts and put each");
  if (in_executor()) return task_side()->store_object(encoded);
  auto object = store_bytes(encoded, "fibra::put");
  give_back_large(encoded);  // its memory serves the next large buffer
  encoded.clear();
  return object;
}

namespace {

// One StoredObject per (origin, id) while it lives: a value a task stored comes with each call given it.
struct Taken {
  std::mutex mu;
  std::map<std::pair<std::int64_t, std::uint64_t>, std::weak_ptr<const StoredObject>> all;  // by (origin, id)
};
Taken& taken_objects() {
  static auto* t = new Taken;  // never destroyed
  return *t;
}

}  // namespace

std::shared_ptr<const StoredObject> store_kept_copy(std::int64_t origin, std::uint64_t id, std::string_view bytes) {
  auto o = std::make_shared<DriverObject>(
      id, origin, ObjectMemory::create(object_memfd_name(origin, id), bytes, "fibra: a result kept on another host"));
  Taken& t = taken_objects();
  std::lock_guard lk(t.mu);
  if (t.all.size() > 64) std::erase_if(t.all, [](const auto& e) { return e.second.expired(); });
  t.all[{origin, id}] = o;
  return o;
}

std::shared_ptr<const StoredObject> take_kept_result(std::int64_t holder, std::int64_t origin, std::uint64_t id,
                                                     std::uint64_t size, std::string& why) {
  Taken& t = taken_objects();
  std::lock_guard lk(t.mu);
  if (auto it = t.all.find({origin, id}); it != t.all.end()) {
    if (auto o = it->second.lock()) return o;
  }
  if (t.all.size() > 64) std::erase_if(t.all, [](const auto& e) { return e.second.expired(); });
  const std::string name = object_memfd_name(origin, id);
  const std::string path = ObjectMemory::find(holder, name);
  std::unique_ptr<ObjectMemory> m;
  if (!path.empty()) m = ObjectMemory::open(path, name, size, true);
  if (!m) {
    why = "the shared memory it was kept in (" + name + ", " + std::to_string(size) +
          " bytes) was not open in its agent (pid " + std::to_string(holder) + ")";
    return nullptr;
  }
  auto o = std::make_shared<DriverObject>(id, origin, std::move(m));
  t.all[{origin, id}] = o;
  return o;
}

std::uint64_t on_object_freed(std::function<void(std::uint64_t)> f) {
  Listeners& l = listeners();
  std::lock_guard lk(l.mu);
  const std::uint64_t token = l.next++;
  l.all.emplace(token, std::move(f));
  return token;
}

void forget_object_frees(std::uint64_t token) noexcept {
  Listeners& l = listeners();
  std::lock_guard lk(l.mu);
  l.all.erase(token);
}

const FunctionEntry& put_entry() {
  static const FunctionEntry e{"fibra::put", 0, nullptr, {}, nullptr, nullptr, {}};
  return e;
}

}  // namespace fibra::detail
