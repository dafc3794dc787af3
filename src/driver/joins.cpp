// src/driver/joins.cpp: see joins.hpp. The listener's thread hears one hello at a time, answers
// it, and, having said "go", waits in MPI_Comm_accept for that joiner alone; the agent it accepts
// goes to a pool, whose communication thread sends its setup like a spawned one's.
#include "driver/joins.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>

#include "common/command.hpp"
#include "common/log.hpp"
#include "common/process.hpp"
#include "common/unique_fd.hpp"
#include "roles.hpp"
#include "fibra/detail/registry.hpp"
#include "fibra/error.hpp"
#include "driver/driver.hpp"
#include "driver/run_secret.hpp"
#include "transport/doorman.hpp"
#include "transport/join.hpp"
#include "transport/mpi.hpp"
#include "transport/tcp.hpp"
#include "common/env.hpp"

extern char** environ;

namespace fibra::detail {

namespace {
std::mutex g_mu;
std::string g_listening;                // under g_mu: the join file, while listening
std::vector<std::string> g_launch_env;  // under g_mu: taken at prepare()

constexpr double server_start_s = 10;  // ompi-server writes its URI within this
constexpr double pool_wait_s = 60;     // a hello waits this long for a pool to run
constexpr int hello_ms = 3'000;        // a joiner that connected sends its hello at once: within this
constexpr double accept_bound_s = 90;  // a joiner told go connects within this (its own bound is 60 s)
constexpr double standin_bye_s = 10;   // a stand-in that connected says bye within this
constexpr int standin_tries = 3;       // stand-ins started, one after another, for one joiner
constexpr double close_bound_s = 20;   // at close(), the listener's thread ends within this (a stand-in's start)

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return trimmed(s.str());
}

// What a launcher (mpirun, a singleton's runtime, Slurm) put in the environment for its own
// processes: a worker job must not inherit it, or its MPI_Init would look for the driver's launcher
// and its job would carry the driver job's Slurm settings. Kept: the user's choice of networks (btl,
// oob), of running as root, and of Slurm's configuration file.
bool launcher_variable(std::string_view v) {
  const auto starts = [&](std::string_view p) { return v.substr(0, p.size()) == p; };
  if (starts("PMIX_") || starts("OPAL_") || starts("ORTE_")) return true;
  if (starts("SLURM_")) return !starts("SLURM_CONF=");
  if (!starts("OMPI_")) return false;
  return !(starts("OMPI_ALLOW_RUN_AS_ROOT") || starts("OMPI_MCA_btl") || starts("OMPI_MCA_oob"));
}

// Where joiners may say hello: the address it listens on; listening on every address
// (FIBRA_LISTEN=any), this host's IPv4 addresses, then its name, then the loopback.
std::vector<join::Address::Hello> hello_addresses(const std::string& address, std::uint16_t port) {
  if (!address.empty()) return {{address, port}};
  std::vector<join::Address::Hello> out;
  for (const auto& i : tcp::interfaces())
    if (!i.loopback && i.address.find(':') == std::string::npos) out.push_back({i.address, port});
  out.push_back({host_name(), port});
  out.push_back({"127.0.0.1", port});
  return out;
}
}  // namespace

struct JoinListener::Impl {
  std::string path;         // the join file
  std::string server_uri;   // ompi-server's
  std::string server_file;  // holding that URI
  bool own_server_file = false;
  pid_t server_pid = -1;          // the ompi-server this driver started, if it did
  MPI_Comm self = MPI_COMM_NULL;  // a copy of MPI_COMM_SELF, the accept's own (a spawn may use SELF at the same time)
  // Connections let in by the door (authenticated: their hellos are sealed), heard one at a time.
  std::mutex arrived_mu;
  std::deque<std::pair<UniqueFd, std::unique_ptr<auth::Session>>> arrived;  // under arrived_mu
  UniqueFd wake[2];                                                         // a byte per arrival
  std::unique_ptr<Doorman> door;
  UniqueFd stop[2];
  std::thread thread;
  std::atomic<bool> done{false}, in_accept{false};
  bool opened = false, closed = false;

