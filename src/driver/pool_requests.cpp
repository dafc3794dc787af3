// What tasks ask of the pool that runs them, on the driver: a nested submit (or a map's chunk)
// and a call to an actor arrive as requests from an executor, through its agent; each becomes an
// ordinary chunk or actor call here, and its outcome goes back as a Reply to that executor.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "fibra/error.hpp"
#include "driver/channels.hpp"
#include "driver/pool_impl.hpp"
#include "driver/driver.hpp"
#include "transport/shared_items.hpp"

namespace fibra::detail {
namespace {

wire::ErrorText describe(const std::exception_ptr& e) {
  wire::ErrorText t;
  t.type = exception_type_name(e);
  try {
    std::rethrow_exception(e);
  } catch (const RemoteOrigin& r) {  // a registered type (FIBRA_EXCEPTION): rebuilt as that type in the task
    t.type = "fibra::RemoteException";
    t.what = r.context();
    t.remote_type = r.type_name();
    t.remote_message = r.remote_message();
  } catch (const RemoteError& r) {
    t.what = r.what();
    t.remote_type = r.type_name();
    t.remote_message = r.remote_message();
  } catch (const std::exception& x) {
    t.what = x.what();
  } catch (...) {
    t.what = "an exception that is not a std::exception";
  }
  return t;
}

}  // namespace

std::uint64_t PoolImpl::next_uid() {
  static std::atomic<std::uint64_t> n{1};
  return n.fetch_add(1);
}

// The JobState of a task's request, whose outcome goes back as a Reply to the executor it came
// from. Only what delivers to it holds it (its callback does not): a request that is never answered
// (a queue's wait dropped when its process ended) is freed.
std::shared_ptr<JobState> PoolImpl::answered_job(const FunctionEntry& fn, const Worker& w, std::uint64_t route,
                                                 const wire::Request& r) {
  auto job = std::make_shared<JobState>(fn, r.mode, r.policy);
  std::weak_ptr<PoolImpl> self = shared_from_this();
  job->on_delivered([self, wid = w.id, route, id = r.id, weak = std::weak_ptr<JobState>(job)] {
    if (auto p = self.lock())
      if (auto j = weak.lock()) p->queue_reply({wid, route, id, std::move(j), {}, {}});
  });
  return job;
}

void PoolImpl::on_request(Worker& w, const std::string& data) {
  auto [route, r] = wire::parse_routed_request(data);
  if (!rings_.empty()) rings_.read_of(w, route);
  if (r.actor == wire::actor_start_request || r.actor == wire::actor_find_request) return on_actor_request(w, route, r);
  if (r.actor == wire::channel_request) return on_channel_request(w, route, r);
  const FunctionEntry* fn = function_by_id(r.fn);
  if (!fn)
    throw wire::Malformed("fibra: a malformed message: a request for an unknown function (id " + std::to_string(r.fn) +
                          ")");
  // The task's own call: its MapOptions, or the pool's defaults it saw.
  auto job = answered_job(*fn, w, route, r);
  if (!r.name.empty()) job->set_name(r.name);
  try {
    if (!r.objects.empty()) take_task_objects(w, *fn, r, *job);
    if (r.actor != 0) {
      auto core = r.pool == 0 || r.pool == uid_ ? std::shared_ptr<PoolCore>(shared_from_this()) : find_pool(r.pool);
      if (!core) throw ActorDied("fibra: " + fn->name + " was called on an actor whose pool is gone");
      core->call_actor(r.actor, job, std::move(r.payload));
      return;
    }
    if (r.payload.size() + 4 * std::size_t(r.count) > max_chunk_bytes)
      throw ConfigError("fibra: a task submitted " + fn->name + " with arguments of " +
                        std::to_string(r.payload.size()) + " bytes, over the 2 GiB one MPI message can carry");
    check_fits(r.policy.need, fn->name);
    std::lock_guard lk(mu_);
    // A closed pool still runs what its tasks submit (they are part of the work it was given);
    // a terminated or broken one does not.
    if (broken_) std::rethrow_exception(broken_);
    if (stopping_) throw PoolClosed("fibra: a task submitted " + fn->name + " to a pool that " + closed_reason_);
    take_inbox();  // what the driver's threads submitted before goes first
    const std::uint64_t id = sched_.add(job, r.first, r.count, std::move(r.payload));
    trace::mark(trace::submitted, id);
    // (a task's call: the worker and route, wire::RequestRoute, of the executor or actor that asked)
    if (events_)
      events_->queued(id, job, r.first, r.count, 0,
                      fmt::format(R"(,"asked_by":{{"worker":{},"route":{}}})", w.id, route));
    kick();
  } catch (...) {
    job->deliver({r.first, r.count, {}, std::current_exception(), {}});
  }
}

// Values the task stored (fibra::put in a task) among the call's arguments: its agent holds their
// memfds (they came with the request), which the driver maps, so that the call takes them as it
// takes values put in the driver. Throws Error if one is not to be found.
void PoolImpl::take_task_objects(Worker& w, const FunctionEntry& fn, const wire::Request& r, JobState& job) {
  for (const auto& o : r.objects) w.objects.hold_handed(o.id);  // until told it is freed (free_objects)
  std::vector<ObjectArg> args;
  for (const auto& o : r.objects) {
    std::string why;
    auto object = take_kept_result(w.pid, o.origin, o.id, o.size, why);
    if (!object) {
      for (const auto& x : r.objects) freed_.note(x.id);  // (those taken are held here meanwhile)
      throw Error("fibra: a task called " + fn.name + " with a value it stored (fibra::put), but " + why + " (" +
                  name(w) + ")");
    }
    args.push_back({std::move(object), o.at});
  }
  {
    std::lock_guard lk(mu_);
    stats_.objects_from_tasks += args.size();
  }
  job.set_objects(std::move(args));
}

// A task starts an actor (Actor<T>::start) or looks one up by name (Actor<T>::get): the reply's
// payload is its id. An actor a task starts is not owned by the task's handle: it lives until the
// pool ends, or until the driver's handles to it (one that reached the driver, adopt_actor) are gone.
void PoolImpl::on_actor_request(Worker& w, std::uint64_t route, wire::Request& r) {
  const bool start = r.actor == wire::actor_start_request;
  const FunctionEntry* fn = start ? function_by_id(r.fn) : &actor_find_entry();
  if (!fn)
    throw wire::Malformed("fibra: a malformed message: a task started an actor of an unknown constructor (id " +
                          std::to_string(r.fn) + ")");
  auto job = answered_job(*fn, w, route, r);
  try {
    auto core = r.pool == 0 || r.pool == uid_ ? std::shared_ptr<PoolCore>(shared_from_this()) : find_pool(r.pool);
    if (!core) throw ConfigError("fibra: a task used an actor of a pool that is gone");
    std::uint64_t id = 0;
    if (start) {
      auto a = wire::decode<wire::ActorStart>(r.payload);
      core->check_need(a.need, "actor " + a.class_name);
      id = core->start_actor(
          *fn, std::move(a.args),
          ActorSettings{a.class_name, a.max_restarts, a.need, std::move(a.name), false, a.max_concurrency});
    } else {
      const auto f = wire::decode<wire::ActorFind>(r.payload);
      id = core->find_actor(f.name, f.class_name, false);
    }
    ChunkOutcome o;  // the actor's id, and its pool's uid (handles name their pool by it)
    o.count = 1;
    const std::uint64_t reply[2] = {id, core->uid()};
    o.payload.assign(reinterpret_cast<const char*>(reply), sizeof reply);
    job->deliver(std::move(o));
  } catch (const wire::Malformed&) {
    throw;
  } catch (...) {
    job->deliver({0, 1, {}, std::current_exception(), {}});
  }
}

namespace {
// A put's items handed over in the calling process's memfd (transport/shared_items.hpp), read into
// the call before the store sees it: nullptr, or the error to answer it with.
std::exception_ptr take_shared(wire::ChannelCall& call) {
  if (!call.shared) return nullptr;
  try {
    call.items = take_shared_items(*call.shared);
    call.shared.reset();
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}
}  // namespace

// The reply goes as any request's, once the channel answers (at once, or when the wait ends); an
// acknowledgement is not answered.
void PoolImpl::on_channel_request(Worker& w, std::uint64_t route, wire::Request& r) {
  auto call = wire::decode<wire::ChannelCall>(r.payload);
  if (call.op == ChannelOp::ring) {  // answered after all the process sent before, as it comes through MPI
    wire::ChannelReply rep;
    rep.flag = open_call_ring(w, route);
    ChunkOutcome o;
    o.count = 1;
    o.payload = wire::channel_payload(rep);
    answered_job(channel_entry(), w, route, r)->deliver(std::move(o));
    return;
  }
  const ChannelHolder who{uid_, static_cast<std::uint64_t>(w.id), route};
  if (call.op == ChannelOp::ack || call.op == ChannelOp::give_back)  // told, not asked: no answer
    return ChannelStore::instance().call(std::move(call), who, nullptr);
  auto job = answered_job(channel_entry(), w, route, r);  // only the store's answer holds it
  auto answer = [job](std::exception_ptr e, wire::ChannelReply rep) {
    ChunkOutcome o;
    o.count = 1;
    if (e)
      o.error = e;
    else
      o.payload = wire::channel_payload(rep);
    job->deliver(std::move(o));
  };
  if (auto e = take_shared(call)) return answer(e, {});  // (only a process calling through its ring writes one)
  ChannelStore::instance().call(std::move(call), who, std::move(answer));
}

// ---- calls on channels through a lane's ring (src/transport/lane.hpp) ----------------------------

// The process at `route` of `w` asks to send its calls on channels through its lane: yes if the
// driver maps that lane (w's executors, or an actor's process whose lane it was told of).
bool PoolImpl::open_call_ring(Worker& w, std::uint64_t route) {
  std::shared_ptr<LaneRegion> region;
  if (route & wire::route_actor_bit) {
    if (auto it = w.actor_lanes.find(route & ~wire::route_actor_bit); it != w.actor_lanes.end()) region = it->second;
  } else if (route >= 1 && route <= w.lanes.size()) {
    region = w.lanes[route - 1];
  }
  if (!region || !w.alive()) return false;
  rings_.open(w, w.id, route, std::move(region));
  return true;
}

// A call from the ring, handled as on_channel_request handles one through MPI; its answer goes
// back through the other ring, or through the agent if it does not fit there now.
void PoolImpl::on_ring_call(const std::shared_ptr<CallRing>& ring, const std::string& bytes) {
  auto r = wire::decode<wire::Request>(bytes);
  if (r.actor != wire::channel_request)
    throw wire::Malformed("fibra: a malformed message: a call in a lane's ring is not a call on a channel");
  auto call = wire::decode<wire::ChannelCall>(r.payload);
  const ChannelHolder who{uid_, static_cast<std::uint64_t>(ring->worker_id), ring->route};
  if (call.op == ChannelOp::ack || call.op == ChannelOp::give_back) {
    {
      std::lock_guard lk(ring->reply_mu);
      ring->shared.erase(call.token);  // the items it was handed in a memfd are its now
    }
    return ChannelStore::instance().call(std::move(call), who, nullptr);
  }
  if (call.op == ChannelOp::ring)
    throw wire::Malformed("fibra: a malformed message: a call in a lane's ring asks for the ring");
  std::weak_ptr<PoolImpl> self = shared_from_this();
  auto answer = [self, ring, id = r.id](std::exception_ptr e, wire::ChannelReply rep) {
    wire::Reply out;
    out.route = ring->route;
    out.id = id;
    out.ok = !e;
    // Items too large for the ring go in a memfd, kept open until the process acknowledges them.
    std::optional<SharedItemsOut> big;
    if (!e && rep.token != 0 && rep.items.bytes().size() >= shared_items_from && (big = share_items(rep.items)))
      rep.shared = big->ref;
    if (big) keep_scratch(rep.items.release());
    out.payload = e ? wire::encode(describe(e)) : wire::channel_payload(rep);
    keep_scratch(rep.items.release());
    std::string bytes = scratch_buffer(out.payload.size() + 128);
    {
      Writer w(bytes);
      wire::put(w, out);
    }
    {
      std::lock_guard lk(ring->reply_mu);
      if (big && !ring->closed) ring->shared[rep.token] = std::move(big->fd);
      if (ring->closed || ring->region->lane().put_reply(bytes)) {
        keep_scratch(std::move(bytes));
        keep_scratch(std::move(out.payload));
        return;
      }
    }
    out.from_ring = true;  // through the agent, which did not see the call
    if (auto p = self.lock()) p->queue_reply({ring->worker_id, ring->route, 0, nullptr, {}, wire::encode(out)});
  };
  if (auto e = take_shared(call)) return answer(e, {});  // (the process keeps its memfd open until this answer)
  ChannelStore::instance().call(std::move(call), who, std::move(answer));
}

void PoolImpl::queue_reply(PendingReply r) {
  replies_.push(std::move(r));
  wake_.notify_one();
}

bool PoolImpl::send_replies() {
  std::vector<PendingReply> rs = replies_.take();
  for (auto& p : rs) {
    Worker* w = nullptr;
    for (auto& x : workers_)
      if (x->id == p.worker) w = x.get();
    if (!w || !w->alive()) continue;  // its executor's task died with it, or will be told it is lost
    if (!p.encoded.empty()) {
      send(*w, wire::tag_reply, std::move(p.encoded));
      continue;
    }
    if (!p.job) {
      wire::Reply rep;
      rep.route = p.route;
      rep.payload = std::move(p.notice);
      send(*w, wire::tag_reply, wire::encode(rep));
      continue;
    }
    ChunkOutcome o;
    p.job->wait_next(o);  // delivered: at once
    wire::Reply rep;
    rep.route = p.route;
    rep.id = p.id;
    rep.ok = !o.error;
    if (o.error)
      rep.payload = wire::encode(describe(o.error));
    else
      rep.payload.assign(o.bytes());
    for (const auto& e : o.item_errors()) {
      rep.error_offsets.push_back(e.offset);
      rep.errors.push_back(wire::encode(describe(e.error)));
    }
    send(*w, wire::tag_reply, wire::encode(rep));
  }
  return !rs.empty();
}

}  // namespace fibra::detail
