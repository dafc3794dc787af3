// fibra/object.hpp: fibra::put, the object store: a value kept where it was made, which tasks take
// by reference (Ray's ray.put).
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "fibra/detail/codec.hpp"
#include "fibra/detail/core.hpp"
#include "fibra/future.hpp"

namespace fibra {

namespace detail {
/// The FunctionEntry a put's JobState names ("fibra::put"): no function runs for it.
const FunctionEntry& put_entry();
}  // namespace detail

/// @brief Stores `value` in the driver and returns a ready Future of it (an object reference), as
/// `ray.put` does. Encoded once, into shared memory: a task given the Future as an argument takes
/// the value from there, without it being encoded and sent again for each task. Executors on the
/// driver's host read it where it lies; an agent on another host is sent it once, and its
/// executors read its copy. `get()` returns the value. The memory is freed when the last copy of
/// the Future is dropped and no task that takes it is left to run.
/// @code
///   fibra::Future<std::vector<double>> w = fibra::put(weights);        // 100 MB, encoded once
///   for (int s = 0; s < 8; ++s) scores.push_back(fibra::submit(evaluate, w, s));
/// @endcode
/// Inside a task on the driver's host, the value is stored in the task's process: the tasks and
/// actor calls it makes with the Future read it there (the driver maps it, and holds it until the
/// last of them has run). On another host the Future holds the value, and they get it by copy.
/// @throws ConfigError if the encoded value passes 2 GiB (what one MPI message carries).
template <class T>
Future<std::remove_cvref_t<T>> put(T&& value) {
  using V = std::remove_cvref_t<T>;
  static_assert(!std::is_void_v<V>, "fibra::put: there is no value to store");
  std::string bytes;
  detail::Writer w(bytes);
  detail::encode(w, static_cast<const V&>(value));
  auto job = std::make_shared<detail::JobState>(detail::put_entry(), detail::CallMode::single);
  std::shared_ptr<const detail::StoredObject> object = detail::store_object(bytes);
  detail::ChunkOutcome o;
  o.count = 1;
  if (object) {
    o.keep_at(object, object->bytes);  // the outcome views the stored bytes: get() decodes from shared memory
    job->set_object(std::move(object));
  } else {
    o.payload = std::move(bytes);  // in an executor: store_object left it here
  }
  job->deliver(std::move(o));
  return Future<V>(std::move(job));
}

}  // namespace fibra
