// A task's calls on Queues, Pipes and Events (channel_calls.hpp).
#include "executor/channel_calls.hpp"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <vector>

#include "fibra/future.hpp"
#include "common/env.hpp"
#include "executor/executor.hpp"
#include "executor/inbox.hpp"
#include "executor/objects.hpp"
#include "transport/shared_items.hpp"

namespace fibra::detail::exec {

// Each task has its own (a task run on top of a waiting one, or on a thread of a threaded actor,
// must not wait for another's puts, which may wait for it); a thread a task started has its
// thread's.
namespace {
thread_local PutsInFlight t_thread_puts;
}  // namespace
thread_local PutsInFlight* t_puts = &t_thread_puts;

// This process's lane is mapped by the driver: it runs on the driver's host, with lanes on
// (FIBRA_LANES=0 turns them off; the driver then maps no lane to read at a loss).
bool lane_reaches_driver() {
  static const bool reaches = executor_on_driver_host() && env::flag("FIBRA_LANES").value_or(true);
  return reaches;
}

void tell_delivery(ChannelOp op, std::uint64_t token, std::uint64_t taken) {
  wire::ChannelCall c;
  c.op = op;
  c.token = token;
  c.n = taken;
  wire::Request r;
  r.actor = wire::channel_request;
  r.payload = wire::encode(c);
  g_executor.inbox->channel_call(std::move(r), nullptr);
}

namespace {

// Read ahead: a get of a Queue or Pipe from a task asks the driver to send some of the items
// behind its own along (wire::ChannelCall::ahead: none at a chunk's first get on a channel, then
// 4, 16, 64, 256 as its single gets go on; a get_many(n) n, then 4n). The next gets take them
// here, without a round trip (a get_many what is here, up to its n). The
// driver still owes them (an item read ahead comes back if this process dies) until the last of a
// delivery is taken (an ack) or what is left is given back (give_back, with how many were taken):
// at a chunk's end, before any other call on that channel from this process, and when the
// driver asks (a recall: another get waits on the emptied channel). The reader thread answers a
// recall while the task computes, so no item is stranded in a slow or idle reader.
class ReadAhead {
 public:
  static constexpr std::uint64_t most = 256;

  // The next items (up to n) read ahead for `channel`, if there are some; the delivery is
  // acknowledged when its last item is taken.
  std::optional<ChannelItems> pop(std::uint64_t channel, std::uint64_t n) {
    std::lock_guard lk(mu_);
    auto it = held_.find(channel);
    if (it == held_.end() || it->second.left() == 0) return std::nullopt;
    Held& h = it->second;
    const std::size_t k = std::min<std::uint64_t>(std::max<std::uint64_t>(n, 1), h.left());
    ChannelItems out;
    out.add_laid_out(std::string_view(h.items.bytes()).substr(h.at[h.next], h.at[h.next + k] - h.at[h.next]), k,
                     h.items.stride());
    h.next += k;
    h.taken += k;
    mark(h);  // taken, should this process die now
    if (h.left() == 0) {
      tell(ChannelOp::ack, h);
      h.clear();
    }
    return out;
  }
  bool holds(std::uint64_t channel) {
    std::lock_guard lk(mu_);
    auto it = held_.find(channel);
    return it != held_.end() && it->second.left() > 0;
  }
  // How many items the next get of `n` on `channel` may take along: none on another host than the
  // driver's (a lost node would take what its tasks took with it, unsaid), nor for more than 8
  // channels at once.
  std::uint64_t ahead_for(std::uint64_t channel, std::uint64_t n) {
    if (!lane_reaches_driver() || !g_executor.box) return 0;
    std::lock_guard lk(mu_);
    Held& h = held_[channel];
    if (h.slot < 0 && !reserve(h)) return 0;
    const std::uint64_t now = h.more;
    h.more = std::min(most, std::max<std::uint64_t>(4, 4 * h.more));
    return n <= 1 ? now : std::min<std::uint64_t>(now / 4, 4) * n;
  }
  // A get's reply brought `items` under `token`: the first `own` are the get's (left in `items`),
  // the rest are kept here. @throws Error if the items are not laid out as they say.
  void keep(std::uint64_t channel, std::uint64_t token, ChannelItems& items, std::size_t own) {
    {
      std::lock_guard lk(mu_);
      Held& h = held_[channel];
      std::vector<std::uint64_t> at;
      try {
        at = items.offsets();
      } catch (const Error&) {  // (a reply that does not decode: the driver has it all back, and the get fails)
        tell_delivery(ChannelOp::give_back, token, 0);
        throw;
      }
      ChannelItems first;
      first.add_laid_out(std::string_view(items.bytes()).substr(0, at[own]), own, items.stride());
      // Given back at once: another get of this process holds a delivery of this channel (threads),
      // the driver asked for this one before it came, or no slot can say what it took.
      if (h.token != 0 || h.early == token || (h.slot < 0 && !reserve(h))) {
        if (h.early == token) h.early = 0;
        tell_delivery(ChannelOp::give_back, token, own);
        items = std::move(first);
        return;
      }
      h.token = h.last = token;
      h.taken = own;
      h.items = std::move(items);
      h.at = std::move(at);
      h.next = own;
      items = std::move(first);
      mark(h);
    }
    g_executor.inbox->need_reader();  // a recall must be answered while the task computes
  }
  // What `channel` holds goes back (another call on it comes: its gets take fewer along).
  void give_back(std::uint64_t channel) {
    std::lock_guard lk(mu_);
    if (auto it = held_.find(channel); it != held_.end() && give_back(it->second)) it->second.more /= 4;
  }
  // Everything goes back (the chunk ended); returns a channel it gave items of back (0: none).
  std::uint64_t give_back_all() {
    std::lock_guard lk(mu_);
    std::uint64_t gave = 0;
    for (auto& [channel, h] : held_)
      if (give_back(h)) gave = channel;
    held_.clear();  // the next chunk starts its read-ahead afresh
    used_ = 0;
    return gave;
  }
  // The driver asks for delivery `token` back (it may be taken, or given back, already).
  void recalled(std::uint64_t channel, std::uint64_t token) {
    std::lock_guard lk(mu_);
    Held& h = held_[channel];
    if (h.token == token) {
      give_back(h);
      h.more /= 4;  // another reader competes for its items: take fewer along
    } else if (token > h.last) {
      h.early = token;  // its reply is still on its way (tokens grow): given back as it comes
    }
  }

