// The pool as a task sees it (executor_core, executor.hpp).
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fibra/error.hpp"
#include "fibra/future.hpp"
#include "common/env.hpp"
#include "executor/executor.hpp"
#include "executor/inbox.hpp"
#include "executor/state.hpp"
#include "transport/frame_reader.hpp"

namespace fibra::detail::exec {

namespace {

// The pool as a task sees it: what it submits (fibra::submit, a map) and the actors it calls go to
// the driver as requests, through the agent; `uid` names the pool of the actors it calls.
class ExecutorCore final : public PoolCore {
 public:
  explicit ExecutorCore(std::uint64_t uid) : uid_(uid) {}
  void submit(const std::shared_ptr<JobState>& job, std::uint64_t first, std::uint32_t count,
              std::string payload) override {
    wire::Request r = request_for(*job, std::move(payload));
    r.first = first;
    r.count = count;
    const std::vector<int> fds = add_objects(*job, r);
    g_executor.inbox->request(std::move(r), job, fds);
  }
  void call_actor(std::uint64_t actor, const std::shared_ptr<JobState>& job, std::string payload) override {
    wire::Request r = request_for(*job, std::move(payload));
    r.pool = uid_;
    r.actor = actor;
    const std::vector<int> fds = add_objects(*job, r);
    g_executor.inbox->request(std::move(r), job, fds);
  }
  // Starting an actor, or finding one by name, asks the driver and waits for its id (running the
  // batches that come meanwhile, as any wait in a task does).
  std::uint64_t start_actor(const FunctionEntry& ctor, std::string args, ActorSettings s) override {
    auto job = std::make_shared<JobState>(ctor, CallMode::tuple, default_policy());
    job->set_name("Actor<" + s.class_name + ">::start");
    wire::Request r = request_for(*job, wire::encode(wire::ActorStart{std::move(args), s.class_name, s.max_restarts,
                                                                      s.need, s.name, s.max_concurrency}));
    return ask_for_actor(std::move(r), wire::actor_start_request, job);
  }
  std::uint64_t find_actor(const std::string& name, const std::string& class_name, bool) override {
    auto job = std::make_shared<JobState>(actor_find_entry(), CallMode::tuple, default_policy());
    job->set_name("Actor<" + class_name + ">::get(\"" + name + "\")");
    return ask_for_actor(request_for(*job, wire::encode(wire::ActorFind{name, class_name})), wire::actor_find_request,
                         job);
  }
  bool owns_handles() const override { return false; }
  // The pool's defaults (PoolOptions), which its agent gave this executor.
  RetryPolicy default_policy() const override {
    static const RetryPolicy pool = [] {  // read once: the variable is set when the executor starts
      const char* p = env::raw("FIBRA_POOL_POLICY");
      return p ? wire::policy_from_text(p) : RetryPolicy{};
    }();
    return pool;
  }
  int size() const override { return 1; }
  void resize(int) override { throw ConfigError("fibra: a task cannot resize the pool it runs in"); }
  void close() override {}
  void join() override {}
  void terminate() override {}
  bool closed() const override { return false; }
  // uid 0 is the pool that runs this task; a handle of one of its actors that travels (to the
  // driver, say) names it by its own uid, which the driver said when the actor was started or found.
  std::uint64_t uid() const override { return uid_ != 0 ? uid_ : own_pool_uid().load(); }

 private:
  // A call of `job` as a request: its function, and the policy and resources it asks for.
  static wire::Request request_for(const JobState& job, std::string payload) {
    wire::Request r;
    r.fn = job.fn().id;
    r.mode = job.mode();
    r.payload = std::move(payload);
    r.policy = job.policy();
    if (job.name() != job.fn().name) r.name = job.name();
    return r;
  }
  // The values the task stored (fibra::put) among the call's arguments: gaps in its payload, whose
  // memfds go with the request (the agent holds them, and the driver maps them from there).
  static std::vector<int> add_objects(const JobState& job, wire::Request& r) {
    std::vector<int> fds;
    for (const ObjectArg& a : job.objects()) {
      if (fds.size() == FrameReader::max_fds)
        throw ConfigError("fibra: a call takes more than " + std::to_string(FrameReader::max_fds) +
                          " values the task stored (fibra::put); pass fewer, or put them together in one");
      r.objects.push_back(wire::object_ref(a));
      fds.push_back(a.object->fd);
    }
    return fds;
  }
  std::uint64_t ask_for_actor(wire::Request r, std::uint64_t what, const std::shared_ptr<JobState>& job) {
    r.pool = uid_;
    r.actor = what;
    g_executor.inbox->request(std::move(r), job);
    const auto [id, pool] = Future<std::pair<std::uint64_t, std::uint64_t>>(job).get();
    if (uid_ == 0) own_pool_uid().store(pool);  // a handle sent on names the pool by it
    return id;
  }
  // The uid of the pool that runs this executor's tasks, once a reply said it (0: not yet).
  static std::atomic<std::uint64_t>& own_pool_uid() {
    static std::atomic<std::uint64_t> u{0};
    return u;
  }
  std::uint64_t uid_;
};

}  // namespace

}  // namespace fibra::detail::exec

namespace fibra::detail {

std::shared_ptr<PoolCore> executor_core(std::uint64_t uid) {
  using exec::ExecutorCore;
  static auto own = std::make_shared<ExecutorCore>(0);
  return uid == 0 ? std::shared_ptr<PoolCore>(own) : std::make_shared<ExecutorCore>(uid);
}

}  // namespace fibra::detail
