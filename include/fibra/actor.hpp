// fibra/actor.hpp: fibra::Actor<T>, an object of a registered class living in a process of its own
// on a worker, whose method calls return futures (Ray's actors, Fiber's remote objects).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "fibra/detail/call_checks.hpp"
#include "fibra/detail/codec.hpp"
#include "fibra/detail/core.hpp"
#include "fibra/detail/deps.hpp"
#include "fibra/detail/registry.hpp"
#include "fibra/error.hpp"
#include "fibra/future.hpp"
#include "fibra/pool.hpp"
#include "fibra/remote.hpp"
#include "fibra/shared.hpp"
#include "fibra/tasks.hpp"

namespace fibra {

namespace detail {
/// ActorOptions::name, the old spelling of ActorOptions::key, kept for one release: code that sets
/// it still compiles, warned to use the new one (TaskOptions::name and ProcessOptions::name are
/// labels; an actor's is the key Actor<T>::get finds it by).
struct OldActorName {
  std::string value;
  OldActorName() = default;
  [[deprecated("ActorOptions::name is now ActorOptions::key (a name elsewhere in fibra is a label)")]] OldActorName(
      std::string key)
      : value(std::move(key)) {}
  [[deprecated("ActorOptions::name is now ActorOptions::key (a name elsewhere in fibra is a label)")]] OldActorName(
      const char* key)
      : value(key) {}
};
}  // namespace detail

/// @brief How an actor is kept, and where.
struct ActorOptions {
  /// When its process dies (crash, kill, its worker lost), start it again from its constructor
  /// this many times; the calls it held fail with ActorDied either way. 0: it stays dead.
  int max_restarts = 0;
  /// Placed on a worker that offers at least this much; its process sees that worker's GPUs. (It
  /// does not take them from the tasks that run there.)
  Resources resources{};
  /// A key to find it by on its pool (Actor<T>::get, as Ray's get_actor finds a named actor),
  /// unique among the pool's live actors; "": none. Its process ends when the last handle, from
  /// start or get, goes.
  std::string key{};
  /// Deprecated: key, used when that one is not set. In the place it had, so that
  /// `{.max_restarts = 1, .name = "ps"}` still compiles (with a warning).
  detail::OldActorName name{};
  /// How many of its calls its process may run at once, each on a thread of its own (Ray's
  /// threaded actors): its methods must then be safe to run together, and calls may end in any
  /// order. 1 (the default): one at a time, in the order they were made.
  int max_concurrency = 1;
  /// The pool it runs beside; nullptr: fibra::default_pool(). (As ProcessOptions::pool and
  /// tune::RunOptions::pool: the one way to choose a pool for an actor, a process or a tune run.)
  Pool* pool = nullptr;
};

namespace detail {

/// The object the actor's process holds, as a C (throws if it holds none, or another class).
template <class C>
C& actor_object() {
  auto& s = actor_slot();
  if (!s.object) throw Error("fibra: this actor's process holds no object (its constructor did not run in it)");
  if (std::strcmp(s.type, typeid(C).name()) != 0)
    throw Error("fibra: this actor's process holds a " + demangle(s.type) + ", not a " + demangle(typeid(C).name()));
  return *static_cast<C*>(s.object);
}

/// FIBRA_ACTOR(T, P...): T's constructor from P..., registered as a function named "T(P...)".
template <class T, class... P>
struct ActorClass {
  static_assert(std::is_class_v<T>, "fibra: FIBRA_ACTOR takes a class");
  static_assert(std::is_constructible_v<T, P...>,
                "fibra: FIBRA_ACTOR(T, P...) names parameter types that T has no constructor for");
  static_assert((check_parameter<P>() && ...));
  using Params = std::tuple<stored_t<P>...>;
  static constexpr char tag = 0;  // its address identifies the entry

  static std::string name() {
    std::string n = demangle(typeid(T).name()) + "(";
    [[maybe_unused]] const char* sep = "";
    ((n += sep, n += demangle(typeid(stored_t<P>).name()), sep = ", "), ...);
    return n + ")";
  }

