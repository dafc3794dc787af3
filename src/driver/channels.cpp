// The driver's channels (channels.hpp), and the calls of fibra/queue.hpp in whichever process
// makes them.
#include "driver/channels.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/freed_memory.hpp"
#include "common/log.hpp"
#include "driver/wait_timer.hpp"
#include "driver/sync_store.hpp"
#include "task_side.hpp"
#include "fibra/error.hpp"
#include "transport/lane.hpp"

namespace fibra::detail {
namespace {

using Clock = std::chrono::steady_clock;

// A put's items as they wait in the store: its bytes as they came (ChannelItems) and where each item
// starts. A batch stays one block until its last item is taken.
struct Block {
  std::string bytes;
  std::uint64_t stride = 0;       // ChannelItems::stride: item i is bytes [i * stride, (i + 1) * stride)
  std::vector<std::uint64_t> at;  // without: item i is bytes [at[i], at[i + 1]) (its size and its encoding)
  std::uint64_t start(std::size_t i) const { return stride != 0 ? i * stride : at[i]; }
};

// Items [first, last) of a block.
struct Span {
  std::shared_ptr<const Block> block;
  std::size_t first = 0, last = 0;
  std::size_t size() const { return last - first; }
  std::size_t bytes_of(std::size_t i) const { return block->start(first + i + 1) - block->start(first + i); }
  std::string_view bytes() const {
    return std::string_view(block->bytes).substr(block->start(first), block->start(last) - block->start(first));
  }
};

// The items of a put, as one block. @throws Error if they are not laid out as ChannelItems says.
Span span_of(ChannelItems items) {
  auto b = std::make_shared<Block>();
  b->stride = items.stride();
  if (b->stride != 0)
    items.check_fixed();
  else
    b->at = items.offsets();
  const std::size_t n = items.size();
  b->bytes = items.release();
  return Span{std::move(b), 0, n};
}

std::size_t count_of(const std::vector<Span>& spans) {
  std::size_t n = 0;
  for (const auto& s : spans) n += s.size();
  return n;
}

// The items of `spans` without a copy, if they are one whole block that nothing else holds (a
// driver's get of a large item: its bytes move on to the caller). `spans` then hold none.
std::optional<ChannelItems> whole_block(std::vector<Span>& spans) {
  if (spans.size() != 1 || spans[0].block.use_count() != 1 || spans[0].first != 0) return std::nullopt;
  auto& block = const_cast<Block&>(*spans[0].block);  // (ours alone: nobody sees it change)
  const std::size_t items = block.stride != 0 ? block.bytes.size() / block.stride : block.at.size() - 1;
  if (spans[0].last != items) return std::nullopt;
  ChannelItems out(std::move(block.bytes), items, block.stride);
  spans.clear();
  return out;
}

// The items of `spans` as a reply carries them: one copy of each span's bytes.
ChannelItems items_of(const std::vector<Span>& spans) {
  std::size_t bytes = 0;
  for (const auto& s : spans) bytes += s.bytes().size();
  ChannelItems out(scratch_buffer(bytes), 0);  // (an answer through a ring gives it back: PoolImpl::on_ring_call)
  for (const auto& s : spans) out.add_laid_out(s.bytes(), s.size(), s.block->stride);
  return out;
}

// A channel's items, in order: spans of the blocks they came in.
class ItemList {
 public:
  std::size_t size() const noexcept { return count_; }
  bool empty() const noexcept { return count_ == 0; }
  void push_back(Span s) {
    if (s.size() == 0) return;
    count_ += s.size();
    spans_.push_back(std::move(s));
  }
  void push_front(Span s) {
    if (s.size() == 0) return;
    count_ += s.size();
    spans_.push_front(std::move(s));
  }
  // How many of the items from the `from`th on fit in `bytes`, `most` at most.
  std::size_t fit(std::size_t from, std::size_t most, std::size_t bytes) const {
    std::size_t n = 0;
    for (const auto& s : spans_) {
      if (from >= s.size()) {
        from -= s.size();
        continue;
      }
      for (std::size_t i = from; i < s.size(); ++i, ++n) {
        const std::size_t b = s.bytes_of(i);
        if (n >= most || b > bytes) return n;
        bytes -= b;
      }
      from = 0;
    }
    return n;
  }
  // Takes the first k items (at most size()).
  std::vector<Span> take(std::size_t k) {
    std::vector<Span> out;
    while (k > 0 && !spans_.empty()) {
      Span& s = spans_.front();
      if (s.size() <= k) {
        k -= s.size();
        count_ -= s.size();
        out.push_back(std::move(s));
        spans_.pop_front();
      } else {
        out.push_back(Span{s.block, s.first, s.first + k});
        s.first += k;
        count_ -= k;
        k = 0;
      }
    }
    return out;
  }

