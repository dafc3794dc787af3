// The driver's locks, conditions, barriers and shared state (sync_store.hpp).
#include "driver/sync_store.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/log.hpp"
#include "driver/wait_timer.hpp"
#include "fibra/error.hpp"

namespace fibra::detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint64_t all = ~std::uint64_t(0);

// Who holds a lock's unit: a thread of a process (an RLock's, `depth` times).
struct Owner {
  ChannelHolder who;
  std::uint64_t thread = 0;
  std::uint64_t depth = 1;
  bool is(const ChannelHolder& w, std::uint64_t t) const { return who == w && thread == t; }
};

struct Waiter {
  using Deadlines = std::multimap<Clock::time_point, std::weak_ptr<Waiter>>;
  ChannelOp op = ChannelOp::acquire;
  std::uint64_t object = 0;  // where it waits: a lock, a condition or a barrier
  ChannelHolder who;
  std::uint64_t thread = 0;
  std::uint64_t depth = 1;  // a Condition's waiter: how often it held its RLock, taken again so
  std::uint64_t index = 0;  // a Barrier's: its arrival
  bool notified = false;    // a Condition's waiter moved to its lock's acquires: by a notify
  ChannelStore::Done done;
  bool timed = false;
  Deadlines::iterator at;
};
using WaiterPtr = std::shared_ptr<Waiter>;

struct Object {
  ChannelKind kind = ChannelKind::lock;
  std::uint64_t handles = 0;  // the driver's handles that keep it
  bool pinned = false;        // made in a task: kept until the program ends
  // Locks and semaphores:
  std::uint64_t units = 0;
  std::uint64_t bound = 0;  // more units than this is a release too many (0: no bound)
  std::vector<Owner> owners;
  std::deque<WaiterPtr> acquirers;
  // A Condition: its lock (the first its calls named) and its waiters.
  std::uint64_t lock = 0;
  std::deque<WaiterPtr> sleepers;
  // A Barrier:
  std::uint64_t parties = 0;
  bool broken = false;
  std::deque<WaiterPtr> arrived;
  // Value, Array and List: the items; Dict: keys and values, in the order the keys came.
  std::vector<std::string> row;
  std::vector<std::pair<std::string, std::string>> pairs;
  std::unordered_map<std::string, std::size_t> index;
};

const char* kind_name(ChannelKind k) {
  switch (k) {
    case ChannelKind::lock: return "lock";
    case ChannelKind::rlock: return "rlock";
    case ChannelKind::semaphore: return "semaphore";
    case ChannelKind::bounded_semaphore: return "bounded semaphore";
    case ChannelKind::condition: return "condition";
    case ChannelKind::barrier: return "barrier";
    case ChannelKind::value: return "value";
    case ChannelKind::dict: return "dict";
    case ChannelKind::list: return "list";
    default: return "object";
  }
}
std::string label(ChannelKind k, std::uint64_t id) { return std::string(kind_name(k)) + " #" + std::to_string(id); }
bool is_lock(ChannelKind k) { return k >= ChannelKind::lock && k <= ChannelKind::bounded_semaphore; }

bool matches(const ChannelHolder& h, std::uint64_t pool, std::uint64_t worker, std::optional<std::uint64_t> route) {
  return h.remote() && h.pool == pool && (worker == 0 || h.worker == worker) && (!route || h.route == *route);
}
std::string processes_of(std::uint64_t pool, std::uint64_t worker) {
  if (worker == 0) return "a process of pool " + std::to_string(pool);
  return "a process of worker " + std::to_string(worker) + " of pool " + std::to_string(pool);
}

template <class E>
std::exception_ptr error(std::string what) {
  return std::make_exception_ptr(E("fibra: " + std::move(what)));
}
wire::ChannelReply flag_reply(bool flag) {
  wire::ChannelReply r;
  r.flag = flag;
  return r;
}

}  // namespace

struct SyncStore::Impl : WaitStore<Waiter, SyncStore::Impl> {
  std::map<std::uint64_t, Object> objects;

  void run_ready(std::unique_lock<std::mutex>& lk) {
    auto now = std::exchange(ready, {});
    lk.unlock();
    give(now, "a lock's");
  }

  WaiterPtr waiter(const wire::ChannelCall& c, const ChannelHolder& who, ChannelStore::Done& done) {
    auto w = std::make_shared<Waiter>();
    w->op = c.op;
    w->object = c.id;
    w->who = who;
    w->thread = c.token;
    w->done = std::move(done);
    time(w, c.timeout_s);
    return w;
  }