  static bool run(std::string_view in, std::uint32_t count, std::string& out, ItemFailure& fail, Cursor& cursor,
                  const RunControl& ctl) {
    return Items<bool>::template run_encoded<Params>(in, count, out, fail, cursor, ctl, [](Params&& a) -> bool {
      auto& s = actor_slot();
      if (s.object) {  // a second constructor in one process: the old object goes first
        s.destroy(s.object);
        s.object = nullptr;
      }
      T* obj = std::apply([](auto&&... x) { return new T(std::move(x)...); }, std::move(a));
      s.object = obj;
      s.destroy = [](void* p) { delete static_cast<T*>(p); };
      s.type = typeid(T).name();
      return true;
    });
  }

  static bool add() noexcept {
    FunctionEntry e;
    e.name = name();
    e.id = hash_name(e.name);
    e.address = &tag;
    e.signature = typeid(T * (P...)).name();
    e.run_tuple = &run;
    return add_function(std::move(e));
  }
};

template <class M>
struct method_traits {
  static constexpr bool method = false;
};
#define FIBRA_DETAIL_METHOD_TRAITS(QUALIFIERS)                     \
  template <class R, class C, class... A>                          \
  struct method_traits<R (C::*)(A...) QUALIFIERS> {                \
    static constexpr bool method = true;                           \
    using Class = C;                                               \
    using Return = R;                                              \
    using Params = std::tuple<stored_t<A>...>;                     \
    static constexpr bool checked = (check_parameter<A>() && ...); \
  };
FIBRA_DETAIL_METHOD_TRAITS()
FIBRA_DETAIL_METHOD_TRAITS(const)
FIBRA_DETAIL_METHOD_TRAITS(noexcept)
FIBRA_DETAIL_METHOD_TRAITS(const noexcept)
#undef FIBRA_DETAIL_METHOD_TRAITS

/// The key by which a driver finds a method's entry: the member pointer's bytes and the actor's
/// class (a method a class inherits is registered, and called, as that class's).
template <class T, class M>
std::string method_key(const M& m) {
  return std::string(reinterpret_cast<const char*>(&m), sizeof m) + typeid(T).name();
}

/// FIBRA_ACTOR_METHOD(T, m): &T::m on an actor of class T, registered as a function named "T::m".
template <class T, auto M>
struct ActorMethod {
  using Tr = method_traits<decltype(M)>;
  static_assert(Tr::method, "fibra: FIBRA_ACTOR_METHOD takes a class and one of its (non-static) member functions");
  using C = T;  // the actor's class, which has the method (perhaps from a base)
  using R = typename Tr::Return;
  using Params = typename Tr::Params;
  using Result = std::conditional_t<std::is_void_v<R>, Unit, stored_t<R>>;
  static_assert(Tr::checked);
  static_assert(!std::is_pointer_v<Result>,
                "fibra: an actor method cannot return a pointer: it would point into the actor's memory");
  static constexpr char tag = 0;

  static bool run(std::string_view in, std::uint32_t count, std::string& out, ItemFailure& fail, Cursor& cursor,
                  const RunControl& ctl) {
    return Items<Result>::template run_encoded<Params>(in, count, out, fail, cursor, ctl, [](Params&& a) -> Result {
      C& obj = actor_object<C>();
      if constexpr (std::is_void_v<R>) {
        std::apply([&](auto&&... x) { (obj.*M)(std::move(x)...); }, std::move(a));
        return Unit{};
      } else {
        return std::apply([&](auto&&... x) -> Result { return (obj.*M)(std::move(x)...); }, std::move(a));
      }
    });
  }

  static bool add(const char* name) noexcept {
    FunctionEntry e;
    e.name = name;
    e.id = hash_name(e.name);
    e.address = &tag;
    e.signature = typeid(decltype(M)).name();
    e.run_tuple = &run;
    e.method_key = method_key<T>(M);
    return add_function(std::move(e));
  }
};

}  // namespace detail

/// @brief A handle to an object of class T that lives in a process of its own on one of a pool's
/// workers. Each method call returns a Future; calls made through one handle (and its copies) run
/// in the order made, one at a time, on the same object, whose state lasts as long as the actor.
/// The process ends when the last copy of the handle is dropped (after the calls already made).
///
/// @code
///   class Counter { public: explicit Counter(int start); int add(int d); };
///   FIBRA_ACTOR(Counter, int);         // the constructor it is started with
///   FIBRA_ACTOR_METHOD(Counter, add);  // each method called remotely
///
///   auto c = fibra::Actor<Counter>::start(10);
///   fibra::Future<int> f = c.call(&Counter::add, 5);   // f.get() == 15
/// @endcode
/// If the actor's process dies, the calls it held fail with ActorDied; with
/// ActorOptions::max_restarts it starts again from its constructor and later calls succeed.
template <class T>
class Actor {
 public:
  Actor() = default;