 private:
  std::deque<Span> spans_;
  std::size_t count_ = 0;
};

struct Waiter {
  using Deadlines = std::multimap<Clock::time_point, std::weak_ptr<Waiter>>;
  ChannelOp op = ChannelOp::get;
  std::uint64_t channel = 0;
  std::uint64_t n = 0;
  std::uint64_t ahead = 0;  // a task's get: items it may take along
  Span items;               // a put's
  ChannelHolder who;
  ChannelStore::Done done;
  bool timed = false;  // `at` is its entry in the store's deadlines
  Deadlines::iterator at;
  bool now_or_never = false;  // a get with no time to wait, waiting only for items read ahead to come back
};
using WaiterPtr = std::shared_ptr<Waiter>;

struct Channel {
  ChannelKind kind = ChannelKind::queue;
  std::uint64_t maxsize = 0;
  ItemList items;
  bool closed = false;
  bool set = false;                                 // an Event's flag
  std::uint64_t unfinished = 0;                     // items put and not yet marked task_done (JoinableQueue)
  std::uint64_t owed = 0;                           // items sent to tasks and not yet acknowledged: they may come back
  std::uint64_t handles = 0;                        // the driver's handles that keep it
  bool pinned = false;                              // made in a task: kept until the program ends
  std::optional<ChannelHolder> sender;              // a pipe's: the process that sends on it
  std::set<std::uint64_t> ahead;                    // tokens of deliveries read ahead, not yet acknowledged
  std::optional<ChannelHolder> last_reader;         // whom the last items went to
  std::deque<WaiterPtr> getters, putters, waiters;  // waiters: join and wait
  // Its totals, for the event log's `queue` event when it goes (ChannelStore::set_totals_sink).
  std::uint64_t put_items = 0, put_bytes = 0, sent_items = 0, came_back = 0, most_held = 0;
  // A put's items in at the back, counted.
  void put_in(Span s) {
    put_items += s.size();
    put_bytes += s.bytes().size();
    items.push_back(std::move(s));
    most_held = std::max<std::uint64_t>(most_held, items.size());
  }
};

struct Delivery {  // items sent to a task, owed until it acknowledges them
  ChannelHolder who;
  std::uint64_t channel = 0;
  std::vector<Span> items;
  bool ahead = false;     // a get took more along: the task may give some back (or be asked to)
  bool recalled = false;  // asked to
};

// A get of a task takes along at most this many bytes of the items behind its own, and never so
// many that it holds more than most_read_ahead items in all (Mailbox::ahead_taken counts them in
// 16 bits).
constexpr std::size_t ahead_bytes = 64 * 1024;
constexpr std::size_t most_read_ahead = 32 * 1024;

const char* kind_name(ChannelKind k) {
  return k == ChannelKind::pipe ? "pipe" : k == ChannelKind::event ? "event" : "queue";
}
std::string label(ChannelKind k, std::uint64_t id) { return std::string(kind_name(k)) + " #" + std::to_string(id); }

bool matches(const ChannelHolder& h, std::uint64_t pool, std::uint64_t worker, std::optional<std::uint64_t> route) {
  return h.remote() && h.pool == pool && (worker == 0 || h.worker == worker) && (!route || h.route == *route);
}

}  // namespace

struct ChannelStore::Impl : WaitStore<Waiter, ChannelStore::Impl> {
  std::map<std::uint64_t, Channel> channels;
  std::uint64_t next_token = 1;
  std::map<std::uint64_t, Delivery> unacked;                          // by token: in the order sent
  std::unordered_map<std::uint64_t, ChannelStore::Notify> notifiers;  // by pool
  std::vector<std::pair<ChannelStore::Notify, std::pair<ChannelHolder, wire::ChannelCall>>> notices;  // as `ready`
  ChannelStore::TotalsSink totals_sink;                                                               // under mu
  std::vector<ChannelStore::Totals> totals;  // channels gone, told to the sink as `ready`

