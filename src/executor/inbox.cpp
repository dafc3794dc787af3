// What the agent sends, and the calls out (inbox.hpp).
#include "executor/inbox.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "fibra/error.hpp"
#include "fibra/future.hpp"
#include "fibra/detail/codec.hpp"
#include "common/error_types.hpp"
#include "executor/state.hpp"
#include "transport/frame_writer.hpp"

namespace fibra::detail::exec {

std::optional<Inbox::Batch> Inbox::next_batch() {
  const auto idle_from = std::chrono::steady_clock::now();
  bool dropped = false;
  for (;;) {
    // Idle a second: stored objects mapped for the last batches go (the driver may have freed them).
    if (!dropped && std::chrono::steady_clock::now() - idle_from > std::chrono::seconds(1)) {
      keep_objects_in_use();
      dropped = true;
    }
    {
      std::lock_guard rl(read_mu_);
      // The socket first: at its end (the agent stops this executor) no more is taken from the lane.
      if (!closed() && readable()) {
        read_one(true);
        continue;
      }
      if (auto b = try_batch()) {
        just_ran_ = true;
        return b;
      }
      if (closed()) return std::nullopt;
    }
    // The sleeps end by themselves only as a safeguard: what comes wakes them. A batch the
    // reader thread (if a task started one) queued also rings the bell.
    if (g_executor.lane->in_use() || reader_running_.load(std::memory_order_relaxed)) {
      // Its lane is in use: right after a batch it watches it a moment (the next one often comes
      // sooner than a wake-up would take), then sleeps on its bell, which the agent rings too
      // after it writes to the socket. Idle, it does not spin again at each safeguard wake.
      const auto spin = just_ran_ ? lane_spin : std::chrono::microseconds(0);
      just_ran_ = false;
      g_executor.lane->wait(spin, std::chrono::milliseconds(1000),
                            [&] { return g_executor.lane->has_batch() || readable() || has_queued(); });
    } else {
      // Batches come through the socket only (its driver is on another host): it sleeps in poll,
      // which wakes with the data, a wake-up less than the bell. The agent writes a wake frame
      // when the driver starts using the lane.
      pollfd p{sock_, POLLIN, 0};
      ::poll(&p, 1, 1000);
    }
  }
}

std::optional<Inbox::Batch> Inbox::try_batch() {
  {
    std::lock_guard lk(mu_);
    if (!batches_.empty()) {
      Batch b{std::move(batches_.front()), {}, -1};
      batches_.pop_front();
      return b;
    }
  }
  Batch b;
  if (closed()) return std::nullopt;  // stopping: what is left in the lane is the agent's to report, or nobody's
  // `bytes` holds the batch only if it had to be read rather than mapped (it stays on the heap,
  // where `in_lane` points, when the Batch moves).
  if (auto slot = g_executor.lane->take(b.in_lane, b.bytes)) {
    b.slot = *slot;
    return b;
  }
  return std::nullopt;
}

void Inbox::read_a_little(std::chrono::milliseconds d, bool lane_too) {
  // With calls through the ring, answers come there too, and the driver rings the bell for them.
  const bool ring = ring_.load(std::memory_order_acquire) == Ring::on;
  if (ring && take_ring_replies()) return;
  if (ring && t_answer_soon) {
    // A pipe's recv: the other end often answers within microseconds (a ping-pong), so the ring is
    // watched 10 us before the sleep (pipe round trip 30-39 -> 14-16 us). Not for other waits: a
    // queue's reader or writer spinning so took the other's core (single items 430-570 k/s -> 280-300 k/s).
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(10);
    while (!g_executor.lane->has_reply() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    if (take_ring_replies()) return;
  }
  if (lane_too || ring) {
    g_executor.lane->wait(std::chrono::microseconds(0), d, [&] {
      return (lane_too && g_executor.lane->has_batch()) || readable() || (ring && g_executor.lane->has_reply());
    });
    if (ring && take_ring_replies()) return;
    if (!readable()) return;
  } else {
    pollfd p{sock_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(d.count())) <= 0) return;
  }
  std::unique_lock rl(read_mu_, std::try_to_lock);
  if (rl.owns_lock()) read_one(false);
}

bool Inbox::readable() const {
  char c;
  const ssize_t k = ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return k >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

bool Inbox::closed() {
  std::lock_guard lk(mu_);
  return closed_;
}

void Inbox::need_reader() {
  std::call_once(reader_started_, [this] {
    reader_running_ = true;
    std::thread([this] {
      while (!closed()) read_a_little(std::chrono::milliseconds(100), false);
    }).detach();  // lives as long as the process
  });
}

void Inbox::channel_call(wire::Request r, std::shared_ptr<JobState> job) {
  std::lock_guard sl(send_mu_);
  if (ring_.load(std::memory_order_relaxed) == Ring::unasked) {
    if (g_executor.lane->reads_calls() && !used_socket())
      ring_.store(Ring::on, std::memory_order_release);  // nothing sent the other way to overtake
    else if (g_executor.lane->in_use())
      ask_for_ring();
    else
      g_executor.box->wants_lane.store(1,
                                       std::memory_order_relaxed);  // (an actor's process: its agent tells the driver)
  }
  if (ring_.load(std::memory_order_relaxed) != Ring::on) {
    job ? request(std::move(r), std::move(job)) : tell(std::move(r));
    return;
  }
  bool stopping = false;
  {
    std::lock_guard lk(mu_);
    r.id = next_id_++;
    stopping = closed_;
    if (job && !stopping) waiting_[r.id] = {job, r.first, r.count};
  }
  if (stopping) {  // (delivered outside mu_, as read_one does: a delivery runs callbacks)
    if (job) job->deliver(closed_outcome(r.first, r.count));
    return;
  }
  const std::string bytes = wire::encode(r);
  std::string_view rest = bytes;
  // The driver reads the ring at each pass; a full one waits for it, as a full socket would.
  for (int tries = 0;; ++tries) {
    if (g_executor.lane->put_request(rest)) {
      if (rest.empty()) return;
      tries = 0;  // a fragment went: more room comes as the driver reads
      continue;
    }
    if (closed()) {  // the way to the driver is gone: read_one answered what waited, this one too
      return;
    }
    if (tries < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

bool Inbox::take_ring_replies() {
  if (ring_.load(std::memory_order_acquire) != Ring::on || !g_executor.lane->has_reply()) return false;
  std::unique_lock rl(ring_read_mu_, std::try_to_lock);
  if (!rl.owns_lock()) return false;
  bool got = false;
  std::string reply;
  while (g_executor.lane->take_reply(ring_partial_, reply)) {
    got = true;
    deliver(wire::decode<wire::Reply>(reply));
  }
  return got;
}

void Inbox::tell(wire::Request r) {
  {
    std::lock_guard lk(mu_);
    r.id = next_id_++;
    used_socket_ = true;
  }
  send_frame(sock_, wire::encode(r), wire::frame_tell);
}

void Inbox::request(wire::Request r, std::shared_ptr<JobState> job, const std::vector<int>& fds) {
  {
    std::lock_guard lk(mu_);
    r.id = next_id_++;
    used_socket_ = true;
    waiting_[r.id] = {std::move(job), r.first, r.count};
  }
  send_frame(sock_, wire::encode(r), wire::frame_request, fds);
}

bool Inbox::used_socket() {
  std::lock_guard lk(mu_);
  return used_socket_;
}

ChunkOutcome Inbox::closed_outcome(std::uint64_t first, std::uint32_t count) {
  return {first, count, {}, std::make_exception_ptr(PoolClosed("fibra: the worker is stopping")), {}};
}

void Inbox::ask_for_ring() {
  const QueueWait no_task_on_top;
  ring_.store(Ring::off, std::memory_order_relaxed);  // unless the driver says yes
  RetryPolicy once;
  once.retries = 0;
  wire::ChannelCall c;
  c.op = ChannelOp::ring;
  wire::Request r;
  r.actor = wire::channel_request;
  r.mode = CallMode::tuple;
  r.policy = once;
  r.payload = wire::encode(c);
  auto job = std::make_shared<JobState>(channel_entry(), CallMode::tuple, once);
  request(std::move(r), job);
  try {
    if (wire::decode<wire::ChannelReply>(Future<std::string>(job).get()).flag)
      ring_.store(Ring::on, std::memory_order_release);
  } catch (const std::exception&) {  // the worker stops: the socket's way, which says so
  }
}

void Inbox::read_one(bool block) {
  if (!block && !readable()) return;
  std::uint64_t prefix = 0;
  std::string body;
  if (!read_frame(sock_, prefix, body)) {
    std::unordered_map<std::uint64_t, Waiting> left;
    {
      std::lock_guard lk(mu_);
      closed_ = true;  // the agent is gone, and with it the way to the driver
      left.swap(waiting_);
    }
    for (auto& [id, w] : left)  // delivered outside mu_: a delivery runs callbacks
      w.job->deliver(closed_outcome(w.first, w.count));
    return;
  }
  if (wire::frame_kind(prefix) == wire::frame_reply) {
    deliver(wire::decode<wire::Reply>(body));
  } else if (wire::frame_kind(prefix) == wire::frame_wake) {
    // nothing to do: it woke this executor from its poll on the socket, and it now sees its lane in use
  } else {
    {
      std::lock_guard lk(mu_);
      batches_.push_back(std::move(body));
    }
    g_executor.lane->ring();  // read by the reader thread, perhaps, while the task's thread sleeps on the bell
  }
}

bool Inbox::has_queued() {
  std::lock_guard lk(mu_);
  return !batches_.empty();
}

void Inbox::deliver(const wire::Reply& r) {
  if (r.id == 0) return on_channel_notice(r.payload);  // nothing waits for it: the driver asks
  Waiting w;
  {
    std::lock_guard lk(mu_);
    auto it = waiting_.find(r.id);
    if (it == waiting_.end()) return;
    w = std::move(it->second);
    waiting_.erase(it);
  }
  ChunkOutcome o{w.first, w.count, {}, {}, {}};
  if (r.ok)
    o.payload = r.payload;
  else
    o.error = rebuild(wire::decode<wire::ErrorText>(r.payload));
  for (std::size_t i = 0; i < r.error_offsets.size() && i < r.errors.size(); ++i)
    o.add_item_error({r.error_offsets[i], rebuild(wire::decode<wire::ErrorText>(r.errors[i]))});
  w.job->deliver(std::move(o));
  // The task's thread waits for it on the lane's bell (help_while_waiting), not on the job: a
  // reply the reader thread took from under it would otherwise leave it asleep until its 2 ms
  // wait ends (a get_many read ahead took 1-2 ms a round trip so, not 50-100 us).
  if (!t_task.is && g_executor.lane) g_executor.lane->ring();
}

std::exception_ptr Inbox::rebuild(const wire::ErrorText& e) {
  if (e.type == "fibra::RemoteException")
    if (auto registered = make_registered_exception(e.remote_type, e.what, e.remote_message, RemoteSite{}))
      return registered;
  if (auto own = make_fibra_error(e.type, e.what, e.remote_type, e.remote_message)) return own;
  return std::make_exception_ptr(Error(e.what));
}

}  // namespace fibra::detail::exec
