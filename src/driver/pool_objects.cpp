// The driver's side of the object store for a pool: the stored objects (fibra::put, results kept
// where they were made) a batch takes, sent to agents or fetched from a peer, and freed.
#include <memory>
#include <string>
#include <vector>

#include "common/env.hpp"
#include "driver/pool_impl.hpp"

namespace fibra::detail {

namespace {
const std::string loopback = "localhost";
}  // namespace

// The stored objects (fibra::put) `job` takes go in its chunk's header, and in `objects` (to send
// to agents without shared memory first).
void PoolImpl::add_objects(const JobState& job, wire::TaskHeader& h,
                           std::vector<std::shared_ptr<const StoredObject>>& objects) {
  if (!job.has_objects()) return;
  for (const ObjectArg& a : job.objects()) {
    h.objects.push_back(wire::object_ref(a));
    objects.push_back(a.object);
  }
}

// The stored objects (fibra::put) a batch's tasks take, to an agent whose executors cannot map
// the driver's memory (it has no lanes: another host, or lanes off), once each: the agent keeps a
// copy in a memfd of its own, which its executors map (docs/architecture.md, "The object store").
// Executors of an agent on this host map the driver's own memfd, even for a batch sent through MPI.
// An agent with an object server copies the object from a peer that holds it (one on its own host
// first) rather than from the driver: a result kept where it was made goes from host to host, and
// a value put here leaves the driver once.
void PoolImpl::send_objects(Worker& w, const std::vector<std::shared_ptr<const StoredObject>>& objects) {
  if (!w.lanes.empty()) return;
  for (const auto& o : objects) {
    if (!w.objects.add(o->id)) continue;
    if (const Worker* peer = w.object_port != 0 ? object_peer(w, o->id) : nullptr) {
      // The address its server listens on; listening on every address, a peer on its own host is
      // reached through the loopback (its host name may not resolve).
      const std::string& host = !peer->object_host.empty() ? peer->object_host
                                : peer->host == w.host     ? loopback
                                                           : peer->host;
      send(w, wire::tag_object_fetch,
           wire::encode(wire::ObjectFetch{{o->id, o->origin, o->bytes.size()}, host, peer->object_port}));
      w.objects.fetching(o, peer->id);
      std::lock_guard lk(mu_);
      ++stats_.objects_fetched_from_peers;
      continue;
    }
    send_object_bytes(w, o);
  }
}

void PoolImpl::send_object_bytes(Worker& w, const std::shared_ptr<const StoredObject>& o) {
  // sent from the driver's mapping, which the send keeps
  send(w, wire::tag_object,
       mpi::Pieces::head_and_body(wire::encode(wire::ObjectHead{o->id, o->origin, o->bytes.size()}), o->bytes, o));
  std::lock_guard lk(mu_);
  ++stats_.objects_sent;
}

// A live agent with an object server, other than `w`, that holds object `id` (or is copying it:
// its server waits for it), on w's host if one is; nullptr if none.
const Worker* PoolImpl::object_peer(const Worker& w, std::uint64_t id) const {
  const Worker* found = nullptr;
  for (const auto& p : workers_) {
    if (p.get() == &w || p->object_port == 0 || !p->objects.holds(id) || w.objects.unreachable(p->id)) continue;
    if (p->state != Worker::State::ready && p->state != Worker::State::retiring) continue;
    if (p->host == w.host) return p.get();
    if (!found) found = p.get();
  }
  return found;
}

// An agent could not copy an object from its peer (lost, a firewall): the driver sends it, or, if
// no task holds it any more, tells the agent to stop waiting for it. That peer is not asked of
// this agent again.
void PoolImpl::on_object_missing(Worker& w, std::uint64_t id) {
  bool was_fetching = false;
  const std::shared_ptr<const StoredObject> o = w.objects.fetch_failed(id, was_fetching);
  if (was_fetching) {
    std::lock_guard lk(mu_);
    --stats_.objects_fetched_from_peers;  // counted when asked: it was not
  }
  if (o) return send_object_bytes(w, o);
  w.objects.drop(id);
  send(w, wire::tag_object_free, wire::encode(wire::ObjectFree{id, 0}));
}

// Agents that keep a copy of an object freed since the last look are told to drop it.
void PoolImpl::free_objects() {
  for (std::uint64_t id : freed_.take())
    for (auto& w : workers_)
      if (const auto handed = w->objects.drop(id); handed && w->alive())
        send(*w, wire::tag_object_free, wire::encode(wire::ObjectFree{id, *handed}));
}

// FIBRA_PEER_OBJECTS=0: agents do not copy objects from each other (a cluster whose firewall lets
// only MPI through); every copy comes from the driver, and results made on other hosts come back.
bool PoolImpl::peer_objects_on() {
  static const bool enabled = env::flag("FIBRA_PEER_OBJECTS").value_or(true);
  return enabled;
}

}  // namespace fibra::detail