  /// @brief Starts an actor on the default pool (fibra::default_pool), constructed from `args`.
  template <class... Args>
  requires(sizeof...(Args) == 0 ||
           !std::is_same_v<std::remove_cvref_t<std::tuple_element_t<0, std::tuple<Args..., int>>>,
                           ActorOptions>) static Actor start(Args&&... args) {
    return start_in(default_pool(), ActorOptions{}, std::forward<Args>(args)...);
  }
  /// @brief Starts an actor with options, on options.pool (its process runs beside that pool's
  /// workers), else the default pool.
  /// @throws ConfigError if no FIBRA_ACTOR registers a constructor of T for these argument types.
  template <class... Args>
  static Actor start(const ActorOptions& options, Args&&... args) {
    return start_in(options.pool ? *options.pool : default_pool(), options, std::forward<Args>(args)...);
  }
  /// @brief Deprecated: start() with ActorOptions::pool.
  template <class... Args>
  [[deprecated(
      "Actor<T>::start_on(pool, options, ...) is now Actor<T>::start(options with .pool = &pool, ...)")]] static Actor
  start_on(Pool& pool, const ActorOptions& options, Args&&... args) {
    return start_in(pool, options, std::forward<Args>(args)...);
  }

  /// @brief A handle to the live actor started with ActorOptions::key == `key` on `pool`, or the
  ///        default pool (as Ray's `ray.get_actor`); it keeps the actor alive as the first handle does.
  /// @throws ConfigError if no live actor has that key, or it is not a T.
  static Actor get(const std::string& key, Pool* pool = nullptr) {
    Pool& p = pool ? *pool : default_pool();
    auto core = p.live_core();
    Actor a;
    a.h_ = std::make_shared<Handle>();
    a.h_->core = core;
    a.h_->owner = core->owns_handles();
    a.h_->id = core->find_actor(key, detail::demangle(typeid(T).name()), a.h_->owner);
    return a;
  }
  /// @brief Deprecated: get(key, &pool).
  [[deprecated("Actor<T>::get_on(pool, key) is now Actor<T>::get(key, &pool)")]] static Actor get_on(
      Pool& pool, const std::string& key) {
    return get(key, &pool);
  }

 private:
  template <class... Args>
  static Actor start_in(Pool& pool, const ActorOptions& options, Args&&... args) {
    using Ctor = detail::ActorClass<T, std::decay_t<Args>...>;
    const std::string name = Ctor::name();
    const detail::FunctionEntry* ctor = detail::function_by_id(detail::hash_name(name));
    if (!ctor) {
      std::string known;
      const std::string prefix = detail::demangle(typeid(T).name()) + "(";
      for (const auto& n : detail::registry_names())
        if (n.rfind(prefix, 0) == 0) known += (known.empty() ? "" : ", ") + n;
      const std::string types = name.substr(prefix.size(), name.size() - prefix.size() - 1);
      throw ConfigError(
          "fibra: Actor<" + detail::demangle(typeid(T).name()) + ">::start was given arguments for " + name +
          ", which is not registered (" + (known.empty() ? std::string("no constructor is") : "registered: " + known) +
          "): add FIBRA_ACTOR(" + detail::demangle(typeid(T).name()) + (types.empty() ? "" : ", ") + types +
          ") at namespace scope, or pass arguments of exactly the registered types (3L for a long)");
    }
    if (options.max_restarts < 0) throw ConfigError("fibra: ActorOptions::max_restarts cannot be negative");
    if (options.max_concurrency < 1 || options.max_concurrency > detail::max_actor_concurrency)
      throw ConfigError("fibra: ActorOptions::max_concurrency is " + std::to_string(options.max_concurrency) +
                        "; it is how many calls of the actor may run at once, from 1 to " +
                        std::to_string(detail::max_actor_concurrency));
    std::string payload;
    detail::Writer w(payload);
    detail::encode(w, typename Ctor::Params(std::forward<Args>(args)...));
    auto core = pool.live_core();
    Actor a;
    a.h_ = std::make_shared<Handle>();
    a.h_->core = core;
    core->check_need(options.resources, "actor " + detail::demangle(typeid(T).name()));
    a.h_->owner = core->owns_handles();  // inside a task: the actor outlives the task's handle
    a.h_->id = core->start_actor(
        *ctor, std::move(payload),
        detail::ActorSettings{detail::demangle(typeid(T).name()), options.max_restarts, options.resources,
                              options.key.empty() ? options.name.value : options.key, a.h_->owner,
                              options.max_concurrency});
    return a;
  }