  // ---- locks and semaphores ----

  // A plain Semaphore keeps no holders: it is often a signal (one process acquires, another
  // releases), and a process that ends holding none of its units must give none back.
  static bool keeps_holders(const Object& o) { return o.kind != ChannelKind::semaphore; }

  // Gives free units to the acquires that wait, in order.
  void grant(Object& o) {
    while (o.units > 0 && !o.acquirers.empty()) {
      WaiterPtr w = std::move(o.acquirers.front());
      o.acquirers.pop_front();
      --o.units;
      if (keeps_holders(o)) o.owners.push_back(Owner{w->who, w->thread, w->depth});
      finish(w, nullptr, flag_reply(w->op == ChannelOp::acquire || w->notified));
    }
  }

  void acquire(Object& o, wire::ChannelCall& c, const ChannelHolder& who, ChannelStore::Done& done) {
    if (o.kind == ChannelKind::rlock && !o.owners.empty() && o.owners.front().is(who, c.token)) {
      ++o.owners.front().depth;
      return finish(done, nullptr, flag_reply(true));
    }
    if (o.units > 0 && o.acquirers.empty()) {
      --o.units;
      if (keeps_holders(o)) o.owners.push_back(Owner{who, c.token, 1});
      return finish(done, nullptr, flag_reply(true));
    }
    if (c.timeout_s == 0) return finish(done, nullptr, flag_reply(false));
    o.acquirers.push_back(waiter(c, who, done));
  }

  void unlock(std::uint64_t id, Object& o, const wire::ChannelCall& c, const ChannelHolder& who,
              ChannelStore::Done& done) {
    if (o.kind == ChannelKind::rlock) {
      if (o.owners.empty() || !o.owners.front().is(who, c.token))
        return finish(done, error<ConfigError>("release of " + label(o.kind, id) +
                                               " by a thread that does not hold it (an RLock is released by "
                                               "the thread that acquired it)"));
      if (--o.owners.front().depth > 0) return finish(done, nullptr);
    } else if (o.bound != 0 && o.units >= o.bound) {
      return finish(done, error<ConfigError>("release of " + label(o.kind, id) + " more times than it was acquired"));
    }
    // The unit given back: this thread's, else this process's, else the oldest holder's.
    auto it = std::find_if(o.owners.begin(), o.owners.end(), [&](const Owner& x) { return x.is(who, c.token); });
    if (it == o.owners.end())
      it = std::find_if(o.owners.begin(), o.owners.end(), [&](const Owner& x) { return x.who == who; });
    if (it == o.owners.end()) it = o.owners.begin();
    if (it != o.owners.end()) o.owners.erase(it);
    ++o.units;
    finish(done, nullptr);
    grant(o);
  }

  // ---- conditions ----

  // The lock of condition `o` (tied to the first one its calls name), held by this thread.
  Object* held_lock(std::uint64_t id, Object& o, const wire::ChannelCall& c, const ChannelHolder& who,
                    ChannelStore::Done& done, const char* what) {
    if (o.lock == 0) o.lock = c.ahead;
    auto it = objects.find(o.lock);
    if (c.ahead != o.lock || it == objects.end() || !is_lock(it->second.kind)) {
      finish(done, error<ConfigError>(std::string(what) + " on " + label(o.kind, id) +
                                      " with a lock other than its own, or one that is gone"));
      return nullptr;
    }
    Object& l = it->second;
    const bool held = std::any_of(l.owners.begin(), l.owners.end(), [&](const Owner& x) { return x.is(who, c.token); });
    if (!held) {
      finish(done,
             error<ConfigError>(std::string(what) + " on " + label(o.kind, id) + " by a thread that does not hold " +
                                label(l.kind, o.lock) + " (take it first: std::unique_lock g(cond))"));
      return nullptr;
    }
    return &l;
  }

  void sleep(std::uint64_t id, Object& o, wire::ChannelCall& c, const ChannelHolder& who, ChannelStore::Done& done) {
    Object* l = held_lock(id, o, c, who, done, "wait");
    if (!l) return;
    auto it = std::find_if(l->owners.begin(), l->owners.end(), [&](const Owner& x) { return x.is(who, c.token); });
    auto w = waiter(c, who, done);
    w->depth = it->depth;
    l->owners.erase(it);
    ++l->units;
    o.sleepers.push_back(std::move(w));
    grant(*l);
  }

