#include "driver/scheduler.hpp"

#include <algorithm>

namespace fibra::detail {

std::uint64_t Scheduler::add(std::shared_ptr<JobState> job, std::uint64_t first, std::uint32_t count,
                             std::string payload) {
  auto c = std::make_unique<Chunk>();
  c->id = next_id_++;
  c->job = std::move(job);
  c->first = first;
  c->count = count;
  c->payload = share_payload(std::move(payload));  // a large one's memory serves the next
  pending_.push_back(c->id);
  chunks_.emplace(c->id, std::move(c));
  return next_id_ - 1;
}

std::vector<Chunk*> Scheduler::take_batch(int worker, int workers, const std::function<bool()>& others_have_room,
                                          const Resources* has) {
  std::vector<Chunk*> batch;
  int others = -1;                    // others_have_room(), once asked
  std::vector<std::uint64_t> passed;  // retries that should run on another worker, chunks that do not fit it
  std::size_t unfit = 0, retries_passed = 0;
  std::uint64_t items = 0, bytes = 0;
  while (!pending_.empty()) {
    auto it = chunks_.find(pending_.front());
    Chunk* c = it->second.get();
    if (c->job->cancelled()) {  // nobody waits for it any more
      dropped_.emplace_back(c->id, c->attempt + 1);
      pending_.pop_front();
      chunks_.erase(it);
      continue;
    }
    if (has && !fits(c->job->policy().need, *has)) {  // left for a worker that offers enough
      if (++unfit > max_unfit) break;
      passed.push_back(c->id);
      pending_.pop_front();
      continue;
    }
    if (workers > 1 && c->avoid_worker == worker && retries_passed < max_passed &&
        (others < 0 ? (others = others_have_room() ? 1 : 0) : others) == 1) {
      ++retries_passed;
      passed.push_back(c->id);
      pending_.pop_front();
      continue;
    }
    if (!batch.empty()) {
      // A fair share keeps other workers fed; only small chunks are put together.
      std::size_t share = std::max<std::size_t>(1, (pending_.size() + batch.size()) / (2 * std::max(1, workers)));
      if (batch.size() >= std::min(share, max_batch_chunks) || items + c->count > small_chunk_items ||
          bytes + c->payload->size() > max_batch_bytes)
        break;
    }
    pending_.pop_front();
    c->attempt += 1;
    c->worker = worker;
    items += c->count;
    bytes += c->payload->size();
    batch.push_back(c);
  }
  for (auto id = passed.rbegin(); id != passed.rend(); ++id) pending_.push_front(*id);
  return batch;
}

std::unique_ptr<Chunk> Scheduler::accept(std::uint64_t chunk, std::uint32_t attempt) {
  auto it = chunks_.find(chunk);
  if (it == chunks_.end() || it->second->attempt != attempt || it->second->worker < 0) return nullptr;
  auto c = std::move(it->second);
  chunks_.erase(it);
  return c;
}

std::vector<std::unique_ptr<Chunk>> Scheduler::take_pending_of(const JobState* job) {
  std::vector<std::unique_ptr<Chunk>> out;
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto c = chunks_.find(*it);
    if (c != chunks_.end() && c->second->job.get() == job) {
      out.push_back(std::move(c->second));
      chunks_.erase(c);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void Scheduler::count_tasks(std::uint64_t& queued, std::uint64_t& in_flight) const {
  queued = in_flight = 0;
  for (const auto& [id, c] : chunks_)
    if (c->job->is_task()) ++(c->worker >= 0 ? in_flight : queued);
}

std::vector<Chunk*> Scheduler::in_flight_of(const JobState* job) {
  std::vector<Chunk*> out;
  for (auto& [id, c] : chunks_)
    if (c->job.get() == job && c->worker >= 0) out.push_back(c.get());
  return out;
}

bool Scheduler::requeue(std::uint64_t chunk, std::uint32_t attempt) {
  auto it = chunks_.find(chunk);
  if (it == chunks_.end() || it->second->attempt != attempt || it->second->worker < 0) return false;
  it->second->worker = -1;
  pending_.push_front(chunk);
  return true;
}

Failed Scheduler::fail(std::uint64_t chunk, std::uint32_t attempt, std::string what, std::exception_ptr error,
                       bool retryable, std::unique_ptr<Chunk>& out) {
  auto it = chunks_.find(chunk);
  if (it == chunks_.end() || it->second->attempt != attempt || it->second->worker < 0) return Failed::stale;
  Chunk& c = *it->second;
  c.avoid_worker = c.worker;
  c.worker = -1;
  c.failures.push_back(std::move(what));
  c.last_error = std::move(error);
  if (retryable && c.failures.size() <= c.job->policy().retries) {
    pending_.push_front(chunk);
    return Failed::retried;
  }
  out = std::move(it->second);
  chunks_.erase(it);
  return Failed::exhausted;
}

void Scheduler::readd(std::unique_ptr<Chunk> c) {
  c->worker = -1;
  c->failures.clear();
  c->last_error = nullptr;
  const auto id = c->id;
  pending_.push_front(id);
  chunks_.emplace(id, std::move(c));
}

const Chunk* Scheduler::find(std::uint64_t chunk, std::uint32_t attempt) const {
  auto it = chunks_.find(chunk);
  if (it == chunks_.end() || it->second->attempt != attempt || it->second->worker < 0) return nullptr;
  return it->second.get();
}

std::vector<std::pair<std::uint64_t, std::uint32_t>> Scheduler::owned_by(int worker) const {
  std::vector<std::pair<std::uint64_t, std::uint32_t>> out;
  for (const auto& [id, c] : chunks_)
    if (c->worker == worker) out.emplace_back(id, c->attempt);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::unique_ptr<Chunk>> Scheduler::take_all() {
  std::vector<std::unique_ptr<Chunk>> out;
  for (auto& [id, c] : chunks_) out.push_back(std::move(c));
  chunks_.clear();
  pending_.clear();
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a->id < b->id; });
  return out;
}

bool Scheduler::pending_fits(const Resources& has, std::size_t look_at) const {
  for (std::size_t i = 0; i < pending_.size() && i < look_at; ++i) {
    const Chunk& c = *chunks_.at(pending_[i]);
    if (!c.job->cancelled() && fits(c.job->policy().need, has)) return true;
  }
  return false;
}

}  // namespace fibra::detail