 public:
  /// @brief Calls `method` on the actor's object with `args`; the Future holds what it returns.
  /// @throws ConfigError if the method is not registered with FIBRA_ACTOR_METHOD.
  template <class M, class... Args>
  auto call(M method, Args&&... args) const {
    using Tr = detail::method_traits<M>;
    static_assert(Tr::method, "fibra: Actor::call takes a member function pointer, as &Class::method");
    if constexpr (Tr::method) {
      static_assert(std::is_base_of_v<typename Tr::Class, T>,
                    "fibra: Actor<T>::call was given a method of another class");
      using Args_t = typename Tr::Params;
      static_assert(std::tuple_size_v<Args_t> == sizeof...(Args),
                    "fibra: Actor::call got a different number of arguments than the method takes");
      using R = typename Tr::Return;
      using Out = std::conditional_t<std::is_void_v<R>, void, detail::stored_t<R>>;
      if (!h_) throw Error("fibra: this Actor is empty (default-constructed); get one from Actor<T>::start");
      const detail::FunctionEntry* e = detail::function_by_method(detail::method_key<T>(method));
      if (!e)
        throw ConfigError("fibra: Actor<" + detail::demangle(typeid(T).name()) +
                          ">::call was given a method that is not registered for remote calls: add "
                          "FIBRA_ACTOR_METHOD(" +
                          detail::demangle(typeid(T).name()) + ", <method name>); at namespace scope");
      auto job = std::make_shared<detail::JobState>(*e, detail::CallMode::tuple, h_->core->default_policy());
      if constexpr ((detail::is_future_v<Args> || ...)) {
        // A Future argument is a dependency, as for tasks: the call keeps its place among the
        // actor's calls and goes once the Futures have their outcomes, with their values.
        [&]<class... P>(std::tuple<P...>*) {
          static_assert((detail::check_arg<std::remove_cvref_t<Args>, P>() && ...));
          detail::submit_after<P...>(h_->core, job, std::tuple<std::decay_t<Args>...>(std::forward<Args>(args)...),
                                     h_->id);
        }(static_cast<Args_t*>(nullptr));
      } else {
        std::string payload;
        detail::Writer w(payload);
        if constexpr (std::tuple_size_v<Args_t> == sizeof...(Args)) {
          if constexpr (detail::is_raw_v<Args_t>) {
            detail::encode(w, Args_t(std::forward<Args>(args)...));
          } else {
            // Argument by argument, as Codec<std::tuple> writes them, without a copy of each into a
            // tuple first (100 MB more to copy for a 100 MB argument).
            [&]<class... P>(std::tuple<P...>*) {
              (detail::SingleArg<P>::one(w, args), ...);
            }(static_cast<Args_t*>(nullptr));
          }
        }
        h_->core->call_actor(h_->id, job, std::move(payload));
      }
      return Future<Out>(std::move(job));
    }
  }

  /// @brief Whether this handle refers to an actor (a default-constructed one does not).
  bool valid() const noexcept { return h_ != nullptr; }

 private:
  friend struct detail::Codec<Actor<T>>;
  friend class Manager;
  friend class Process;
  // The driver's handles own the actor (the last one ends it); a copy sent to a task does not.
  struct Handle {
    std::shared_ptr<detail::PoolCore> core;
    std::uint64_t id = 0;
    bool owner = true;
    ~Handle() {
      if (owner) core->end_actor(id);
    }
  };
  std::shared_ptr<Handle> h_;
};

/// @brief Fiber's manager (multiprocessing's BaseManager): it starts remote objects on a pool and
/// keeps them alive until it ends or shutdown() is called, even when the program keeps no handle.
/// Each object is an Actor of its own (its own process).
///
/// @code
///   fibra::Manager manager;                            // manager = MyManager(); manager.start()
///   fibra::Actor<Env> env = manager.start<Env>(3);     // env = manager.Env(3)
///   double obs = env.call(&Env::reset).get();          // env.reset() through a future
/// @endcode
class Manager {
 public:
  /// @brief A manager of objects on the default pool (fibra::default_pool).
  Manager() : pool_(&default_pool()) {}
  /// @brief A manager of objects on `pool`, which must outlive it.
  explicit Manager(Pool& pool) : pool_(&pool) {}

