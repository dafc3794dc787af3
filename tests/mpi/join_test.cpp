// Workers started apart join a running driver (issue 27, item 1): the driver runs with
// FIBRA_JOIN_FILE, and a second launch of this same binary with `--fibra-join <file>` (by itself,
// or under its own mpirun) becomes one of the pool's agents. Each joiner here is started by the test
// itself, with an environment cleaned of the driver's Open MPI variables (as a shell would start it).
// Expected values are computed here (3 i + 1); each task says which agent ran it (its executor's
// parent). Every wait is bounded and names what did not arrive.
#include <fibra/fibra.hpp>
#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../common/bounded.hpp"
#include "common/command.hpp"
#include "common/unique_fd.hpp"
#include "fibra/detail/registry.hpp"
#include "observe/event_reader.hpp"
#include "observe/status.hpp"
#include "transport/auth.hpp"
#include "transport/join.hpp"
#include "transport/tcp.hpp"
#include "transport/wire.hpp"
#include "../common/items.hpp"
#include "../common/proxy.hpp"

extern char** environ;

using fibra_test::call_within;
using fibra_test::upto;

namespace {
constexpr std::chrono::seconds bound{120};

struct Where {
  long value = 0;
  long agent = 0;
};
Where where(long i) {
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // long enough for every worker to take some
  return {3 * i + 1, static_cast<long>(::getppid())};
}
FIBRA_REMOTE(where);

std::string join_file() { return std::getenv("FIBRA_JOIN_FILE"); }

// A value of the join file ("server_file /tmp/..."), read here from its text.
std::string join_file_value(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + " ", 0) == 0) return line.substr(key.size() + 1);
  return {};
}

// Starts `argv` with this environment minus the driver's Open MPI and PMIx variables (and its
// FIBRA_JOIN_FILE), plus `extra`; its stdout and stderr go to `log`.
pid_t start(std::vector<std::string> argv, const std::vector<std::string>& extra, const std::string& log) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    const bool driver_mpi = (v.rfind("OMPI_", 0) == 0 && v.rfind("OMPI_ALLOW_RUN_AS_ROOT", 0) != 0) ||
                            v.rfind("PMIX_", 0) == 0 || v.rfind("OPAL_", 0) == 0 || v.rfind("FIBRA_JOIN_FILE=", 0) == 0;
    if (!driver_mpi) env.push_back(v);
  }
  for (const auto& v : extra) env.push_back(v);
  std::vector<char*> a = fibra::detail::exec_words(argv), e = fibra::detail::exec_words(env);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, a[0], &fa, nullptr, a.data(), e.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    ADD_FAILURE() << "cannot start " << argv[0] << ": " << std::strerror(rc);
    return -1;
  }
  return pid;
}

// This test's binary (a joiner runs the driver's binary; "/proc/self/exe" would be mpirun's under mpirun).
std::string self_exe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

pid_t start_joiner(int workers, const std::string& log) {
  return start({self_exe(), "--fibra-join", join_file()}, {"FIBRA_JOIN_WORKERS=" + std::to_string(workers)}, log);
}