  // Runs the completions gathered under `lk`, after releasing it.
  void run_ready(std::unique_lock<std::mutex>& lk) {
    auto now = std::exchange(ready, {});
    auto told = std::exchange(notices, {});
    auto gone_totals = std::exchange(totals, {});
    const auto sink = gone_totals.empty() ? ChannelStore::TotalsSink() : totals_sink;
    lk.unlock();
    for (const auto& t : gone_totals) {
      try {
        sink(t);
      } catch (const std::exception& e) {
        log::debug("fibra: a channel's totals were not recorded: {}", e.what());
      }
    }
    // Answers first: a recall of items read ahead follows the reply that brought them (the task
    // also keeps a recall that comes before them, ReadAhead::keep).
    give(now, "a queue's");
    for (auto& [notify, what] : told) {
      try {
        notify(what.first, std::move(what.second));
      } catch (const std::exception& e) {
        log::error("fibra: asking a task for the items it read ahead: {}", e.what());
      }
    }
  }

  std::exception_ptr gone(std::uint64_t id, ChannelKind kind) {
    if (kind == ChannelKind::pipe)
      return std::make_exception_ptr(
          PipeClosed("fibra: " + label(kind, id) + " is gone: the last handle to its ends in the driver was dropped"));
    return std::make_exception_ptr(QueueClosed(
        "fibra: " + label(kind, id) +
        " is gone: the last handle to it in the driver was dropped (keep a handle in the driver while tasks use it)"));
  }
  std::exception_ptr at_end(std::uint64_t id, const Channel& c) {
    if (c.kind == ChannelKind::pipe)
      return std::make_exception_ptr(PipeClosed("fibra: the other end of this pipe (" + label(c.kind, id) +
                                                ") was closed, or the process that held it ended, and everything it "
                                                "sent was received"));
    return std::make_exception_ptr(
        QueueClosed("fibra: " + label(c.kind, id) + " was closed (Queue::close()) and every item in it was taken"));
  }
  std::exception_ptr empty(std::uint64_t id, const Channel& c) {
    return std::make_exception_ptr(QueueEmpty("fibra: " + label(c.kind, id) + " is empty"));
  }
  std::exception_ptr closed_for_put(std::uint64_t id, const Channel& c) {
    if (c.kind == ChannelKind::pipe)
      return std::make_exception_ptr(PipeClosed("fibra: send on a pipe (" + label(c.kind, id) +
                                                ") whose end was closed, or whose receiver closed it"));
    return std::make_exception_ptr(
        QueueClosed("fibra: put into " + label(c.kind, id) + ", which was closed (Queue::close())"));
  }

  // Closed, empty, and no item sent out may come back: its readers are told the stream ended.
  static bool at_its_end(const Channel& c) { return c.closed && c.items.empty() && c.owed == 0; }

  // Whether a join or a wait on `c` has what it waits for: every item marked done (join), the flag
  // (an Event), an item or the end of the stream (a pipe's poll).
  static bool over(ChannelOp op, const Channel& c) {
    if (op == ChannelOp::join) return c.unfinished == 0;
    return c.kind == ChannelKind::event ? c.set : !c.items.empty() || at_its_end(c);
  }