  /// @brief Starts an object of class T (registered with FIBRA_ACTOR) from `args`.
  template <class T, class... Args>
  requires(sizeof...(Args) == 0 ||
           !std::is_same_v<std::remove_cvref_t<std::tuple_element_t<0, std::tuple<Args..., int>>>, ActorOptions>)
      Actor<T> start(Args&&... args) {
    return keep(Actor<T>::start(ActorOptions{.pool = pool_}, std::forward<Args>(args)...));
  }
  /// @brief Starts an object of class T with options.
  template <class T, class... Args>
  Actor<T> start(ActorOptions options, Args&&... args) {
    if (options.pool && options.pool != pool_)
      throw ConfigError(
          "fibra: Manager::start was given ActorOptions::pool of another pool than the manager's: "
          "start it with Actor<T>::start, or from a Manager of that pool");
    options.pool = pool_;
    return keep(Actor<T>::start(options, std::forward<Args>(args)...));
  }
  /// @brief A shared dict (Python's manager.dict()): it lives in the driver, not in a process of
  /// the pool, as long as a handle to it is kept there (fibra/shared.hpp).
  template <class K, class V>
  Dict<K, V> dict() const {
    return Dict<K, V>();
  }
  /// @brief A shared list (Python's manager.list()), as dict().
  template <class T>
  List<T> list() const {
    return List<T>();
  }
  /// @brief Objects it started: their processes end once no other handle to them is left.
  std::size_t size() const { return kept_.size(); }
  /// @brief Lets go of every object it started (each ends when its last handle goes).
  void shutdown() { kept_.clear(); }

 private:
  template <class T>
  Actor<T> keep(Actor<T> a) {
    kept_.push_back(a.h_);
    return a;
  }
  Pool* pool_;
  std::vector<std::shared_ptr<void>> kept_;
};

namespace detail {

/// An actor handle travels as its pool and id: a task or another actor that gets one calls the
/// same actor (through the driver). It does not keep the actor alive: the driver's handles do.
template <class T>
struct codable<Actor<T>> : std::true_type {};
template <class T>
struct via_boost<Actor<T>> : std::false_type {};
template <class T>
struct Codec<Actor<T>> {
  static void encode(Writer& w, const Actor<T>& a) {
    if (!a.h_) throw Error("fibra: an empty Actor handle cannot be sent to a worker");
    w.pod(a.h_->core->uid());
    w.pod(a.h_->id);
  }
  static void decode(Reader& r, Actor<T>& a) {
    const auto uid = r.pod<std::uint64_t>();
    const auto id = r.pod<std::uint64_t>();
    auto h = std::make_shared<typename Actor<T>::Handle>();
    h->owner = false;  // until adopted: a throw below must not end an actor through no core
    h->core = core_for_actor_handle(uid);
    h->id = id;
    h->owner = h->core->adopt_actor(id);  // in the driver, one more handle that owns it
    a.h_ = std::move(h);
  }
};

}  // namespace detail

}  // namespace fibra

#define FIBRA_DETAIL_ACTOR_NAME(prefix) FIBRA_DETAIL_CAT(prefix, __COUNTER__)

/// @brief Registers class `cls` as an actor, with the constructor taking the parameter types that
/// follow (none for its default constructor). Use once per constructor that actors start with, at
/// namespace scope.
#define FIBRA_ACTOR(cls, ...)                                                           \
  [[maybe_unused]] static const bool FIBRA_DETAIL_ACTOR_NAME(fibra_actor_registered_) = \
      ::fibra::detail::ActorClass<cls __VA_OPT__(, ) __VA_ARGS__>::add()

/// @brief Registers `cls::method` for Actor<cls>::call, at namespace scope.
#define FIBRA_ACTOR_METHOD(cls, method)                                             \
  [[maybe_unused]] static const bool FIBRA_DETAIL_ACTOR_NAME(fibra_actor_method_) = \
      ::fibra::detail::ActorMethod<cls, &cls::method>::add(#cls "::" #method)