  // A condition's waiter, notified or out of time, waits for its lock again.
  void wake(Object& o, WaiterPtr w, bool notified) {
    untime(w);
    w->notified = notified;
    auto l = objects.find(o.lock);
    if (l == objects.end()) return finish(w, error<Error>(label(o.kind, w->object) + "'s lock is gone"));
    l->second.acquirers.push_back(std::move(w));
    grant(l->second);
  }

  void notify(std::uint64_t id, Object& o, const wire::ChannelCall& c, const ChannelHolder& who,
              ChannelStore::Done& done) {
    if (!held_lock(id, o, c, who, done, "notify")) return;
    for (std::uint64_t k = 0; k < c.n && !o.sleepers.empty(); ++k) {
      WaiterPtr w = std::move(o.sleepers.front());
      o.sleepers.pop_front();
      wake(o, std::move(w), true);
    }
    finish(done, nullptr);
  }

  // ---- barriers ----

  void break_barrier(std::uint64_t id, Object& o, const std::string& why) {
    o.broken = true;
    for (auto& w : o.arrived) finish(w, error<BrokenBarrier>(label(o.kind, id) + " is broken: " + why));
    o.arrived.clear();
  }

  void arrive(std::uint64_t id, Object& o, wire::ChannelCall& c, const ChannelHolder& who, ChannelStore::Done& done) {
    if (o.parties == 0)
      return finish(done, error<ConfigError>("wait on " + label(o.kind, id) +
                                             ", which has no parties (a Barrier made by its default constructor)"));
    if (o.broken)
      return finish(done, error<BrokenBarrier>(label(o.kind, id) + " is broken (reset() makes it whole again)"));
    const std::uint64_t index = o.arrived.size();
    if (index + 1 < o.parties) {
      o.arrived.push_back(waiter(c, who, done));
      o.arrived.back()->index = index;
      return;
    }
    for (auto& w : o.arrived) {
      wire::ChannelReply r;
      r.value = w->index;
      finish(w, nullptr, std::move(r));
    }
    o.arrived.clear();
    wire::ChannelReply r;
    r.value = index;
    finish(done, nullptr, std::move(r));
  }

  // ---- values, arrays, lists and dicts ----

  static ChannelItems items_of(const std::vector<std::string>& row, std::size_t first, std::size_t last) {
    ChannelItems out;
    for (std::size_t i = first; i < last; ++i) out.add_encoded(row[i]);
    return out;
  }
  static std::vector<std::string> split(const ChannelItems& items) {
    std::vector<std::string> out;
    items.each([&](std::string_view s) { out.emplace_back(s); });
    return out;
  }
  static std::exception_ptr outside(std::uint64_t id, const Object& o, std::uint64_t i) {
    return error<LookupError>("index " + std::to_string(i) + " is outside " + label(o.kind, id) + ", which holds " +
                              std::to_string(o.row.size()) + " items");
  }