  // A task received the items of `token` (all of them; or, `taken` < all, the first `taken`, and
  // the rest it read ahead come back to the front of the channel, in order).
  void ack(std::uint64_t token, std::size_t taken = SIZE_MAX) {
    auto d = unacked.find(token);
    if (d == unacked.end()) return;  // already given back (asked for, and it came meanwhile), or forgotten
    Delivery del = std::move(d->second);
    unacked.erase(d);
    auto c = channels.find(del.channel);
    if (c == channels.end()) return;
    put_back(c->second, token, del, taken);
    settle(del.channel, c->second);
  }

  // Delivery `token` is no longer owed: what was not taken of it goes back to the front of `c`, in order.
  static void put_back(Channel& c, std::uint64_t token, Delivery& d, std::size_t taken) {
    c.owed -= std::min<std::uint64_t>(c.owed, count_of(d.items));
    c.ahead.erase(token);
    for (auto& s : d.items) {  // the first `taken` stay taken
      const std::size_t skip = std::min(taken, s.size());
      s.first += skip;
      taken -= skip;
    }
    for (auto s = d.items.rbegin(); s != d.items.rend(); ++s) {
      c.came_back += s->size();
      c.items.push_front(std::move(*s));
    }
    c.most_held = std::max<std::uint64_t>(c.most_held, c.items.size());
  }

  // Items another task read ahead come before those in the channel: a get from anyone else waits
  // until they are taken or given back.
  bool behind_ahead(const Channel& c, const ChannelHolder& who) const {
    for (const std::uint64_t token : c.ahead)
      if (auto d = unacked.find(token); d != unacked.end() && d->second.who != who) return true;
    return false;
  }

  // A get waits while tasks hold items they read ahead: they are asked to give back what they did
  // not take (once per delivery).
  void recall(std::uint64_t id, Channel& c) {
    if (c.getters.empty() || c.ahead.empty()) return;
    for (const std::uint64_t token : c.ahead) {
      auto d = unacked.find(token);
      if (d == unacked.end() || d->second.recalled) continue;
      auto n = notifiers.find(d->second.who.pool);
      if (n == notifiers.end()) continue;
      d->second.recalled = true;
      wire::ChannelCall r;
      r.op = ChannelOp::recall;
      r.kind = c.kind;
      r.id = id;
      r.token = token;
      notices.push_back({n->second, {d->second.who, std::move(r)}});
    }
  }

  // Hands up to `n` items to `who`, and to a task's get that has all it asked for up to `ahead`
  // more of those behind (ahead_bytes of them at most); a task owes an acknowledgement for them.
  wire::ChannelReply take(std::uint64_t id, Channel& c, std::uint64_t n, std::uint64_t ahead,
                          const ChannelHolder& who) {
    wire::ChannelReply r;
    const std::size_t want = std::max<std::uint64_t>(n, 1);
    std::size_t k = std::min<std::size_t>(want, c.items.size());
    // Only a reader that had the last items too (readers that take turns would take turns asking
    // each other's items back).
    const bool reads_ahead = ahead > 0 && who.remote() && k == want && k < most_read_ahead && c.last_reader == who;
    c.last_reader = who;
    const std::size_t extra =
        reads_ahead ? c.items.fit(k, std::min<std::uint64_t>(ahead, most_read_ahead - k), ahead_bytes) : 0;
    k += extra;
    std::vector<Span> taken = c.items.take(k);
    try {
      auto whole = who.remote() ? std::nullopt : whole_block(taken);  // (a task's items may come back: kept)
      r.items = whole ? std::move(*whole) : items_of(taken);
    } catch (...) {  // (out of memory: the items stay in the queue)
      for (auto s = taken.rbegin(); s != taken.rend(); ++s) c.items.push_front(std::move(*s));
      throw;
    }
    c.sent_items += k;
    if (who.remote()) {
      r.token = next_token++;
      unacked[r.token] = Delivery{who, id, std::move(taken), extra > 0};
      if (extra > 0) c.ahead.insert(r.token);
      c.owed += k;
    }
    return r;
  }

