// src/transport/wire.hpp: the messages between driver, agents and executors, each defined once.
//
// Every message is a struct and a `fields` function that lists its members in wire order; encode
// and decode both walk that one list with fibra's codec, so no side writes a field list by hand.
// A task batch travels driver -> agent over MPI, then agent -> executor over a socket, unchanged;
// a result batch travels back the same way. The agent parses only headers (to know which chunks
// its executors hold), never payloads. Anything that does not decode throws wire::Malformed.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/freed_memory.hpp"
#include "fibra/detail/codec.hpp"
#include "fibra/detail/channel.hpp"
#include "fibra/detail/core.hpp"
#include "fibra/detail/registry.hpp"
#include "fibra/error.hpp"

namespace fibra::wire {

/// MPI tags between driver and agent.
enum Tag : int {
  tag_hello = 1,          ///< agent -> driver: Hello
  tag_tasks = 2,          ///< driver -> agent: a task batch
  tag_results = 3,        ///< agent -> driver: a result batch
  tag_heartbeat = 4,      ///< both ways, when nothing else was sent for a while
  tag_shutdown = 5,       ///< driver -> agent: stop (executors too), say bye, leave
  tag_bye = 6,            ///< agent -> driver: about to leave
  tag_setup = 7,          ///< driver -> agent, its first message: AgentSetup
  tag_actor_end = 8,      ///< driver -> agent: ActorEnd, the actor's last handle is gone
  tag_actor_died = 9,     ///< agent -> driver: ActorDeath, an actor's process ended
  tag_request = 10,       ///< agent -> driver: a RequestRoute, then a Request from one of its executors
  tag_reply = 11,         ///< driver -> agent: Reply, the outcome of a Request
  tag_blocked = 12,       ///< agent -> driver: WaitDelta, executors that began (+) or ended (-) a wait in a task
  tag_output = 13,        ///< agent -> driver: Output, whole lines its executors printed
  tag_cancel = 14,        ///< driver -> agent: Cancel, end the executor that runs (or comes to run) a chunk
  tag_object = 15,        ///< driver -> agent: ObjectHead and the bytes of a stored object (fibra::put)
  tag_object_free = 16,   ///< driver -> agent: ObjectFree, a stored object no task will read again
  tag_actor_lane = 17,    ///< agent -> driver: ActorLane, the shared memory of an actor's process
  tag_route_gone = 18,    ///< agent -> driver: RouteGone, an executor or actor process ended (its waits on queues too)
  tag_kept_copy = 19,     ///< agent -> driver: ObjectHead and the bytes of a result it keeps (another host)
  tag_object_fetch = 20,  ///< driver -> agent: ObjectFetch, copy a stored object from a peer agent
  tag_object_missing = 21,  ///< agent -> driver: ObjectFree{id}, a fetch failed: send the bytes
};

/// Tags are of one agent in each block of this many: a process that speaks for several simulated
/// agents (AgentSetup::simulation) addresses agent k of it with tag + k * tags_per_agent, both
/// ways. A real agent is agent 0 of its process: its tags are the ones above.
inline constexpr int tags_per_agent = 64;
static_assert(tag_object_missing < tags_per_agent);

/// The body of a tag_shutdown that retires one agent (Pool::resize) while the others go on; empty
/// at the pool's end.
inline constexpr std::string_view shutdown_retire = "retire";

/// Frames on an executor's socket start with a u64: the frame's length, and its kind in the top
/// byte. Agent -> executor: a task batch, a Reply, or a wake-up (empty: the driver has started to
/// use its lane, src/transport/lane.hpp). Executor -> agent: a result batch (an empty one says "started"), a
/// Request, or a change of its waiting count (a WaitDelta).
enum FrameKind : std::uint64_t {
  frame_batch = 0,    ///< agent -> executor
  frame_reply = 1,    ///< agent -> executor
  frame_wake = 2,     ///< agent -> executor
  frame_results = 0,  ///< executor -> agent
  frame_request = 1,  ///< executor -> agent
  frame_blocked = 2,  ///< executor -> agent
  frame_tell = 3,     ///< executor -> agent: a Request that wants no Reply (a queue's acknowledgement)
};
inline constexpr std::uint64_t frame_kind(std::uint64_t prefix) { return prefix >> 56; }
inline constexpr std::uint64_t frame_length(std::uint64_t prefix) { return prefix & ((std::uint64_t(1) << 56) - 1); }
inline constexpr std::uint64_t frame_prefix(std::uint64_t kind, std::uint64_t length) { return (kind << 56) | length; }

// Types of the public headers that travel inside messages, listed here like the messages.
static_assert(sizeof(int) == 4 && sizeof(long) == 8, "fibra's messages assume an LP64 platform");
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, Resources>
void fields(F&& f, M& m) { f(m.cpus, m.gpus, m.memory_mb); }
/// A call's RetryPolicy, whole: the same list for a task's request and a pool's default.
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, detail::RetryPolicy>
void fields(F&& f, M& m) { f(m.retries, m.retry_exceptions, m.task_timeout_s, m.keep_going, m.need); }

/// Request::actor of a task's Actor<T>::start (its payload an ActorStart) and Actor<T>::get (an
/// ActorFind); the reply's payload is the actor's id.
inline constexpr std::uint64_t actor_start_request = ~std::uint64_t(0);
inline constexpr std::uint64_t actor_find_request = ~std::uint64_t(0) - 1;
struct ActorStart {
  std::string args;  ///< the constructor's, encoded
  std::string class_name;
  int max_restarts = 0;
  Resources need;
  std::string name;
  int max_concurrency = 1;
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, ActorStart>
void fields(F&& f, M& m) { f(m.args, m.class_name, m.max_restarts, m.need, m.name, m.max_concurrency); }
struct ActorFind {
  std::string name;
  std::string class_name;
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, ActorFind>
void fields(F&& f, M& m) { f(m.name, m.class_name); }

/// Request::actor of a task's use of a Queue, Pipe or Event (its payload a ChannelCall); the
/// reply's payload is a ChannelReply, encoded as one std::string.
inline constexpr std::uint64_t channel_request = ~std::uint64_t(0) - 2;
/// Items too large for a lane's ring, in a memfd of process `pid` named `name` on the host both
/// processes share (src/transport/shared_items.hpp): `size` bytes of `count` items laid out with
/// `stride` (detail::ChannelItems).
struct SharedItems {
  std::int64_t pid = 0;
  std::string name;
  std::uint64_t size = 0;
  std::uint64_t count = 0;
  std::uint64_t stride = 0;
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, SharedItems>
void fields(F&& f, M& m) { f(m.pid, m.name, m.size, m.count, m.stride); }
struct ChannelCall {
  detail::ChannelOp op = detail::ChannelOp::info;
  detail::ChannelKind kind = detail::ChannelKind::queue;
  std::uint64_t id = 0;
  std::uint64_t n = 0;
  double timeout_s = -1;    ///< < 0: no limit
  std::uint64_t token = 0;  ///< ack, give_back, recall: the delivery
  std::uint64_t ahead = 0;  ///< a task's get: how many more items it may take along (read ahead)
  detail::ChannelItems items;
  std::optional<SharedItems> shared;  ///< a put's items, when they are too large for the ring
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, ChannelCall>
void fields(F&& f, M& m) { f(m.op, m.kind, m.id, m.n, m.timeout_s, m.token, m.ahead, m.items, m.shared); }
struct ChannelReply {
  detail::ChannelItems items;
  std::uint64_t value = 0;
  std::uint64_t maxsize = 0;
  bool flag = false;
  bool closed = false;
  std::uint64_t token = 0;            ///< items delivered: the task acks this token once it has them
  std::optional<SharedItems> shared;  ///< the items, when they are too large for the ring
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, ChannelReply>
void fields(F&& f, M& m) { f(m.items, m.value, m.maxsize, m.flag, m.closed, m.token, m.shared); }
/// agent -> driver (tag_route_gone): the executor or actor process at `route` ended; what it
/// waited for on queues is no longer wanted, and items it was sent but did not acknowledge go back.
struct RouteGone {
  std::uint64_t route = 0;
  std::vector<std::uint64_t> taken;  ///< of the items it read ahead: ahead_packed(token, taken) (Mailbox::ahead_taken)
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, RouteGone>
void fields(F&& f, M& m) { f(m.route, m.taken); }

/// A stored object (fibra::put, or a task's result kept on its host) that a chunk takes as an
/// argument: its bytes belong at `at` in the chunk's payload (which holds the other arguments
/// around that gap). The executor finds them in the memfd named detail::object_memfd_name(origin,
/// id): its agent's copy, or the driver's own (fd `fd` of process `pid`) on the driver's host.
struct ObjectRef {
  std::uint64_t id = 0;
  std::uint64_t at = 0;
  std::uint64_t size = 0;
  std::int64_t pid = 0;     ///< the driver's
  std::int64_t fd = -1;     ///< in the driver
  std::int64_t origin = 0;  ///< the process that made the memfd (its name's): the driver, or an executor
};
static_assert(std::has_unique_object_representations_v<ObjectRef>, "ObjectRef travels as raw bytes");
/// The reference to a stored object among a call's arguments (ObjectArg: the object, its gap).
inline ObjectRef object_ref(const detail::ObjectArg& a) {
  const detail::StoredObject& o = *a.object;
  return {o.id, a.at, o.bytes.size(), o.pid, o.fd, o.origin};
}

/// A task's call into the pool that runs it (a nested submit or map, an actor's method), sent by
/// its executor through the agent. The driver answers with a Reply of the same id.
struct Request {
  std::uint64_t id = 0;  ///< the executor's own number for it
  std::uint64_t fn = 0;  ///< function (or actor method) id
  detail::CallMode mode = detail::CallMode::tuple;
  std::uint64_t first = 0;  ///< a map's chunk: its first item and how many
  std::uint32_t count = 1;
  std::uint64_t pool = 0;      ///< an actor call: its pool (PoolCore::uid); 0: the task's own pool
  std::uint64_t actor = 0;     ///< an actor call: the actor's id; 0: a task
  std::string payload;         ///< encoded arguments (items)
  detail::RetryPolicy policy;  ///< the call's own (its MapOptions in the task), with what it needs of a worker
  std::string name;            ///< TaskOptions::name ("": its function's)
  /// Values the task stored (fibra::put in a task) among the arguments: gaps in `payload`, as in
  /// TaskHeader::objects, with `pid` and `fd` the executor's; their memfds go with the frame.
  std::vector<ObjectRef> objects;
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, Request>
void fields(F&& f, M& m) {
  f(m.id, m.fn, m.mode, m.first, m.count, m.pool, m.actor, m.payload, m.policy, m.name, m.objects);
}

/// agent -> driver, before the bytes of a Request it passes on (tag_request): the way back to the
/// executor it came from (Reply::route). The agent passes the Request's bytes on as they came.
struct RequestRoute {
  std::uint64_t route = 0;
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, RequestRoute>
void fields(F&& f, M& m) { f(m.route); }

/// agent -> driver: whole lines its executors printed on one stream (1: stdout, 2: stderr), which
/// the driver writes there with one write.
struct Output {
  std::int32_t stream = 1;
  std::string lines;
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, Output>
void fields(F&& f, M& m) { f(m.stream, m.lines); }

/// driver -> agent (tag_cancel): fibra::cancel with force of a chunk this agent holds; the
/// executor that runs it, or starts to within a minute, is killed, and reported as any death.
struct Cancel {
  std::uint64_t chunk = 0;
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, Cancel>
void fields(F&& f, M& m) { f(m.chunk); }

/// executor -> agent (frame_blocked) and agent -> driver (tag_blocked): a change in how many tasks
/// wait inside a task (+1 as a wait begins, -1 as it ends; the agent sums its executors').
struct WaitDelta {
  std::int32_t delta = 0;
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, WaitDelta>
void fields(F&& f, M& m) { f(m.delta); }

/// driver -> agent: a Request's outcome, for the executor `route` names (RequestRoute).
struct Reply {
  std::uint64_t route = 0;
  std::uint64_t id = 0;
  bool ok = true;
  std::string payload;                       ///< the encoded results; or, if !ok, an ErrorText
  std::vector<std::uint32_t> error_offsets;  ///< keep_going calls: items that failed (their results are R{})
  std::vector<std::string> errors;           ///< ... and their errors, each an encoded ErrorText
  bool from_ring = false;  ///< the answer to a call that came through the lane's ring (its agent never saw it)
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, Reply>
void fields(F&& f, M& m) { f(m.route, m.id, m.ok, m.payload, m.error_offsets, m.errors, m.from_ring); }

/// An error sent back to an executor: its fibra type ("fibra::ActorDied") and what() it said.
struct ErrorText {
  std::string type;
  std::string what;
  std::string remote_type;  ///< RemoteError: the task's exception type and message
  std::string remote_message;
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, ErrorText>
void fields(F&& f, M& m) { f(m.type, m.what, m.remote_type, m.remote_message); }

/// Which executor of an agent a Request came from (and its Reply goes to): 1..K for its executors,
/// or an actor's key with this bit set.
inline constexpr std::uint64_t route_actor_bit = std::uint64_t(1) << 63;

/// A message that does not decode (truncated, or not what its tag says).
class Malformed : public Error {
 public:
  using Error::Error;
};

/// driver -> agent, its first message: everything the agent is told (the defaults live in
/// PoolOptions alone).
/// The scale simulation (benchmarks/b9_simulated, docs/architecture.md): one process speaks the
/// wire protocol for `agents` agents of one executor each, running their tasks in-process, so that
/// the driver's side meets 10,000 agents on 2 cores. Zero agents: a real agent.
struct Simulation {
  std::uint32_t agents = 0;        ///< agents this process speaks for (each has its own setup)
  std::uint32_t silent_every = 0;  ///< 0: none; else every silent_every-th of them goes silent...
  double silent_after_s = 0;       ///< ... this long after its first batch: no heartbeat, no result again
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, Simulation>
void fields(F&& f, M& m) { f(m.agents, m.silent_every, m.silent_after_s); }

/// The pool's initializer (PoolOptions::initializer), as its agents hand it to each worker's
/// executor (in FIBRA_INITIALIZER, initializer_text): the function, run as apply_async runs one
/// with these encoded arguments. fn 0: none.
struct Initializer {
  std::uint64_t fn = 0;  ///< FunctionEntry::id
  detail::CallMode mode = detail::CallMode::tuple;
  std::string name;  ///< its registered name, for messages
  std::string args;  ///< encoded as Initializer (fibra/options.hpp) encodes them
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, Initializer>
void fields(F&& f, M& m) { f(m.fn, m.mode, m.name, m.args); }

struct AgentSetup {
  double heartbeat_s = 0;       ///< send a heartbeat after this much silence
  double driver_silence_s = 0;  ///< exit when the driver has been silent this long (orphan guard)
  std::int32_t executors = 1;   ///< executors to supervise
  std::int32_t slot = 0;        ///< its number in the pool ("worker 3 of 4")
  bool prefix_output = false;   ///< start each line its executors print with "(worker 3 pid 1234) "
  /// CUDA_VISIBLE_DEVICES of each executor ("0,1"; "" for none); empty: the pool has no GPUs and
  /// the executors' environment is left alone. Its actors see the first executor's.
  std::vector<std::string> gpus;
  double cpus = 1;             ///< per executor: OMP_NUM_THREADS, unless the environment sets it
  detail::RetryPolicy policy;  ///< the pool's default, for calls its tasks make (policy_text)
  /// written in its executors' lanes: the driver maps only its own (src/transport/lane.hpp); and
  /// the pool its object server serves (bound into each fetch's handshake). Not a secret.
  std::uint64_t lane_nonce = 0;
  std::uint64_t keep_freed_bytes =
      0;                        ///< freed memory each executor keeps (FIBRA_KEEP_FREED, src/common/freed_memory.hpp)
  std::string driver_host;      ///< the driver's host: executors on it store what tasks put (FIBRA_DRIVER_HOST)
  std::int64_t driver_pid = 0;  ///< ... if its /proc entry can be read there (same pid namespace)
  Simulation simulation;        ///< agents: 0 for a real agent
  std::int32_t spare_processes = 0;       ///< PoolOptions::spare_processes
  Initializer initializer;                ///< run by each worker's executor first (FIBRA_INITIALIZER)
  std::uint32_t max_tasks_per_child = 0;  ///< an executor ends after this many chunks (FIBRA_MAX_TASKS); 0: never
  /// The file holding the run's secret (transport/auth.hpp; its path, never its bytes): its object
  /// server and its fetches authenticate with it. Empty: none (no object server).
  std::string secret_file;
  bool encrypt_objects = false;  ///< PoolOptions::encrypt_objects: object copies between agents sealed
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, AgentSetup>
void fields(F&& f, M& m) {
  f(m.heartbeat_s, m.driver_silence_s, m.executors, m.slot, m.prefix_output, m.gpus, m.cpus, m.policy, m.lane_nonce,
    m.keep_freed_bytes, m.driver_host, m.driver_pid, m.simulation, m.spare_processes, m.initializer,
    m.max_tasks_per_child, m.secret_file, m.encrypt_objects);
}

/// A RetryPolicy as text for an environment variable: its encoding (the list above), in hex. An
/// executor gets its pool's defaults in FIBRA_POOL_POLICY. policy_from_text throws Malformed.
std::string policy_text(const detail::RetryPolicy& p);
detail::RetryPolicy policy_from_text(std::string_view text);
/// The same for the pool's initializer, which an executor gets in FIBRA_INITIALIZER.
std::string initializer_text(const Initializer& i);
Initializer initializer_from_text(std::string_view text);

/// agent -> driver, once its executors have started.
struct Hello {
  std::uint64_t fingerprint = 0;  ///< of the agent's registry of remote functions
  std::uint64_t functions = 0;
  std::int64_t pid = 0;
  std::string host;
  std::vector<std::int32_t> lane_fds;  ///< its executors' shared memory, in order: /proc/<pid>/fd/<fd> on its host
  /// Its ObjectServer's TCP port (transport/object_server.hpp): peers copy the objects it holds
  /// from it. 0: none (it could not listen).
  std::uint32_t object_port = 0;
  /// The address its ObjectServer listens on (transport/tcp.hpp's listen_address): what peers
  /// connect to.
  std::string object_host;
  /// It sends the driver a copy of each result its executors keep (tag_kept_copy): the driver
  /// cannot open its memfds (another host).
  bool copies_kept = false;
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, Hello>
void fields(F&& f, M& m) {
  f(m.fingerprint, m.functions, m.pid, m.host, m.lane_fds, m.object_port, m.object_host, m.copies_kept);
}

/// A worker started apart (another mpirun, another Slurm job) -> the driver, over TCP before it
/// connects through MPI (transport/join.hpp): who it is, and whether it runs the same build.
struct JoinHello {
  std::uint64_t fingerprint = 0;  ///< of its registry of remote functions
  std::uint64_t functions = 0;
  std::int64_t pid = 0;
  std::string host;
  std::int32_t executors = 1;  ///< workers it offers to run
  std::string origin;          ///< where it came from, for people ("Slurm job 812", "mpirun")
  double time_left_s = 0;      ///< until its Slurm job's time limit (squeue's %L); 0: none known
  std::uint64_t pool = 0;      ///< the pool it is for (a worker job of Pool::adapt); 0: the oldest running
  std::int32_t ranks = 1;      ///< processes of its launch (an mpirun of several ranks joins as several agents)
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, JoinHello>
void fields(F&& f, M& m) {
  f(m.fingerprint, m.functions, m.pid, m.host, m.executors, m.origin, m.time_left_s, m.pool, m.ranks);
}

/// The driver's answer to a JoinHello: connect now (MPI_Comm_connect to the join file's port), or
/// not, and why.
struct JoinAnswer {
  bool go = false;
  std::string why;   ///< when not go: the reason, for the joiner's last words
  std::string port;  ///< when go: the MPI port opened for this joiner alone, to MPI_Comm_connect to
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, JoinAnswer>
void fields(F&& f, M& m) { f(m.go, m.why, m.port); }

/// Messages on a join connection (transport/join.hpp: a JoinHello, then a JoinAnswer) are sealed
/// frames of at most max_join_message bytes.
inline constexpr std::uint32_t max_join_message = 64 * 1024;

/// One chunk of a task batch (its payload follows it).

struct TaskHeader {
  std::uint64_t chunk = 0;    ///< driver-wide chunk id
  std::uint32_t attempt = 0;  ///< 1 for the first try
  std::uint64_t fn = 0;       ///< function id (hash of its registered name)
  detail::CallMode mode = detail::CallMode::single;
  std::uint64_t first = 0;          ///< index of the chunk's first item in its call
  std::uint32_t count = 0;          ///< items in the chunk
  double timeout_s = 0;             ///< one item may run this long before the agent kills the executor; 0: none
  bool keep_going = false;          ///< collect item failures and go on (RunControl::keep_going)
  std::vector<std::uint32_t> skip;  ///< offsets of poison items not to run
  /// 0: any executor of the agent; else the key of the actor (one start of it) whose process runs
  /// it. A batch holds calls of one actor only.
  std::uint64_t actor = 0;
  std::vector<ObjectRef> objects;  ///< stored objects among its arguments (fibra::put), by `at`
  /// An actor's call: how many of its process's calls may run at once (ActorOptions::max_concurrency).
  std::uint32_t concurrency = 1;
  /// A task on the driver's host: a result that encodes to at least this many bytes is kept in a
  /// memfd on this host (Status::kept) rather than sent (PoolOptions::keep_results_from); 0: never.
  std::uint64_t keep_from = 0;
  std::uint64_t keep_id = 0;  ///< ... under this object id (the driver's, unique in its run)
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, TaskHeader>
void fields(F&& f, M& h) {
  f(h.chunk, h.attempt, h.fn, h.mode, h.first, h.count, h.timeout_s, h.keep_going, h.skip, h.actor, h.objects,
    h.concurrency, h.keep_from, h.keep_id);
}

/// driver -> agent (tag_object): a stored object, sent once to an agent whose executors cannot
/// map the driver's memory (another host, no lanes); its `size` bytes follow in the message. The
/// agent keeps them in a memfd of its own until ObjectFree.
struct ObjectHead {
  std::uint64_t id = 0;
  std::int64_t origin = 0;  ///< ObjectRef::origin: the memfd's name has it
  std::uint64_t size = 0;
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, ObjectHead>
void fields(F&& f, M& m) { f(m.id, m.origin, m.size); }

/// A message of an ObjectHead and the object's bytes (tag_object, tag_kept_copy): the head goes to
/// `h`, the bytes are returned (a view into `message`). Throws Malformed if they are not `h.size`.
std::string_view object_bytes(std::string_view message, ObjectHead& h);

/// driver -> agent (tag_object_fetch): instead of a stored object's bytes, where to copy it from:
/// the ObjectServer of a peer agent that holds it (Hello::object_port). Sent before the first
/// batch that takes it; the agent holds its batches until the copy is made, and if it cannot be,
/// says so (tag_object_missing) and is sent the bytes (tag_object).
struct ObjectFetch {
  ObjectHead head;
  std::string host;
  std::uint32_t port = 0;
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, ObjectFetch>
void fields(F&& f, M& m) { f(m.head.id, m.head.origin, m.head.size, m.host, m.port); }

/// A fetch from a peer's ObjectServer (transport/object_server.hpp), one object per TCP
/// connection, sent sealed once the connection is authenticated (transport/auth.hpp): the object's
/// name (a u32 length, at most max_object_name, then its bytes), how long to wait for it (u64
/// milliseconds), and whether its bytes are to be encrypted (u8).
struct ObjectRequest {
  std::string name;           ///< its memfd's (detail::object_memfd_name); a longer one than max_object_name is refused
  std::uint64_t wait_ms = 0;  ///< how long the server waits for it to be offered (at most a minute)
  bool encrypted = false;     ///< its bytes sealed (PoolOptions::encrypt_objects), not only authenticated
};
inline constexpr std::uint32_t max_object_name = 256;
/// A request's sealed message is at most this long (a name of max_object_name and the rest).
inline constexpr std::size_t max_object_request = 512;
std::string encode_object_request(const ObjectRequest& r);
/// A whole request; throws Malformed if it is cut short, its name is too long, or bytes follow it.
ObjectRequest decode_object_request(std::string_view bytes);

/// The ObjectServer's answer, sealed: a u64, the object's size (its bytes follow), or all ones: not
/// held; then a u8, whether the bytes come sealed (ObjectRequest::encrypted, or the server's pool
/// asks it). Unsealed bytes are followed by a sealed message of their Poly1305 tag (auth::Session::Digest).
enum class ObjectAnswer : std::uint8_t { held, not_held };
struct ObjectReply {
  ObjectAnswer answer = ObjectAnswer::held;
  std::uint64_t size = 0;  ///< held: the object's bytes, which follow the reply
  bool encrypted = false;
};
inline constexpr std::size_t object_reply_bytes = sizeof(std::uint64_t) + 1;
std::string encode_object_reply(const ObjectReply& r);
/// Throws Malformed if `bytes` are not object_reply_bytes, or its last byte is not 0 or 1.
ObjectReply decode_object_reply(std::string_view bytes);

/// The handshake on fibra's own TCP listeners (transport/auth.hpp), before any other byte: the
/// client sends an AuthHello (auth_hello_bytes); the server answers its nonce, its proof and its
/// stream's header (auth_challenge_bytes); the client sends its proof and its stream's header
/// (auth_answer_bytes). From then on each side's messages are sealed frames (below).
enum class AuthRole : std::uint8_t { join = 1, object = 2 };
inline constexpr std::uint32_t auth_magic = 0x61726266;  // "fbra", little-endian
inline constexpr std::uint16_t auth_version = 1;
inline constexpr std::size_t auth_nonce_bytes = 32, auth_proof_bytes = 32, auth_header_bytes = 24;
struct AuthHello {
  std::uint16_t version = auth_version;
  AuthRole role = AuthRole::join;
  std::uint64_t pool = 0;  ///< the pool it is for (the object server's pool; 0 for joins)
  std::string nonce;       ///< auth_nonce_bytes, fresh
};
inline constexpr std::size_t auth_hello_bytes = 4 + 2 + 1 + 1 + 8 + auth_nonce_bytes;
inline constexpr std::size_t auth_challenge_bytes = auth_nonce_bytes + auth_proof_bytes + auth_header_bytes;
inline constexpr std::size_t auth_answer_bytes = auth_proof_bytes + auth_header_bytes;
std::string encode_auth_hello(const AuthHello& h);
/// Throws Malformed if `bytes` are not auth_hello_bytes, or do not start with auth_magic.
AuthHello decode_auth_hello(std::string_view bytes);

/// Sealed messages (and, before the handshake had them, join messages) are framed: a u32 length
/// (frame_head bytes), then that many bytes, at most the reader's bound. A reader reads the head,
/// then the length it announces if it is within its bound, and no more.
inline constexpr std::size_t frame_head = sizeof(std::uint32_t);
/// The message framed; nullopt if it is longer than `most` (it is not sent).
std::optional<std::string> frame(std::string_view message, std::size_t most);
/// The length a frame's head announces; throws Malformed if `head` is not frame_head bytes or
/// announces more than `most`.
std::uint32_t frame_length(std::string_view head, std::size_t most);

/// Payload of a `kept` result: a task's result left in a memfd of its executor's, named
/// detail::object_memfd_name(executor pid, id), whose descriptor went to the agent with the frame
/// (SCM_RIGHTS). The agent keeps it until ObjectFree; the driver opens it through /proc.
struct Kept {
  std::uint64_t id = 0;  ///< TaskHeader::keep_id
  std::uint64_t size = 0;
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, Kept>
void fields(F&& f, M& m) { f(m.id, m.size); }

/// agent -> driver (tag_actor_lane), when it starts an actor's process: the descriptor of that
/// process's shared memory, which a driver on the same host maps to hand it calls and take its
/// results without MPI and the agent (as executors' lanes, listed in Hello::lane_fds).
struct ActorLane {
  std::uint64_t actor = 0;  ///< TaskHeader::actor (the key of this start)
  std::int64_t fd = -1;
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, ActorLane>
void fields(F&& f, M& m) { f(m.actor, m.fd); }

/// driver -> agent (tag_object_free): the object's last reference in the driver is gone. For an
/// object its executors handed it (a kept result, a value a task stored), `handed` is how many
/// times the driver saw it handed over since its last free (AgentObjects::hold_handed): an agent that was
/// handed it more often (a task sent it again meanwhile) keeps it, since the driver will map it
/// again and free it again.
struct ObjectFree {
  std::uint64_t id = 0;
  std::uint64_t handed = 0;
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, ObjectFree>
void fields(F&& f, M& m) { f(m.id, m.handed); }

/// driver -> agent: the actor's last handle is gone; its process ends once its calls have run.
struct ActorEnd {
  std::uint64_t actor = 0;  ///< TaskHeader::actor
  /// 0: its last handle is gone (it ends once its calls are done); else a signal to send its
  /// process now (Process::terminate, kill), SIGTERM followed by SIGKILL 2 s later.
  std::int32_t signal = 0;
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, ActorEnd>
void fields(F&& f, M& m) { f(m.actor, m.signal); }

/// agent -> driver: the process of an actor ended (crash, time limit, kill). Sent instead of a
/// report of its calls: the driver fails every call it had sent to that process.
struct ActorDeath {
  std::uint64_t actor = 0;  ///< TaskHeader::actor
  std::uint64_t chunk = 0;  ///< the call it was running (0: between calls)
  std::int64_t pid = 0;
  std::string why;  ///< "killed by signal 9 (Killed)", "ran for 2.0 s, past its time limit ..."
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, ActorDeath>
void fields(F&& f, M& m) { f(m.actor, m.chunk, m.pid, m.why); }

enum class Status : std::uint8_t {
  ok = 0,          ///< payload: encoded results
  raised = 1,      ///< payload: a Failure (a task threw)
  crashed = 2,     ///< payload: a Failure saying how the executor died while running this chunk
  not_run = 3,     ///< the executor died before starting this chunk: run it again, not an attempt
  unknown_fn = 4,  ///< payload: message (the function is not registered in this worker)
  timed_out = 5,   ///< payload: like crashed; an item ran past the chunk's time limit and was killed
  partial = 6,     ///< payload: a Partial (keep_going chunks whose items failed or were skipped)
  kept = 7,        ///< payload: a Kept (the result stays in shared memory on the worker's host)
  /// payload: an ItemFailure (offset 0) of the pool's initializer, which threw in this executor:
  /// it runs no task (PoolOptions::initializer)
  init_failed = 8,
};

/// One chunk of a result batch (its payload follows it).
struct ResultHeader {
  std::uint64_t chunk = 0;
  std::uint32_t attempt = 0;
  Status status = Status::ok;
  std::uint64_t run_ns = 0;  ///< how long the executor ran the chunk (0 in the agent's reports)
  /// When it began, in microseconds since the Unix epoch on the executor's clock (0 in the
  /// agent's reports): the event log places the run on its executor's row.
  std::int64_t start_us = 0;
  /// Of run_ns, how long its tasks waited on what they asked for (Futures of nested calls, queues,
  /// pipes: help_while_waiting in the executor), not counting nested chunks run meanwhile.
  std::uint64_t wait_ns = 0;
};
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, ResultHeader>
void fields(F&& f, M& h) { f(h.chunk, h.attempt, h.status, h.run_ns, h.start_us, h.wait_ns); }

/// Payload of a `raised`, `crashed` or `timed_out` result: detail::ItemFailure.
template <class F, class M>
requires std::is_same_v<std::remove_const_t<M>, detail::ItemFailure>
void fields(F&& f, M& x) { f(x.offset, x.type, x.message); }

/// ItemFailure::offset of a crash outside any item of the chunk (the executor died between chunks).
inline constexpr std::uint32_t unknown_item = 0xffffffffu;

/// A type with a `fields` list above: written field by field, also as a member of another message.
template <class M>
concept Listed = requires(M& m) {
  fields([](auto&...) {}, m);
};

template <class M>
void put(detail::Writer& w, const M& m);
template <class M>
void get_fields(detail::Reader& r, M& m);
/// An optional message (std::optional of a type with a `fields` list): a flag, then its fields.
template <class T>
struct optional_listed : std::false_type {};
template <Listed T>
struct optional_listed<std::optional<T>> : std::true_type {};
template <class T>
void put_one(detail::Writer& w, const T& x) {
  if constexpr (Listed<T>) {
    put(w, x);
  } else if constexpr (optional_listed<T>::value) {
    w.pod<std::uint8_t>(x ? 1 : 0);
    if (x) put(w, *x);
  } else {
    detail::encode(w, x);
  }
}
template <class T>
void get_one(detail::Reader& r, T& x) {
  if constexpr (Listed<T>) {
    get_fields(r, x);
  } else if constexpr (optional_listed<T>::value) {
    x.reset();
    if (r.pod<std::uint8_t>() != 0) get_fields(r, x.emplace());
  } else {
    detail::decode(r, x);
  }
}

/// Writes a message's fields.
template <class M>
void put(detail::Writer& w, const M& m) {
  fields([&](const auto&... x) { (put_one(w, x), ...); }, m);
}
template <class M>
void get_fields(detail::Reader& r, M& m) {
  fields([&](auto&... x) { (get_one(r, x), ...); }, m);
}
/// Reads a message's fields; throws Malformed.
template <class M>
void get(detail::Reader& r, M& m) {
  try {
    get_fields(r, m);
  } catch (const Malformed&) {
    throw;
  } catch (const Error& e) {
    throw Malformed(std::string("fibra: a malformed message: ") + e.what());
  }
}
template <class M>
std::string encode(const M& m) {
  std::string s;
  detail::Writer w(s);
  put(w, m);
  return s;
}
/// A channel's answer as the payload of a call's Reply (what encode_value(encode(r)) makes: the
/// encoded reply as a std::string), in one buffer of its size: a get's items are copied once.
inline std::string channel_payload(const ChannelReply& r) {
  std::string s = detail::scratch_buffer(r.items.bytes().size() + 128);
  s.append(sizeof(std::uint64_t), '\0');
  detail::Writer w(s);
  put(w, r);
  const std::uint64_t n = s.size() - sizeof n;
  std::memcpy(s.data(), &n, sizeof n);
  return s;
}
template <class M>
M decode(std::string_view s) {
  detail::Reader r(s);
  M m;
  get(r, m);
  return m;
}
/// decode, and refuses bytes left over (a message of a fixed size, such as a WaitDelta).
template <class M>
M decode_whole(std::string_view s) {
  detail::Reader r(s);
  M m;
  get(r, m);
  if (r.left() != 0)
    throw Malformed("fibra: a malformed message: " + std::to_string(r.left()) + " bytes after its end, of " +
                    std::to_string(s.size()));
  return m;
}

/// tag_request: the route, then a Request's bytes as the executor encoded them (not decoded by
/// the agent, which only passes them on).
std::string routed_request(std::uint64_t route, std::string_view request);
struct RoutedRequest {
  std::uint64_t route = 0;
  Request request;
};
RoutedRequest parse_routed_request(std::string_view message);

// ---- task batches: u32 count, then per chunk: TaskHeader, u64 payload bytes, padding, payload ----
// (The padding, zeros, starts each payload at a multiple of 16 bytes from the message's start.)
std::string begin_batch();
void set_count(std::string& batch, std::uint32_t n);
/// Appends one chunk to a batch under construction.
void append_task(std::string& batch, const TaskHeader& h, std::string_view payload);
/// Appends a chunk's header only; its `payload_bytes` bytes of payload must follow it in the message
/// (sent from where they are, see mpi::SendQueue::send of mpi::Pieces), in which `bodies_before`
/// bytes of payloads come before `batch`'s end.
void append_task_head(std::string& batch, const TaskHeader& h, std::uint64_t payload_bytes,
                      std::size_t bodies_before = 0);

struct TaskView {
  TaskHeader header;
  std::string_view payload;
};
std::vector<TaskView> parse_tasks(std::string_view batch);
/// TaskHeader::actor of a batch's first chunk (0 for an empty batch); throws Malformed.
std::uint64_t batch_actor(std::string_view batch);

// ---- result batches: u32 count, i64 executor pid, then per chunk: ResultHeader, u64 bytes,
// padding, payload (as in task batches)
std::string begin_results(std::int64_t executor_pid);
/// The number of results in a batch (0: nothing to send).
std::uint32_t result_count(std::string_view batch);
void append_result(std::string& batch, const ResultHeader& h, std::string_view payload);
/// Starts a result whose payload the caller appends to `batch` itself (no copy of it); returns
/// where the result starts, for close_result.
std::size_t open_result(std::string& batch, const ResultHeader& h);
/// Ends the result opened at `at`: writes its header again (status and run time may have changed)
/// with the length of what was appended since, and counts it in the batch.
void close_result(std::string& batch, std::size_t at, const ResultHeader& h);

struct ResultView {
  ResultHeader header;
  std::string_view payload;
};
struct ResultBatch {
  std::int64_t executor_pid = 0;
  std::vector<ResultView> results;
};
ResultBatch parse_results(std::string_view batch);

/// Payload of a `partial` result: the failed items, then the results of all items (R{} for failed ones).
std::string encode_partial(const std::vector<detail::ItemFailure>& failures, std::string_view results);
struct Partial {
  std::vector<detail::ItemFailure> failures;
  std::string_view results;
};
Partial decode_partial(std::string_view s);

}  // namespace fibra::wire