// Kills and reaps a process the test started, if it still runs when the test leaves (a failed
// assertion included): nothing of a test outlives it.
struct Reaper {
  pid_t pid = -1;
  ~Reaper() {
    if (pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

std::string text_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Its exit status (as the shell gives it), waiting at most `s` seconds; -1 if it has not ended.
int exit_status(pid_t pid, int s) {
  for (int i = 0; i < s * 100; ++i) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

// The pool's agent that joined from `origin`, once it is ready; fails the program naming what is
// missing if none is after 60 s.
fibra::WorkerInfo joined(const fibra::Pool& pool, const std::string& log) {
  for (int i = 0; i < 6000; ++i) {
    for (const auto& w : pool.workers())
      if (!w.joined_from.empty() && w.state == "ready") return w;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::printf("\nFAIL: no joined worker ready within 60 s; the joiner wrote:\n%s\n", text_of(log).c_str());
  std::fflush(nullptr);
  std::_Exit(1);
}

std::string log_path(const char* name) { return join_file() + "." + name + ".log"; }
}  // namespace

TEST(Join, AWorkerStartedApartTakesWorkAndLeavesWithThePool) {
  const std::string log = log_path("apart");
  pid_t joiner = -1;
  Reaper reaper;
  {
    fibra::Pool pool(1);
    joiner = start_joiner(2, log);
    ASSERT_GT(joiner, 0);
    reaper.pid = joiner;
    const fibra::WorkerInfo w = joined(pool, log);
    EXPECT_EQ(w.pid, joiner);  // the process started apart is the agent
    EXPECT_EQ(w.workers, 2);
    EXPECT_EQ(w.joined_from, "a launch of its own");
    EXPECT_EQ(pool.size(), 3);  // its own worker and the two that joined
    const auto r =
        call_within(bound, "map of where over 600 items", [&] { return pool.map(where, upto(600), {.chunksize = 1}); });
    ASSERT_EQ(r.size(), 600u);
    int by_joiner = 0;
    for (long i = 0; i < 600; ++i) {
      ASSERT_EQ(r[static_cast<std::size_t>(i)].value, 3 * i + 1) << i;
      by_joiner += r[static_cast<std::size_t>(i)].agent == joiner;
    }
    EXPECT_GT(by_joiner, 100) << "the joined worker's 2 executors ran " << by_joiner << " of 600 items";
  }
  // The pool's end tells it to leave, as its spawned agents: none outlives the driver's pool.
  EXPECT_EQ(exit_status(joiner, 30), 0) << "the joiner did not end (status 0) within 30 s of the pool's end:\n"
                                        << text_of(log);
}

TEST(Join, AJoinedWorkerKilledMidMapCostsOnlyItsChunks) {
  const std::string log = log_path("killed");
  fibra::Pool pool(1);
  const pid_t joiner = start_joiner(1, log);
  ASSERT_GT(joiner, 0);
  Reaper reaper{joiner};
  joined(pool, log);
  int status = -1;
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    ::kill(joiner, SIGKILL);
    status = exit_status(joiner, 10);  // reaped at once: a zombie would still look alive to the driver
  });
  const auto r =
      call_within(bound, "map of where over 800 items", [&] { return pool.map(where, upto(800), {.chunksize = 2}); });
  killer.join();
  ASSERT_EQ(r.size(), 800u);
  int by_joiner = 0;
  for (long i = 0; i < 800; ++i) {
    ASSERT_EQ(r[static_cast<std::size_t>(i)].value, 3 * i + 1) << i;
    by_joiner += r[static_cast<std::size_t>(i)].agent == joiner;
  }
  EXPECT_GT(by_joiner, 0) << "the joined worker ran nothing before it was killed";
  EXPECT_EQ(status, 128 + SIGKILL);
  bool lost = false;
  for (int i = 0; i < 3000 && !lost; ++i) {  // its loss is seen at once: its pid is gone from this host
    for (const auto& w : pool.workers()) lost |= w.pid == joiner && w.state == "lost";
    if (!lost) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(lost) << "the killed joiner is not shown lost";
  // Not replaced: it was no worker of the pool's own (the one spawned, and no other since).
  EXPECT_EQ(pool.size(), 1);
  EXPECT_EQ(pool.stats().workers_started, 1u);
  const auto again = call_within(bound, "map after the loss", [&] { return pool.map(where, upto(50)); });
  for (long i = 0; i < 50; ++i) ASSERT_EQ(again[static_cast<std::size_t>(i)].value, 3 * i + 1);
}

// Pool::resize counts the pool's own workers: shrinking it never retires a joined one.
TEST(Join, ResizeLeavesJoinedWorkersAlone) {
  const std::string log = log_path("resize");
  fibra::Pool pool(2, {.workers_per_agent = 1});
  const pid_t joiner = start_joiner(1, log);
  ASSERT_GT(joiner, 0);
  Reaper reaper{joiner};
  const fibra::WorkerInfo w = joined(pool, log);
  EXPECT_EQ(pool.size(), 3);
  pool.resize(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // a retirement would have begun by now
  int own = 0;
  for (const auto& x : pool.workers()) {
    if (x.pid == w.pid) EXPECT_EQ(x.state, "ready") << "resize(1) retired the joined worker";
    own += x.joined_from.empty() && (x.state == "ready" || x.state == "starting");
  }
  EXPECT_EQ(own, 1);
  EXPECT_EQ(pool.size(), 2);
  const auto r =
      call_within(bound, "map after resize(1)", [&] { return pool.map(where, upto(100), {.chunksize = 1}); });
  std::set<long> agents;
  for (long i = 0; i < 100; ++i) {
    ASSERT_EQ(r[static_cast<std::size_t>(i)].value, 3 * i + 1) << i;
    agents.insert(r[static_cast<std::size_t>(i)].agent);
  }
  EXPECT_TRUE(agents.count(w.pid)) << "the joined worker ran nothing after resize(1)";
}

TEST(Join, AWorkerUnderItsOwnMpirunJoins) {
  const std::string log = log_path("mpirun");
  const std::string server_file = join_file_value(join_file(), "server_file");
  ASSERT_FALSE(server_file.empty()) << text_of(join_file());
  fibra::Pool pool(1);
  const pid_t mpirun =
      start({"mpirun", "--ompi-server", "file:" + server_file, "-n", "1", self_exe(), "--fibra-join", join_file()},
            {"FIBRA_JOIN_WORKERS=1"}, log);
  ASSERT_GT(mpirun, 0);
  Reaper reaper{mpirun};
  const fibra::WorkerInfo w = joined(pool, log);
  EXPECT_EQ(w.joined_from, "mpirun, rank 0 of 1");
  const auto r = call_within(bound, "map of where over 200 items", [&] { return pool.map(where, upto(200)); });
  std::set<long> agents;
  for (long i = 0; i < 200; ++i) {
    ASSERT_EQ(r[static_cast<std::size_t>(i)].value, 3 * i + 1) << i;
    agents.insert(r[static_cast<std::size_t>(i)].agent);
  }
  EXPECT_TRUE(agents.count(w.pid)) << "the worker under mpirun ran nothing";
  pool.terminate();
  EXPECT_EQ(exit_status(mpirun, 30), 0) << "its mpirun did not end (status 0) within 30 s of the pool's end:\n"
                                        << text_of(log);
}

// A join seen on the wire (through a recording proxy the join file's copy points the joiner at):
// the run's secret is not there, neither its bytes nor its text, and the hello is sealed.
TEST(Join, AJoinOnTheWireShowsNoSecretAndNoHello) {
  fibra::Pool pool(1);
  const auto address = fibra::detail::join::read_file(join_file(), 10);
  fibra_test::Proxy proxy(address.hello.front().host, address.hello.front().port);
  const std::string through = join_file() + ".through-proxy";
  {
    std::ifstream in(join_file());
    std::ofstream out(through);
    std::string line;
    bool said = false;
    while (std::getline(in, line)) {
      if (line.rfind("hello ", 0) == 0) {
        if (!said) out << "hello 127.0.0.1 " << proxy.port() << "\n";
        said = true;
      } else {
        out << line << "\n";
      }
    }
  }
  ::chmod(through.c_str(), 0600);
  const std::string log = log_path("proxied");
  const pid_t joiner = start({self_exe(), "--fibra-join", through}, {"FIBRA_JOIN_WORKERS=1"}, log);
  ASSERT_GT(joiner, 0);
  Reaper reaper{joiner};
  const fibra::WorkerInfo w = joined(pool, log);
  EXPECT_EQ(w.pid, joiner);
  const auto out = call_within(bound, "map through a proxied join", [&] { return pool.map(where, upto(50)); });
  for (long i = 0; i < 50; ++i) ASSERT_EQ(out[static_cast<std::size_t>(i)].value, 3 * i + 1) << i;
  const std::string wire_bytes = proxy.to_listener() + proxy.from_listener();
  EXPECT_GT(wire_bytes.size(), fibra::wire::auth_hello_bytes + fibra::wire::auth_challenge_bytes)
      << "the proxy saw no join";
  const std::string raw(reinterpret_cast<const char*>(address.secret->data()), fibra::detail::auth::Secret::size);
  EXPECT_EQ(wire_bytes.find(raw), std::string::npos) << "the secret's bytes on the wire";
  EXPECT_EQ(wire_bytes.find(address.secret->hex()), std::string::npos) << "the secret's text on the wire";
  EXPECT_EQ(wire_bytes.find("a launch of its own"), std::string::npos) << "the hello in clear";
}

// A joiner that dies between its hello and its connect (here: this test says the hello itself,
// reads "go", and hangs up without connecting) must not end later joins: the driver's
// MPI_Comm_accept cannot be called off, so a stand-in connects in its place. Before that, the
// accept waited for good and the next joiner was never answered.
TEST(Join, AJoinerThatLeavesAfterItsHelloDoesNotEndLaterJoins) {
  fibra::Pool pool(1);
  const auto address = fibra::detail::join::read_file(join_file(), 10);
  {
    fibra::detail::UniqueFd s;
    std::string why;
    for (const auto& h : address.hello)
      if ((s = fibra::detail::tcp::connect_to(h.host, h.port, 3'000, why))) break;
    ASSERT_TRUE(s) << "cannot reach the driver's join listener: " << why;
    auto session = fibra::detail::auth::Session::connect(s.get(), *address.secret, fibra::wire::AuthRole::join, 0,
                                                         fibra::detail::auth::handshake_ms, why);
    ASSERT_TRUE(session) << "the join listener did not let the join file's holder in: " << why;
    fibra::wire::JoinHello hello;
    hello.fingerprint = fibra::detail::registry_fingerprint();
    hello.functions = fibra::detail::registry_size();
    hello.pid = ::getpid();
    hello.host = "nowhere";
    hello.executors = 1;
    hello.origin = "a joiner that leaves";
    ASSERT_TRUE(session->send(fibra::wire::encode(hello)));
    const auto reply = session->receive(90'000, fibra::wire::max_join_message);
    ASSERT_TRUE(reply) << "the driver did not answer the hello within 90 s";
    const auto answer = fibra::wire::decode<fibra::wire::JoinAnswer>(*reply);
    ASSERT_TRUE(answer.go) << answer.why;
    EXPECT_FALSE(answer.port.empty()) << "a go names the MPI port to connect to";
  }  // hangs up, never connecting
  const std::string log = log_path("after_leaver");
  const pid_t joiner = start_joiner(1, log);
  ASSERT_GT(joiner, 0);
  Reaper reaper{joiner};
  const fibra::WorkerInfo w = joined(pool, log);
  EXPECT_EQ(w.joined_from.find("a joiner that leaves"), std::string::npos) << w.joined_from;
  std::set<long> agents;
  const auto out = call_within(bound, "map after a joiner left", [&] { return pool.map(where, upto(200)); });
  for (long i = 0; i < 200; ++i) {
    ASSERT_EQ(out[i].value, 3 * i + 1) << "item " << i;
    agents.insert(out[i].agent);
  }
  EXPECT_TRUE(agents.count(w.pid)) << "the worker that joined after the one that left took no item";
}

// Refusals end the joiner with a sentence that names the problem and the fix, and cost the driver nothing.
TEST(Join, AJoinerUnderMpirunWithoutTheNameServerIsToldHow) {
  const std::string log = log_path("no_server");
  fibra::Pool pool(1);
  const pid_t mpirun = start({"mpirun", "-n", "1", self_exe(), "--fibra-join", join_file()}, {}, log);
  ASSERT_GT(mpirun, 0);
  Reaper reaper{mpirun};
  EXPECT_GT(exit_status(mpirun, 30), 0) << "the joiner under mpirun without --ompi-server did not fail within 30 s";
  const std::string said = text_of(log);
  EXPECT_NE(said.find("--ompi-server file:" + join_file_value(join_file(), "server_file")), std::string::npos) << said;
  for (const auto& w : pool.workers()) EXPECT_TRUE(w.joined_from.empty()) << "a worker joined from " << w.joined_from;
}

// A join file of another run (another secret) is refused by the handshake, before the joiner says
// who it is; one that others may read is refused by the joiner before it connects.
TEST(Join, AJoinFileOfAnotherRunOrReadableByOthersIsRefused) {
  const std::string log = log_path("stale");
  const std::string stale = join_file() + ".other-run";
  {
    std::ifstream in(join_file());
    std::ofstream out(stale);
    std::string line;
    while (std::getline(in, line))
      out << (line.rfind("secret ", 0) == 0 ? "secret " + std::string(64, 'a') : line) << "\n";
  }
  ::chmod(stale.c_str(), 0600);
  const std::string events = join_file() + ".events";
  std::filesystem::remove_all(events);
  fibra::Pool pool(1, {.events = events});
  const pid_t joiner = start({self_exe(), "--fibra-join", stale}, {}, log);
  ASSERT_GT(joiner, 0);
  Reaper reaper{joiner};
  EXPECT_EQ(exit_status(joiner, 60), 2);
  const std::string said = text_of(log);
  EXPECT_NE(said.find("do not share the join file's secret"), std::string::npos) << said;
  EXPECT_NE(said.find("does not hold this run's secret"), std::string::npos) << said;
  // The refusal is in the run's event log (flushed within a second), and `fibra status` says it.
  fibra::observe::EventLogRecord read;
  for (int i = 0; i < 100 && read.refused_joins.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    read = fibra::observe::read_event_log(events);
  }
  ASSERT_EQ(read.refused_joins.size(), 1u) << "no join_refused event in " << events << " within 5 s";
  const auto& r = read.refused_joins[0];
  const auto colon = r.from.rfind(':');  // the joiner's address and port, as the door saw them
  ASSERT_NE(colon, std::string::npos) << r.from;
  EXPECT_GT(colon, 0u) << r.from;
  EXPECT_GT(std::stol(r.from.substr(colon + 1)), 0) << r.from;
  // (The joiner finds the driver's proof wrong and hangs up before it answers.)
  EXPECT_EQ(r.why.rfind("its handshake failed: it hung up without answering its challenge", 0), 0u) << r.why;
  const std::string status = fibra::observe::status_text(read, r.t);
  EXPECT_NE(status.find("joins      1 refused; the last, " + r.from + ": its handshake failed"), std::string::npos)
      << status;
  // the real file, readable by others
  const std::string open_copy = join_file() + ".readable";
  std::filesystem::copy_file(join_file(), open_copy, std::filesystem::copy_options::overwrite_existing);
  ::chmod(open_copy.c_str(), 0644);
  const std::string log2 = log_path("readable");
  const pid_t reader = start({self_exe(), "--fibra-join", open_copy}, {}, log2);
  ASSERT_GT(reader, 0);
  Reaper reaper2{reader};
  EXPECT_EQ(exit_status(reader, 60), 2);
  EXPECT_NE(text_of(log2).find("has mode 0644: others may read or write it"), std::string::npos) << text_of(log2);
  for (const auto& w : pool.workers()) EXPECT_TRUE(w.joined_from.empty()) << "a worker joined from " << w.joined_from;
  EXPECT_EQ(pool.map(where, upto(20)).size(), 20u);  // the driver goes on
  // The one that refused itself (its file readable by others) never reached the driver.
  EXPECT_EQ(fibra::observe::read_event_log(events).refused_joins.size(), 1u);
}

int main(int argc, char** argv) {
  // The driver listens for joiners at a file of its own (a joiner, started with --fibra-join, never
  // returns from the Runtime).
  bool joiner = false;
  for (int i = 1; i < argc; ++i) joiner |= std::strcmp(argv[i], "--fibra-join") == 0;
  std::string dir;
  if (!joiner && !std::getenv("FIBRA_JOIN_FILE")) {
    char tmpl[] = "/tmp/fibra-join-test-XXXXXX";
    dir = ::mkdtemp(tmpl);
    ::setenv("FIBRA_JOIN_FILE", (dir + "/join").c_str(), 1);
  }
  int rc = 0;
  {
    fibra::Runtime rt(argc, argv);
    ::testing::InitGoogleTest(&argc, argv);
    rc = RUN_ALL_TESTS();
  }
  if (!dir.empty() && rc == 0) std::filesystem::remove_all(dir);
  return rc;
}