  // Serves what waits on `c` now that it changed: puts in order while there is room, gets in
  // order while there are items, and the ends of a closed channel.
  void settle(std::uint64_t id, Channel& c) {
    for (bool moved = true; moved;) {
      moved = false;
      while (!c.putters.empty()) {
        WaiterPtr& p = c.putters.front();
        if (c.maxsize != 0 && c.items.size() + p->items.size() > c.maxsize) break;
        c.unfinished += p->items.size();
        c.put_in(std::move(p->items));
        finish(p, nullptr);
        c.putters.pop_front();
        moved = true;
      }
      while (!c.getters.empty() && !c.items.empty() && !behind_ahead(c, c.getters.front()->who)) {
        WaiterPtr g = std::move(c.getters.front());
        c.getters.pop_front();
        finish(g, nullptr, take(id, c, g->n, g->ahead, g->who));
        moved = true;
      }
    }
    // A get with no time to wait that waited for items read ahead: they came back and were taken.
    std::erase_if(c.getters, [&](WaiterPtr& g) {
      if (!g->now_or_never || !c.items.empty() || at_its_end(c) || behind_ahead(c, g->who)) return false;
      finish(g, empty(id, c));
      return true;
    });
    if (c.closed) {
      for (auto& p : c.putters) finish(p, closed_for_put(id, c));
      c.putters.clear();
      if (at_its_end(c)) {
        for (auto& g : c.getters) finish(g, at_end(id, c));
        c.getters.clear();
      }
    }
    recall(id, c);
    for (auto it = c.waiters.begin(); it != c.waiters.end();) {
      const bool now = over((*it)->op, c);
      if (!now) {
        ++it;
        continue;
      }
      wire::ChannelReply r;
      r.flag = true;
      finish(*it, nullptr, std::move(r));
      it = c.waiters.erase(it);
    }
  }

  // A call that cannot be answered now waits, until `timeout_s` if it has one.
  void wait(std::deque<WaiterPtr>& q, wire::ChannelCall& call, Span& items, const ChannelHolder& who,
            ChannelStore::Done& done) {
    auto w = std::make_shared<Waiter>(
        Waiter{call.op, call.id, call.n, call.ahead, std::move(items), who, std::move(done), false, {}});
    q.push_back(w);
    time(w, call.timeout_s);
  }

  // Under mu: a waiter's time ran out.
  void expire(const WaiterPtr& w) {
    auto it = channels.find(w->channel);
    if (it == channels.end() || !w->done) return;
    Channel& c = it->second;
    for (auto* q : {&c.getters, &c.putters, &c.waiters}) std::erase(*q, w);
    switch (w->op) {
      case ChannelOp::put:
        finish(w, std::make_exception_ptr(QueueFull("fibra: " + label(c.kind, w->channel) + " stayed full (" +
                                                    std::to_string(c.maxsize) +
                                                    " items) until the put's timeout ran out")));
        break;
      case ChannelOp::get:
        finish(w, std::make_exception_ptr(QueueEmpty("fibra: nothing arrived in " + label(c.kind, w->channel) +
                                                     " before the timeout ran out")));
        break;
      default: finish(w, nullptr);  // join, wait: flag false
    }
    // A put that gave up may have held back the puts behind it.
    settle(w->channel, c);
  }