  void on_row(std::uint64_t id, Object& o, const wire::ChannelCall& c, ChannelStore::Done& done) {
    wire::ChannelReply r;
    const std::uint64_t size = o.row.size();
    switch (c.op) {
      case ChannelOp::read: {
        const std::uint64_t count = c.ahead == all ? size - std::min(c.n, size) : c.ahead;
        if (c.n > size || count > size - c.n) return finish(done, outside(id, o, c.n + (count ? count - 1 : 0)));
        r.items = items_of(o.row, c.n, c.n + count);
        break;
      }
      case ChannelOp::write: {
        auto values = split(c.items);
        if (c.n > size || values.size() > size - c.n) return finish(done, outside(id, o, c.n + values.size() - 1));
        std::move(values.begin(), values.end(), o.row.begin() + static_cast<std::ptrdiff_t>(c.n));
        break;
      }
      case ChannelOp::append:
        for (auto& v : split(c.items)) o.row.push_back(std::move(v));
        break;
      case ChannelOp::erase: {
        const std::uint64_t i = c.n == all ? size - 1 : c.n;
        if (size == 0 || i >= size) return finish(done, outside(id, o, c.n == all ? 0 : c.n));
        r.items.add_encoded(o.row[i]);
        o.row.erase(o.row.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
      case ChannelOp::entries: r.items = items_of(o.row, 0, size); break;
      case ChannelOp::clear: o.row.clear(); break;
      default: return refuse(id, o, c, done);
    }
    finish(done, nullptr, std::move(r));
  }

  void on_dict(std::uint64_t id, Object& o, const wire::ChannelCall& c, ChannelStore::Done& done) {
    wire::ChannelReply r;
    auto keys_values = split(c.items);
    switch (c.op) {
      case ChannelOp::read:
      case ChannelOp::erase: {
        if (keys_values.size() != 1) return finish(done, error<Error>("a malformed call on " + label(o.kind, id)));
        auto it = o.index.find(keys_values[0]);
        if (it == o.index.end()) break;
        r.flag = true;
        r.items.add_encoded(o.pairs[it->second].second);
        if (c.op == ChannelOp::erase) {
          o.pairs.erase(o.pairs.begin() + static_cast<std::ptrdiff_t>(it->second));
          o.index.clear();
          for (std::size_t i = 0; i < o.pairs.size(); ++i) o.index[o.pairs[i].first] = i;
        }
        break;
      }
      case ChannelOp::write:
        if (keys_values.size() % 2 != 0) return finish(done, error<Error>("a malformed call on " + label(o.kind, id)));
        for (std::size_t i = 0; i < keys_values.size(); i += 2) {
          auto [it, added] = o.index.try_emplace(keys_values[i], o.pairs.size());
          if (added)
            o.pairs.emplace_back(keys_values[i], std::move(keys_values[i + 1]));
          else if (c.n != 1)
            o.pairs[it->second].second = std::move(keys_values[i + 1]);
          if (c.n == 1) r.items.add_encoded(o.pairs[it->second].second);  // setdefault: its value now
        }
        break;
      case ChannelOp::entries:
        for (const auto& [k, v] : o.pairs) {
          r.items.add_encoded(k);
          r.items.add_encoded(v);
        }
        break;
      case ChannelOp::clear:
        o.pairs.clear();
        o.index.clear();
        break;
      default: return refuse(id, o, c, done);
    }
    finish(done, nullptr, std::move(r));
  }

  void refuse(std::uint64_t id, const Object& o, const wire::ChannelCall& c, ChannelStore::Done& done) {
    finish(done, error<Error>("operation " + std::to_string(int(c.op)) + " does not apply to " + label(o.kind, id) +
                              "; are the driver and its workers the same build?"));
  }

  // ---- every call ----

  void open(const wire::ChannelCall& c, const ChannelHolder& who, ChannelStore::Done& done) {
    const std::uint64_t id = new_channel_id();
    Object& o = objects[id];
    o.kind = c.kind;
    o.pinned = who.remote();
    o.handles = who.remote() ? 0 : 1;
    switch (c.kind) {
      case ChannelKind::lock:
      case ChannelKind::rlock: o.units = o.bound = 1; break;
      case ChannelKind::semaphore: o.units = c.n; break;
      case ChannelKind::bounded_semaphore: o.units = o.bound = c.n; break;
      case ChannelKind::barrier: o.parties = c.n; break;
      case ChannelKind::value:
      case ChannelKind::list: o.row = split(c.items); break;
      default: break;
    }
    wire::ChannelReply r;
    r.value = id;
    finish(done, nullptr, std::move(r));
  }

  void info(const Object& o, ChannelStore::Done& done) {
    wire::ChannelReply r;
    if (is_lock(o.kind)) r.value = o.units;
    if (o.kind == ChannelKind::barrier) {
      r.value = o.arrived.size();
      r.maxsize = o.parties;
      r.flag = o.broken;
    }
    if (o.kind == ChannelKind::value || o.kind == ChannelKind::list) r.value = o.row.size();
    if (o.kind == ChannelKind::dict) r.value = o.pairs.size();
    finish(done, nullptr, std::move(r));
  }

  void release(std::uint64_t id) {
    auto it = objects.find(id);
    if (it == objects.end() || it->second.pinned) return;
    if (it->second.handles > 0 && --it->second.handles > 0) return;
    Object& o = it->second;
    for (auto* q : {&o.acquirers, &o.sleepers, &o.arrived})
      for (auto& w : *q)
        finish(w, error<Error>(label(o.kind, id) +
                               " is gone: the last handle to it in the driver was dropped (keep a handle in the "
                               "driver while tasks use it)"));
    objects.erase(it);
  }

  void call(wire::ChannelCall& c, const ChannelHolder& who, ChannelStore::Done& done) {
    if (c.op == ChannelOp::open) return open(c, who, done);
    if (c.op == ChannelOp::release) {
      release(c.id);
      return finish(done, nullptr);
    }
    auto it = objects.find(c.id);
    if (c.op == ChannelOp::hold) {
      const bool kept = it != objects.end() && !it->second.pinned;
      if (kept) ++it->second.handles;
      return finish(done, nullptr, flag_reply(kept));
    }
    if (it == objects.end())
      return finish(done,
                    error<Error>(label(c.kind, c.id) + " is gone: the last handle to it in the driver was "
                                                       "dropped (keep a handle in the driver while tasks use it)"));
    Object& o = it->second;
    const std::uint64_t id = c.id;
    if (c.op == ChannelOp::info) return info(o, done);
    if (is_lock(o.kind) && c.op == ChannelOp::acquire) return acquire(o, c, who, done);
    if (is_lock(o.kind) && c.op == ChannelOp::unlock) return unlock(id, o, c, who, done);
    if (o.kind == ChannelKind::condition && c.op == ChannelOp::wait) return sleep(id, o, c, who, done);
    if (o.kind == ChannelKind::condition && c.op == ChannelOp::notify) return notify(id, o, c, who, done);
    if (o.kind == ChannelKind::barrier && c.op == ChannelOp::wait) return arrive(id, o, c, who, done);
    if (o.kind == ChannelKind::barrier && c.op == ChannelOp::abort) {
      break_barrier(id, o, "abort() was called");
      return finish(done, nullptr);
    }
    if (o.kind == ChannelKind::barrier && c.op == ChannelOp::reset) {
      break_barrier(id, o, "reset() was called while they waited");
      o.broken = false;
      return finish(done, nullptr);
    }
    if (o.kind == ChannelKind::value || o.kind == ChannelKind::list) {
      if (o.kind == ChannelKind::value && c.op != ChannelOp::read && c.op != ChannelOp::write)
        return refuse(id, o, c, done);
      return on_row(id, o, c, done);
    }
    if (o.kind == ChannelKind::dict) return on_dict(id, o, c, done);
    refuse(id, o, c, done);
  }

  // ---- time and death ----

  void expire(const WaiterPtr& w) {
    auto it = objects.find(w->object);
    if (it == objects.end() || !w->done) return;
    Object& o = it->second;
    if (std::erase(o.acquirers, w) > 0) return finish(w, nullptr, flag_reply(false));
    if (std::erase(o.sleepers, w) > 0) return wake(o, w, false);
    if (std::erase(o.arrived, w) > 0) {
      finish(w, error<BrokenBarrier>(label(o.kind, w->object) + " is broken: this wait timed out"));
      break_barrier(w->object, o, "a wait on it timed out");
    }
  }

  void forget(std::uint64_t pool, std::uint64_t worker, std::optional<std::uint64_t> route) {
    const auto dead = [&](const WaiterPtr& w) {
      if (!matches(w->who, pool, worker, route)) return false;
      untime(w);
      return true;
    };
    for (auto& [id, o] : objects) {
      std::erase_if(o.acquirers, dead);
      std::erase_if(o.sleepers, dead);
      if (std::any_of(o.arrived.begin(), o.arrived.end(), dead)) {
        std::erase_if(o.arrived, dead);
        break_barrier(id, o, "the process of a party that waited at it died");
      }
      const auto held = std::erase_if(o.owners, [&](const Owner& x) { return matches(x.who, pool, worker, route); });
      if (held == 0) continue;
      o.units = o.kind == ChannelKind::rlock ? 1 : o.units + held;
      // A Condition's waiter that waits to take its lock back takes it, as its wait promises (its
      // std::unique_lock releases it afterwards); an acquire is told.
      std::erase_if(o.acquirers, [&](WaiterPtr& w) {
        if (w->op == ChannelOp::wait) return false;
        finish(w, error<HolderDied>("the process that held " + label(o.kind, id) + " (" + processes_of(pool, worker) +
                                    ") died holding it; it is free again, but what it guarded may be half-changed"));
        return true;
      });
      grant(o);
    }
  }
};

SyncStore::SyncStore() : impl_(std::make_unique<Impl>()) {}
SyncStore::~SyncStore() = default;

SyncStore& SyncStore::instance() {
  static SyncStore* store = new SyncStore;  // never destroyed: its timer thread may outlive main
  return *store;
}

void SyncStore::call(wire::ChannelCall c, const ChannelHolder& who, ChannelStore::Done done) {
  std::unique_lock lk(impl_->mu);
  impl_->call(c, who, done);
  impl_->run_ready(lk);
}

void SyncStore::forget(std::uint64_t pool, std::uint64_t worker, std::optional<std::uint64_t> route) {
  std::unique_lock lk(impl_->mu);
  impl_->forget(pool, worker, route);
  impl_->run_ready(lk);
}

}  // namespace fibra::detail
