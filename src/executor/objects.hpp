// src/executor/objects.hpp: the stored objects (fibra::put) a chunk takes, as the executor reads
// them: mapped from the memfd on its host (its agent's copy, or the driver's own), and put in
// their places among the chunk's other arguments.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fibra/detail/core.hpp"
#include "transport/wire.hpp"

namespace fibra::detail {

/// The chunk's arguments whole: `t.payload` when it takes no stored object, the object's mapped
/// bytes when that is all it takes, else both joined in `joined`. Throws Error when an object is
/// on no memfd this executor can reach (naming it, its agent `agent` and the driver).
std::string_view executor_arguments(const wire::TaskView& t, pid_t agent, std::string& joined);
/// Unmaps the objects that none of `batch`'s chunks take (called as a batch starts: an executor
/// keeps the mappings its last batch used, not more; and with none when it has been idle a second).
void executor_keep_objects_of(const std::vector<wire::TaskView>& batch);
/// Unmaps the objects whose ids are not in `ids`.
void executor_keep_objects(const std::set<std::uint64_t>& ids);

/// This executor runs on the driver's host (FIBRA_DRIVER_HOST=1, set by its agent).
bool executor_on_driver_host();

/// fibra::put in a task: on the driver's host (FIBRA_DRIVER_HOST, set by the agent), `encoded` goes
/// into a memfd of this process's (left empty), which travels with the requests of the tasks
/// given its Future, and which the driver then maps. nullptr elsewhere, or without shared memory to
/// be had: the Future holds the value, and tasks get it by copy.
std::shared_ptr<const StoredObject> executor_store_object(std::string& encoded);

}  // namespace fibra::detail