  void release(std::uint64_t id) {
    auto it = channels.find(id);
    if (it == channels.end() || it->second.pinned) return;
    if (it->second.handles > 0 && --it->second.handles > 0) return;
    Channel& c = it->second;
    for (auto* q : {&c.getters, &c.putters, &c.waiters})
      for (auto& w : *q) finish(w, gone(id, c.kind));
    std::erase_if(unacked, [&](const auto& d) { return d.second.channel == id; });
    if (totals_sink && c.kind != ChannelKind::event)
      totals.push_back({id, kind_name(c.kind), c.put_items, c.put_bytes, c.sent_items - c.came_back, c.came_back,
                        c.most_held, c.items.size()});
    channels.erase(it);
  }

  // `items`: a put's (wire::ChannelCall::items as one block).
  void call(wire::ChannelCall& call, Span& items, const ChannelHolder& who, ChannelStore::Done& done) {
    if (call.op == ChannelOp::open) {
      const std::uint64_t id = new_channel_id();
      Channel& c = channels[id];
      c.kind = call.kind;
      c.maxsize = call.n;
      c.pinned = who.remote();  // a task's: no handle in the driver keeps it
      c.handles = who.remote() ? 0 : 1;
      wire::ChannelReply r;
      r.value = id;
      return finish(done, nullptr, std::move(r));
    }
    if (call.op == ChannelOp::release) {
      release(call.id);
      return finish(done, nullptr);
    }
    auto it = channels.find(call.id);
    if (call.op == ChannelOp::hold) {
      wire::ChannelReply r;
      if (it != channels.end() && !it->second.pinned) {
        ++it->second.handles;
        r.flag = true;
      }
      return finish(done, nullptr, std::move(r));
    }
    if (it == channels.end()) return finish(done, gone(call.id, call.kind));
    Channel& c = it->second;
    const std::uint64_t id = call.id;
    switch (call.op) {
      case ChannelOp::info: {
        wire::ChannelReply r;
        r.value = c.items.size();
        r.maxsize = c.maxsize;
        r.closed = c.closed;
        r.flag = c.set;
        return finish(done, nullptr, std::move(r));
      }
      case ChannelOp::put: {
        if (c.closed) return finish(done, closed_for_put(id, c));
        if (c.kind == ChannelKind::pipe) c.sender = who;  // the pipe closes if its process ends
        if (c.maxsize != 0 && items.size() > c.maxsize)
          return finish(done, std::make_exception_ptr(
                                  ConfigError("fibra: put_many of " + std::to_string(items.size()) + " items into " +
                                              label(c.kind, id) + ", which holds at most " + std::to_string(c.maxsize) +
                                              ": they could never fit at once; put them in smaller batches")));
        if (c.putters.empty() && (c.maxsize == 0 || c.items.size() + items.size() <= c.maxsize)) {
          c.unfinished += items.size();
          c.put_in(std::move(items));
          finish(done, nullptr);
          return settle(id, c);
        }
        if (call.timeout_s == 0)
          return finish(done, std::make_exception_ptr(QueueFull("fibra: " + label(c.kind, id) + " is full (" +
                                                                std::to_string(c.maxsize) + " items)")));
        return wait(c.putters, call, items, who, done);
      }
      case ChannelOp::get: {
        if (c.getters.empty() && !c.items.empty() && !behind_ahead(c, who)) {
          finish(done, nullptr, take(id, c, call.n, call.ahead, who));
          return settle(id, c);  // room for the puts that wait
        }
        if (at_its_end(c)) return finish(done, at_end(id, c));
        const bool now_or_never = call.timeout_s == 0;
        if (now_or_never && !behind_ahead(c, who)) return finish(done, empty(id, c));
        // Items another task read ahead are in the queue still: they are asked back, and even a
        // get with no time to wait waits for them (an answer, or the end of their process, comes).
        if (now_or_never) call.timeout_s = -1;
        wait(c.getters, call, items, who, done);
        c.getters.back()->now_or_never = now_or_never;
        return recall(id, c);
      }
      case ChannelOp::close:
        c.closed = true;
        finish(done, nullptr);
        return settle(id, c);
      case ChannelOp::task_done:
        if (call.n > c.unfinished)
          return finish(done,
                        std::make_exception_ptr(ConfigError("fibra: task_done() on " + label(c.kind, id) +
                                                            " was called more times than items "
                                                            "were put (" +
                                                            std::to_string(c.unfinished) + " not yet marked done, " +
                                                            std::to_string(call.n) + " marked now)")));
        c.unfinished -= call.n;
        finish(done, nullptr);
        return settle(id, c);
      case ChannelOp::set:
        c.set = call.n != 0;
        finish(done, nullptr);
        return settle(id, c);
      case ChannelOp::join:
      case ChannelOp::wait: {
        const bool now = over(call.op, c);
        if (now || call.timeout_s == 0) {
          wire::ChannelReply r;
          r.flag = now;
          return finish(done, nullptr, std::move(r));
        }
        return wait(c.waiters, call, items, who, done);
      }
      default:
        return finish(
            done, std::make_exception_ptr(Error("fibra: an unknown queue operation (" + std::to_string(int(call.op)) +
                                                "); are the driver and its workers the same build?")));
    }
  }