  void start_server() {
    server_file = path + ".uri";
    std::remove(server_file.c_str());
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0)
      throw Error(std::string("fibra: cannot start ompi-server for FIBRA_JOIN_FILE (fork: ") + std::strerror(errno) +
                  ")");
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // it ends with the driver, however the driver ends
      if (::getppid() != parent) ::_exit(0);
      const int null = ::open("/dev/null", O_WRONLY);
      if (null >= 0) ::dup2(null, STDOUT_FILENO);
      ::execlp("ompi-server", "ompi-server", "--no-daemonize", "-r", server_file.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    server_pid = pid;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(server_start_s);
    while ((server_uri = file_text(server_file)).empty()) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        server_pid = -1;
        throw ConfigError(
            "fibra: FIBRA_JOIN_FILE needs Open MPI's name server, and ompi-server (Debian's openmpi-bin) did not "
            "start (exit status " +
            std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) +
            (WIFEXITED(status) && WEXITSTATUS(status) == 127 ? ": not found on PATH" : "") + ")");
      }
      if (std::chrono::steady_clock::now() >= end) {
        stop_server();
        throw ConfigError("fibra: FIBRA_JOIN_FILE needs Open MPI's name server, and ompi-server wrote no URI to " +
                          server_file + " within " + std::to_string(static_cast<int>(server_start_s)) + " s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  void stop_server() noexcept {
    if (server_pid <= 0) return;
    ::kill(server_pid, SIGTERM);
    for (int i = 0; i < 200; ++i) {  // 2 s, then SIGKILL
      if (::waitpid(server_pid, nullptr, WNOHANG) == server_pid) {
        server_pid = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (server_pid > 0) {
      ::kill(server_pid, SIGKILL);
      ::waitpid(server_pid, nullptr, 0);
      server_pid = -1;
    }
    std::remove(server_file.c_str());
  }

  bool stopping(int ms) const {
    pollfd p{stop[0].get(), POLLIN, 0};
    return ::poll(&p, 1, ms) > 0;
  }

  // The door's: a connection let in waits for the listener's thread.
  void arrive(UniqueFd c, std::unique_ptr<auth::Session> session) {
    {
      std::lock_guard lk(arrived_mu);
      arrived.emplace_back(std::move(c), std::move(session));
    }
    const char b = 0;
    (void)!::write(wake[1].get(), &b, 1);
  }

  void serve() {
    pollfd p[2] = {{wake[0].get(), POLLIN, 0}, {stop[0].get(), POLLIN, 0}};
    for (;;) {
      const int r = ::poll(p, 2, -1);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 || (p[1].revents & POLLIN)) break;
      if (!(p[0].revents & POLLIN)) continue;
      char b[64];
      (void)!::read(wake[0].get(), b, sizeof b);
      for (;;) {
        std::pair<UniqueFd, std::unique_ptr<auth::Session>> next;
        {
          std::lock_guard lk(arrived_mu);
          if (arrived.empty()) break;
          next = std::move(arrived.front());
          arrived.pop_front();
        }
        try {
          hear(next.first.get(), *next.second);
        } catch (const std::exception& e) {
          log::warning("fibra: a worker's join failed: {}", e.what());
        }
        if (stopping(0)) break;
      }
    }
    done = true;
  }

  static bool answer(auth::Session& s, bool go, const std::string& why, const std::string& port = {}) {
    wire::JoinAnswer a;
    a.go = go;
    a.why = why;
    a.port = port;
    return s.send(wire::encode(a));
  }

  // A joiner let in by the door but not taken: told why, and the running pools' event logs too.
  static void refuse(auth::Session& s, const wire::JoinHello* h, const std::string& why) {
    note_join_refused({}, h ? h->origin : std::string(), h ? h->host : std::string(), h ? long(h->pid) : 0L, why);
    answer(s, false, why);
  }

  // This binary as `--fibra-join-standin <port>`, with the environment the driver was started
  // with (no launcher's variables: it starts MPI as a process of its own) and the name server's
  // URI; -1 if it cannot start.
  pid_t start_stand_in(const std::string& port) const noexcept {
    try {
      std::vector<std::string> env = launch_environment();
      env.push_back("OMPI_MCA_pmix_server_uri=" + server_uri);
      // (this very binary, even if its file was replaced since it started)
      const std::vector<std::string> argv = {"/proc/self/exe", join_standin_flag, port};
      std::vector<char*> a = exec_words(argv), e = exec_words(env);
      posix_spawn_file_actions_t files;
      posix_spawn_file_actions_init(&files);
      posix_spawn_file_actions_addclosefrom_np(&files, 3);  // none of the driver's descriptors
      pid_t pid = -1;
      const int rc = ::posix_spawn(&pid, a[0], &files, nullptr, a.data(), e.data());
      posix_spawn_file_actions_destroy(&files);
      if (rc == 0) return pid;
      log::warning("fibra: cannot start a join stand-in: {}", std::strerror(rc));
    } catch (const std::exception& e) {
      log::warning("fibra: cannot start a join stand-in: {}", e.what());
    }
    return -1;
  }

  // Whether the process that connected is the stand-in (its bye came within standin_bye_s); if it
  // is, it is disconnected.
  static bool let_stand_in_go(MPI_Comm& comm) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(standin_bye_s);
    MPI_Status st;
    int flag = 0;
    while (!flag && std::chrono::steady_clock::now() < end) {
      if (MPI_Iprobe(0, MPI_ANY_TAG, comm, &flag, &st) != MPI_SUCCESS) return false;
      if (!flag) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    int bytes = -1;
    if (!flag || st.MPI_TAG != wire::tag_bye || MPI_Get_count(&st, MPI_BYTE, &bytes) != MPI_SUCCESS || bytes != 0)
      return false;
    MPI_Recv(nullptr, 0, MPI_BYTE, 0, wire::tag_bye, comm, MPI_STATUS_IGNORE);
    MPI_Comm_disconnect(&comm);
    return true;
  }

  // Reaps the stand-in: at once with SIGKILL (`now`), or once it leaves, SIGKILLed if it has not
  // within standin_bye_s.
  static void end_stand_in(pid_t pid, bool now) {
    if (pid <= 0) return;
    for (int i = 0; !now && i < static_cast<int>(standin_bye_s * 100); ++i) {
      if (::waitpid(pid, nullptr, WNOHANG) != 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }

  static constexpr const char* left_reason = "left after its hello, before it connected";
  static constexpr pid_t standin_gone = -2;

  // Watches a joiner told go until its connect is accepted: empty then; else why it will not come
  // (left_reason: it hung up; or the bound passed; or the driver began to end).
  std::string wait_for_connect(int fd, const std::atomic<bool>& accepted) const {
    const auto bound = std::chrono::steady_clock::now() + std::chrono::duration<double>(accept_bound_s);
    while (!accepted) {
      pollfd p[2] = {{fd, POLLIN, 0}, {stop[0].get(), POLLIN, 0}};
      const int r = ::poll(p, 2, 100);
      char b;
      if (accepted) break;
      const bool readable = r > 0 && (p[0].revents & (POLLIN | POLLHUP));
      if (readable && ::recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0) return left_reason;
      if (r > 0 && (p[1].revents & POLLIN)) return "had not connected when the driver began to end";
      if (std::chrono::steady_clock::now() >= bound)
        return "did not connect within " + std::to_string(static_cast<int>(accept_bound_s)) + " s of its go";
      if (readable)  // (bytes after its hello, which a joiner never sends: not read, not spun on)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return {};
  }

  // Starts stand-ins for a joiner that will not connect until one's connect is accepted: one that
  // ends first (its MPI did not start, its connect failed) is followed by another, standin_tries in
  // all. The stand-in running when the accept returned; standin_gone if one connected and has
  // already left (reaped: its pid is no longer this process's to signal); else -1.
  pid_t stand_in_until_accepted(const std::string& port, const std::atomic<bool>& accepted, const wire::JoinHello& h,
                                const std::string& why) const {
    log::warning(
        "fibra: the worker from {} on {} (pid {}) {}: a stand-in connects in its place so that workers may "
        "join again",
        h.origin, h.host, h.pid, why);
    std::string ended;
    for (int i = 0; i < standin_tries && !accepted; ++i) {
      const pid_t pid = start_stand_in(port);
      if (pid <= 0) break;
      int status = 0;
      while (!accepted && ::waitpid(pid, &status, WNOHANG) == 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (accepted && ::waitpid(pid, &status, WNOHANG) == 0) return pid;       // (still running: reaped later)
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return standin_gone;  // (connected, said bye, left)
      ended = describe_exit(status);
    }
    if (!accepted)
      log::warning(
          "fibra: no stand-in connected for the worker from {} (the last {}): the driver waits in "
          "MPI_Comm_accept for good, and no other worker can join this run",
          h.origin, ended.empty() ? "could not start" : ended);
    return -1;
  }

  // One joiner: its hello, the answer, and (having said "go") the accept of its connect.
  void hear(int fd, auth::Session& s) {
    const auto m = s.receive(hello_ms, wire::max_join_message);
    if (!m) return;  // it left
    wire::JoinHello h;
    try {
      h = wire::decode<wire::JoinHello>(*m);
    } catch (const std::exception&) {
      refuse(s, nullptr, "its hello does not decode: another version of fibra");
      return;
    }
    std::string why;
    if (h.fingerprint != registry_fingerprint())
      why = "it runs another build of the program (" + std::to_string(h.functions) +
            " remote functions registered, the driver has " + std::to_string(registry_size()) +
            " or others): start workers from the driver's binary";
    else if (h.executors < 1 || h.executors > 4096)
      why = "it offers " + std::to_string(h.executors) + " workers (FIBRA_JOIN_WORKERS): from 1 to 4096";
    if (why.empty()) {
      for (int i = 0; i < static_cast<int>(pool_wait_s * 20) && !pool_running(); ++i)
        if (stopping(50)) {
          refuse(s, &h, "the driver is ending");
          return;
        }
      if (!pool_running())
        why = "no pool ran in the driver for " + std::to_string(static_cast<int>(pool_wait_s)) + " s";
    }
    if (!why.empty()) {
      log::warning("fibra: a worker from {} on {} (pid {}) may not join: {}", h.origin, h.host, h.pid, why);
      refuse(s, &h, why);
      return;
    }
    if (stopping(0)) {
      refuse(s, &h, "the driver is ending");
      return;
    }
    char opened[MPI_MAX_PORT_NAME] = {};
    if (const int rc = MPI_Open_port(MPI_INFO_NULL, opened); rc != MPI_SUCCESS) {
      refuse(s, &h, "the driver could not open an MPI port for it (" + mpi::error_text(rc) + ")");
      return;
    }
    const std::string port = opened;
    struct PortCloser {
      const std::string& port;
      ~PortCloser() { MPI_Close_port(port.c_str()); }
    } closer{port};
    if (!answer(s, true, "", port)) return;
    // The joiner calls MPI_Comm_connect as soon as it reads the answer. If it leaves first (its
    // hello's connection, which it keeps for life, hangs up), or has not connected within
    // accept_bound_s, or the driver ends meanwhile, a stand-in connects in its place: Open MPI
    // cannot call an accept off, and an accept that never returns would end every later join.
    in_accept = true;
    MPI_Comm comm = MPI_COMM_NULL;
    std::atomic<bool> accepted{false};
    pid_t stand_in = -1;  // (the watch's; read once it is joined)
    bool joiner_left = false;
    std::thread watch([&] {
      const std::string why = wait_for_connect(fd, accepted);
      if (why.empty()) return;
      joiner_left = why == left_reason;
      stand_in = stand_in_until_accepted(port, accepted, h, why);
    });
    const int rc = MPI_Comm_accept(port.c_str(), MPI_INFO_NULL, 0, self, &comm);
    accepted = true;
    watch.join();
    in_accept = false;
    if (rc != MPI_SUCCESS) {
      log::warning("fibra: a worker from {} on {} (pid {}) said hello but MPI_Comm_accept failed: {}", h.origin, h.host,
                   h.pid, mpi::error_text(rc));
      end_stand_in(stand_in, true);
      return;
    }
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    if ((stand_in > 0 || stand_in == standin_gone) && let_stand_in_go(comm)) {
      end_stand_in(stand_in, false);
      return;
    }
    end_stand_in(stand_in, true);  // (its connect meets a port about to close: it is not needed)
    if (joiner_left) {             // neither the stand-in nor a joiner known to be gone: not a worker to trust
      log::warning(
          "fibra: what connected for the worker from {} on {} (pid {}) after it left did not say bye; it "
          "is let go",
          h.origin, h.host, h.pid);
      MPI_Comm_free(&comm);
      return;
    }
    JoinedAgent j{comm, h};
    if (!offer_joined_agent(j)) {  // the pool ended since: the joiner is told to leave
      MPI_Send(nullptr, 0, MPI_BYTE, 0, wire::tag_shutdown, comm);
      MPI_Comm_free(&comm);
    }
  }
};

std::string join_file_listening() {
  std::lock_guard lk(g_mu);
  return g_listening;
}

std::vector<std::string> launch_environment() {
  std::lock_guard lk(g_mu);
  return g_launch_env;
}

JoinListener::JoinListener() : impl_(std::make_unique<Impl>()) {}

std::unique_ptr<JoinListener> JoinListener::prepare() {
  const char* path = env::raw("FIBRA_JOIN_FILE");
  if (!path || !*path) return nullptr;
  {
    std::lock_guard lk(g_mu);
    g_launch_env.clear();
    for (char** e = environ; *e; ++e)
      if (!launcher_variable(*e)) g_launch_env.emplace_back(*e);
  }
  std::unique_ptr<JoinListener> l(new JoinListener());
  Impl& s = *l->impl_;
  s.path = path;
  const char* given = std::getenv("OMPI_MCA_pmix_server_uri");  // mpirun --ompi-server sets it
  if (given && *given) {
    const std::string v = given;
    if (v.rfind("file:", 0) == 0) {
      s.server_file = v.substr(5);
      s.server_uri = file_text(s.server_file);
      if (s.server_uri.empty())
        throw ConfigError("fibra: OMPI_MCA_pmix_server_uri (mpirun --ompi-server) names " + s.server_file +
                          ", which holds no ompi-server URI");
    } else {
      s.server_uri = v;
      s.server_file = s.path + ".uri";
      s.own_server_file = true;
      std::ofstream(s.server_file, std::ios::trunc) << v << "\n";
    }
  } else if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
    throw ConfigError(
        "fibra: FIBRA_JOIN_FILE under mpirun needs Open MPI's name server, which only mpirun can be given: start "
        "`ompi-server --no-daemonize -r URIFILE &` and run `mpirun --ompi-server file:URIFILE -n 1 ./app`, or run "
        "the driver as `./app` (then fibra starts ompi-server itself)");
  } else {
    s.start_server();
    ::setenv("OMPI_MCA_pmix_server_uri", ("file:" + s.server_file).c_str(), 1);
  }
  return l;
}

void JoinListener::open() {
  Impl& s = *impl_;
  mpi::check(MPI_Comm_dup(MPI_COMM_SELF, &s.self), "MPI_Comm_dup");
  s.opened = true;
  int p[2], w[2];
  if (::pipe2(p, O_CLOEXEC) != 0 || ::pipe2(w, O_CLOEXEC | O_NONBLOCK) != 0)
    throw Error(std::string("fibra: cannot listen for workers that join (pipe: ") + std::strerror(errno) + ")");
  s.stop[0] = UniqueFd(p[0]);
  s.stop[1] = UniqueFd(p[1]);
  s.wake[0] = UniqueFd(w[0]);
  s.wake[1] = UniqueFd(w[1]);
  const std::string address = tcp::listen_address();
  const auth::Secret& secret = run_secret().secret;
  s.door = std::make_unique<Doorman>(
      tcp::listen_on(address, "hear workers that join (FIBRA_JOIN_FILE)"), secret, wire::AuthRole::join, 0,
      "the join listener",
      [&s](UniqueFd c, std::unique_ptr<auth::Session> session) { s.arrive(std::move(c), std::move(session)); }, 32,
      [](const std::string& address, const std::string& port, const std::string& why) {
        note_join_refused(address + ":" + port, {}, {}, 0, "its handshake failed: " + why);
      });
  join::Address a;
  a.secret = secret;
  a.fingerprint = registry_fingerprint();
  a.server_uri = s.server_uri;
  a.server_file = s.server_file;
  a.hello = hello_addresses(address, s.door->port());
  join::write_file(s.path, a);
  s.thread = std::thread([&s] { s.serve(); });
  {
    std::lock_guard lk(g_mu);
    g_listening = s.path;
  }
  log::info("fibra: workers may join this run: start them with `./app --fibra-join {}`", s.path);
}

bool JoinListener::close() noexcept {
  Impl& s = *impl_;
  if (s.closed) return true;
  s.closed = true;
  {
    std::lock_guard lk(g_mu);
    g_listening.clear();
  }
  s.door.reset();  // no more joiners let in
  bool clean = true;
  if (s.thread.joinable()) {
    const char b = 0;
    (void)!::write(s.stop[1].get(), &b, 1);
    const auto bound = std::chrono::steady_clock::now() + std::chrono::duration<double>(close_bound_s);
    for (;;) {
      const auto now = std::chrono::steady_clock::now();
      if (s.done || now >= bound) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (s.done) {
      s.thread.join();
    } else {
      log::warning("fibra: {}; the driver leaves without MPI_Finalize, which would wait for it",
                   s.in_accept ? "a worker said hello to join, and neither it nor a stand-in connected"
                               : "the join listener did not stop");
      s.thread.detach();
      (void)impl_.release();  // the thread still uses it
      clean = false;
    }
  }
  if (clean && s.opened) MPI_Comm_free(&s.self);
  std::remove(s.path.c_str());
  return clean;
}

JoinListener::~JoinListener() {
  if (!impl_) return;  // its thread, stuck, holds it: the name server goes with the driver (PDEATHSIG)
  close();
  if (impl_->own_server_file) std::remove(impl_->server_file.c_str());
  impl_->stop_server();
}

}  // namespace fibra::detail
