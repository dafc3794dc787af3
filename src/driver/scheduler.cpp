#include "driver/scheduler.hpp"

#include <algorithm>

namespace fibra::detail {

std::uint64_t Scheduler::add(std::shared_ptr<JobState> job, std::uint64_t first, std::uint32_t count,
                             std::string payload) {
  pending_.push_back(Queued{next_id_, std::move(job), std::move(payload), first, count});
  return next_id_++;
}

std::unique_ptr<Chunk> Scheduler::make_chunk(Queued& q) {
  auto c = std::make_unique<Chunk>();
  c->id = q.id;
  c->job = std::move(q.job);
  c->first = q.first;
  c->count = q.count;
  c->payload = share_payload(std::move(q.payload));  // a large one's memory serves the next
  return c;
}

Chunk& Scheduler::chunk_of(Queued& q) {
  if (!q.job) return *chunks_.at(q.id);
  Chunk& c = *chunks_.emplace(q.id, make_chunk(q)).first->second;
  ++parked_;  // `q` now stands for it by its id
  return c;
}

bool Scheduler::front(const JobState*& job, std::uint32_t& count) const {
  if (pending_.empty()) return false;
  const Queued& q = pending_.front();
  const Chunk* p = parked(q);
  job = p ? p->job.get() : q.job.get();
  count = p ? p->count : q.count;
  return true;
}

std::vector<Chunk*> Scheduler::take_batch(int worker, int workers, const std::function<bool()>& others_have_room,
                                          const Resources* has) {
  std::vector<Chunk*> batch;
  int others = -1;                    // others_have_room(), once asked
  std::vector<std::uint64_t> passed;  // retries that should run on another worker, chunks that do not fit it
  std::size_t unfit = 0, retries_passed = 0;
  std::uint64_t items = 0, bytes = 0;
  while (!pending_.empty()) {
    Queued& q = pending_.front();
    Chunk* p = parked(q);  // (one look-up per entry: it serves every test below)
    const JobState& job = p ? *p->job : *q.job;
    if (job.cancelled()) {  // nobody waits for it any more
      dropped_.emplace_back(q.id, (p ? p->attempt : 0) + 1);
      if (p) chunks_.erase(q.id);
      pop_front();
      continue;
    }
    if (has && !fits(job.policy().need, *has)) {  // left for a worker that offers enough
      if (++unfit > max_unfit) break;
      chunk_of(q);
      passed.push_back(pop_front().id);
      continue;
    }
    // One that failed on this worker is left for another, if another has room.
    if (p && workers > 1 && p->avoid_worker == worker && retries_passed < max_passed &&
        (others < 0 ? (others = others_have_room() ? 1 : 0) : others) == 1) {
      ++retries_passed;
      passed.push_back(pop_front().id);
      continue;
    }
    const std::uint32_t count = p ? p->count : q.count;
    const std::size_t size = p ? p->payload->size() : q.payload.size();
    if (!batch.empty()) {
      // A fair share keeps other workers fed; only small chunks are put together.
      std::size_t share = std::max<std::size_t>(1, (pending_.size() + batch.size()) / (2 * std::max(1, workers)));
      if (batch.size() >= std::min(share, max_batch_chunks) || items + count > small_chunk_items ||
          bytes + size > max_batch_bytes)
        break;
    }
    Chunk& c = p ? *p : chunk_of(q);
    pop_front();
    c.attempt += 1;
    c.worker = worker;
    items += count;
    bytes += size;
    batch.push_back(&c);
  }
  for (auto id = passed.rbegin(); id != passed.rend(); ++id) push_front_id(*id);
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
    if (&job_of(*it) != job) {
      ++it;
      continue;
    }
    if (it->job) {
      out.push_back(make_chunk(*it));
    } else {
      auto c = chunks_.find(it->id);
      out.push_back(std::move(c->second));
      chunks_.erase(c);
      --parked_;
    }
    it = pending_.erase(it);
  }
  return out;
}

void Scheduler::count_tasks(std::uint64_t& queued, std::uint64_t& in_flight) const {
  queued = in_flight = 0;
  for (const auto& [id, c] : chunks_)
    if (c->job->is_task()) ++(c->worker >= 0 ? in_flight : queued);
  for (const Queued& q : pending_)
    if (q.job && q.job->is_task()) ++queued;
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
  push_front_id(chunk);
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
    push_front_id(chunk);
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
  chunks_.emplace(id, std::move(c));
  push_front_id(id);
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
  for (Queued& q : pending_)
    if (q.job) out.push_back(make_chunk(q));
  chunks_.clear();
  pending_.clear();
  parked_ = 0;
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a->id < b->id; });
  return out;
}

bool Scheduler::pending_fits(const Resources& has, std::size_t look_at) const {
  for (std::size_t i = 0; i < pending_.size() && i < look_at; ++i) {
    const JobState& job = job_of(pending_[i]);
    if (!job.cancelled() && fits(job.policy().need, has)) return true;
  }
  return false;
}

}  // namespace fibra::detail