  void forget(std::uint64_t pool, std::uint64_t worker, std::optional<std::uint64_t> route,
              const std::vector<std::uint64_t>& taken) {
    std::vector<std::uint64_t> touched;
    for (auto& [id, c] : channels) {
      bool changed = false;
      // A task's put without a timeout returned in its process before it was answered: its item
      // still goes in, once there is room (a writer killed mid-stream leaves every put that returned).
      for (auto* q : {&c.getters, &c.putters, &c.waiters})
        changed |= std::erase_if(*q, [&](const WaiterPtr& w) {
                     return matches(w->who, pool, worker, route) && !(w->op == ChannelOp::put && !w->timed);
                   }) > 0;
      if (c.kind == ChannelKind::pipe && c.sender && matches(*c.sender, pool, worker, route) && !c.closed) {
        c.closed = true;  // its sender's process ended: the other end reads the rest, then PipeClosed
        changed = true;
      }
      if (changed) touched.push_back(id);
    }
    // What was sent and not acknowledged goes back in front, the latest first so that the order holds.
    for (auto it = unacked.rbegin(); it != unacked.rend();) {
      if (!matches(it->second.who, pool, worker, route)) {
        ++it;
        continue;
      }
      if (auto c = channels.find(it->second.channel); c != channels.end()) {
        std::size_t gone = 0;  // of items read ahead: those its process took went with it
        for (const std::uint64_t t : taken)
          if (ahead_token(t) == it->first) gone = ahead_count(t);
        put_back(c->second, it->first, it->second, gone);
        touched.push_back(it->second.channel);
      }
      it = std::make_reverse_iterator(unacked.erase(std::next(it).base()));
    }
    for (auto id : touched)
      if (auto c = channels.find(id); c != channels.end()) settle(id, c->second);
  }
};

ChannelStore::ChannelStore() : impl_(std::make_unique<Impl>()) {}
ChannelStore::~ChannelStore() = default;

ChannelStore& ChannelStore::instance() {
  static ChannelStore* store = new ChannelStore;  // never destroyed: its timer thread may outlive main
  return *store;
}

std::uint64_t new_channel_id() {
  static std::atomic<std::uint64_t> next{1};
  return next++;
}

void ChannelStore::call(wire::ChannelCall c, const ChannelHolder& who, Done done) {
  if (is_sync_kind(c.kind)) return SyncStore::instance().call(std::move(c), who, std::move(done));
  Span items;  // a put's, as one block (where each item starts found outside the lock)
  if (c.op == ChannelOp::put) {
    try {
      items = span_of(std::move(c.items));
    } catch (const Error& e) {
      done(std::make_exception_ptr(Error(std::string("fibra: a put's items do not decode: ") + e.what())), {});
      return;
    } catch (const std::bad_alloc&) {
      done(std::make_exception_ptr(Error("fibra: out of memory in the driver for a put of " +
                                         std::to_string(c.items.size()) + " items; nothing of it was put")),
           {});
      return;
    }
  }
  std::unique_lock lk(impl_->mu);
  if (c.op == ChannelOp::ack)
    impl_->ack(c.token);
  else if (c.op == ChannelOp::give_back)
    impl_->ack(c.token, c.n);
  else
    impl_->call(c, items, who, done);
  impl_->run_ready(lk);
}

void ChannelStore::set_totals_sink(TotalsSink sink) {
  std::lock_guard lk(impl_->mu);
  impl_->totals_sink = std::move(sink);
}

void ChannelStore::set_notifier(std::uint64_t pool, Notify notify) {
  std::lock_guard lk(impl_->mu);
  if (notify)
    impl_->notifiers[pool] = std::move(notify);
  else
    impl_->notifiers.erase(pool);
}

void ChannelStore::forget(std::uint64_t pool, std::uint64_t worker, std::optional<std::uint64_t> route,
                          const std::vector<std::uint64_t>& taken) {
  {
    std::unique_lock lk(impl_->mu);
    impl_->forget(pool, worker, route, taken);
    impl_->run_ready(lk);
  }
  SyncStore::instance().forget(pool, worker, route);
}

// ---- the calls of fibra/queue.hpp -----------------------------------------------------------

ChannelResult channel_call(ChannelOp op, std::uint64_t id, ChannelKind kind, std::uint64_t n,
                           std::optional<double> timeout_s, ChannelItems items, std::uint64_t count) {
  wire::ChannelCall c;
  c.op = op;
  c.kind = kind;
  c.id = id;
  c.n = n;
  c.timeout_s = timeout_s ? std::max(0.0, *timeout_s) : -1.0;
  c.items = std::move(items);
  c.ahead = count;
  if (is_sync_kind(kind)) c.token = lock_holder();  // (an RLock is taken again by its holder alone)
  wire::ChannelReply r;
  if (in_executor()) {
    r = task_side()->channel_call(std::move(c));
  } else {
    std::promise<wire::ChannelReply> p;
    auto f = p.get_future();
    ChannelStore::instance().call(std::move(c), ChannelHolder{}, [&p](std::exception_ptr e, wire::ChannelReply rep) {
      if (e)
        p.set_exception(e);
      else
        p.set_value(std::move(rep));
    });
    if (kind == ChannelKind::pipe && op == ChannelOp::get) {
      // A pipe's recv: the other end often answers within microseconds (a ping-pong), and with the
      // caller asleep on the future the round trip took 30-40 us in half the runs here (17 us in
      // the others), so the answer is watched 30 us first, as a Process's recv watches its ring
      // (b8's pipe round trip, 6 runs each, alternating: 16.8-39.5 us, median 23.7 -> 11.9-31.6 us,
      // median 12.3).
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(30);
      while (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready &&
             std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
    }
    r = f.get();
  }
  return ChannelResult{std::move(r.items), r.value, r.maxsize, r.flag, r.closed};
}

ChannelRef::~ChannelRef() {
  if (!owner_) return;
  try {
    channel_call(ChannelOp::release, id_, kind_, 0, std::nullopt);
  } catch (...) {  // the driver is ending: nothing to free
  }
}

std::shared_ptr<ChannelRef> open_channel(ChannelKind kind, std::uint64_t n, ChannelItems init) {
  const std::uint64_t id = channel_call(ChannelOp::open, 0, kind, n, std::nullopt, std::move(init)).value;
  return std::make_shared<ChannelRef>(id, kind, !in_executor());
}

std::shared_ptr<ChannelRef> adopt_channel(std::uint64_t id, ChannelKind kind) {
  if (in_executor()) return std::make_shared<ChannelRef>(id, kind, false);
  return std::make_shared<ChannelRef>(id, kind, channel_call(ChannelOp::hold, id, kind, 0, std::nullopt).flag);
}

}  // namespace fibra::detail