 private:
  struct Held {
    std::uint64_t token = 0;        // the delivery its items came in (0: none held)
    std::uint64_t taken = 0;        // of that delivery, by gets
    ChannelItems items;             // that delivery's, all of them
    std::vector<std::uint64_t> at;  // where each of them starts (ChannelItems::offsets)
    std::size_t next = 0;           // the first not yet taken
    std::size_t left() const { return at.empty() ? 0 : at.size() - 1 - next; }
    void clear() {
      items = {};
      at.clear();
      next = 0;
    }
    std::uint64_t more = 0;   // the next single get asks to take this many along (a get_many n, 4n: ahead_for)
    int slot = -1;            // in Mailbox::ahead_taken
    std::uint64_t last = 0;   // the latest delivery kept
    std::uint64_t early = 0;  // a delivery recalled before it came
  };
  bool reserve(Held& h) {
    for (int i = 0; i < int(std::size(g_executor.box->ahead_taken)); ++i)
      if (!(used_ & (1u << i))) {
        used_ |= 1u << i;
        h.slot = i;
        return true;
      }
    return false;
  }
  void mark(const Held& h) {
    if (h.slot >= 0)
      g_executor.box->ahead_taken[h.slot].store(ahead_packed(h.token, h.taken), std::memory_order_release);
  }
  bool give_back(Held& h) {
    if (h.token == 0 || h.left() == 0) return false;
    tell(ChannelOp::give_back, h);
    h.clear();
    return true;
  }
  // Told under mu_, so that a get that found nothing here sends its request after it. The slot
  // keeps saying what was taken (a tell may be lost with its process: a kill at a time limit drops
  // what its socket held); the driver ignores a delivery it no longer owes.
  static void tell(ChannelOp op, Held& h) {
    tell_delivery(op, h.token, h.taken);
    h.token = 0;
  }
  std::mutex mu_;
  std::unordered_map<std::uint64_t, Held> held_;
  std::uint32_t used_ = 0;  // slots of Mailbox::ahead_taken held by a channel
};
ReadAhead g_read_ahead;

}  // namespace

void on_channel_notice(const std::string& payload) {
  try {
    const auto c = wire::decode<wire::ChannelCall>(payload);
    if (c.op == ChannelOp::recall) g_read_ahead.recalled(c.id, c.token);
  } catch (const wire::Malformed&) {  // a notice this build does not know: nothing waits for it
  }
}
void give_back_read_ahead() noexcept {
  try {
    // Given back before the chunk's result reaches the driver, as its puts are: a call on the
    // channel, answered after the driver took what was given back (a result may overtake a tell).
    if (const std::uint64_t channel = g_read_ahead.give_back_all()) {
      wire::ChannelCall c;
      c.op = ChannelOp::info;
      c.id = channel;
      executor_channel_call(std::move(c));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fibra: giving back the items a task read ahead: %s\n", e.what());
  }
}

}  // namespace fibra::detail::exec

namespace fibra::detail {

wire::ChannelReply executor_channel_call(wire::ChannelCall call) {
  using namespace exec;
  if (!g_executor.inbox) throw Error("fibra: this worker is not yet ready for a queue's call");
  RetryPolicy once;
  once.retries = 0;
  auto job = std::make_shared<JobState>(channel_entry(), CallMode::tuple, once);
  // Items too large for the ring go in a memfd the driver reads (kept open until it answers: such a
  // put waits for its answer, so that the items are in the queue when it returns).
  std::optional<SharedItemsOut> shared;
  if (call.op == ChannelOp::put && call.items.bytes().size() >= shared_items_from &&
      g_executor.inbox->calls_through_ring() && (shared = share_items(call.items))) {
    call.shared = shared->ref;
    call.items = {};
  }
  const bool behind = call.op == ChannelOp::put && call.timeout_s < 0 && !shared;
  const bool a_get = call.op == ChannelOp::get && call.kind != ChannelKind::event;
  const std::uint64_t want = std::max<std::uint64_t>(call.n, 1);
  g_executor.inbox->take_ring_replies();  // answers to earlier puts (the socket's are read as they come)
  if (a_get) {
    t_puts->reap();  // an earlier put that failed is told, as at any call
    if (auto v = g_read_ahead.pop(call.id, want)) {
      wire::ChannelReply r;
      r.items = std::move(*v);
      return r;
    }
    call.ahead = g_read_ahead.ahead_for(call.id, call.n);
  } else if (call.op == ChannelOp::wait && call.kind == ChannelKind::pipe && g_read_ahead.holds(call.id)) {
    wire::ChannelReply r;  // a pipe's poll: a value waits here
    r.flag = true;
    return r;
  } else if (call.op != ChannelOp::put && call.op != ChannelOp::task_done) {
    g_read_ahead.give_back(call.id);  // the driver answers with every item it owes in view
  }
  const QueueWait no_task_on_top;  // every wait below
  // A get or a wait goes out at once: this process's calls on channels reach the driver in order
  // (all through its lane's ring, or all through its socket, its agent and MPI; the driver reads a
  // process's ring before its other requests), so it comes after the puts before it, and a get may make room for a
  // put of this process that waits for some. Any other call waits until this process's puts were
  // taken (a close() must not overtake the puts before it, which may wait for room). An earlier
  // put that failed is told now, or at the next call if it is not answered yet.
  if (behind || call.op == ChannelOp::get || call.op == ChannelOp::wait)
    t_puts->reap();
  else
    t_puts->drain();
  wire::Request r;
  r.actor = wire::channel_request;
  r.mode = CallMode::tuple;
  r.policy = once;
  r.payload = wire::encode(call);
  if (behind) {
    while (t_puts->full()) t_puts->wait_oldest();
    t_puts->add(job);
    g_executor.inbox->channel_call(std::move(r), job);
    return {};
  }
  g_executor.inbox->channel_call(std::move(r), job);
  const ScopedSet<bool> answer_soon(t_answer_soon, call.kind == ChannelKind::pipe && call.op == ChannelOp::get);
  auto reply = wire::decode<wire::ChannelReply>(Future<std::string>(job).get());
  if (reply.shared) {  // (acknowledged below, and the driver closes it then)
    try {
      reply.items = take_shared_items(*reply.shared);
    } catch (...) {
      if (reply.token != 0) tell_delivery(ChannelOp::give_back, reply.token, 0);  // none taken: all go back
      throw;
    }
  }
  if (reply.token != 0 && a_get && reply.items.size() > want) {
    g_read_ahead.keep(call.id, reply.token, reply.items, want);  // acknowledged as they are taken
  } else if (reply.token != 0) {  // received: the driver no longer owes these items to this process
    tell_delivery(ChannelOp::ack, reply.token);
  }
  return reply;
}

}  // namespace fibra::detail
