// The raw-MPI floor of BENCHMARKS.md (B2 round trip, B5 spawn, B6 payload): a master and children
// it spawns with MPI_Comm_spawn, talking with plain MPI_Send/MPI_Recv. No fibra.
//
//   raw_mpi [--repeats 5] [--roundtrips 2000] [--bytes 67108864] [--payload-repeats 5] [--spawn 16[,64...]]
//
// Run as a singleton (`./raw_mpi`) or with `mpirun -n 1 ./raw_mpi`. The master spawns copies of its
// own executable (/proc/self/exe) with the argument --raw-mpi-child; a child echoes every message
// it gets from the parent's rank 0 until it gets a stop message, then disconnects and finalizes.
//
//   b2,roundtrip_us                 8 bytes to one child and back: median of --roundtrips trips per repeat
//   b6,payload_<size>_roundtrip_s / _bandwidth   --bytes of doubles to the child and back
//                                   (2*bytes/time), median of --payload-repeats trips after a warm-up
//   b5,spawn_call_<n>_workers_s     one MPI_Comm_spawn of n processes (each n of --spawn), until it returns
//   b5,startup_<n>_workers_s        the same plus until all n children have answered a ping (0 skips)
//   b9,agents_<n>_ready_s           with --b9: the start-up again, beside b9_agents' ready time of a
//                                   pool of n one-worker agents (the suite's B5 with one agent per worker)
//
// Every figure is the median over --repeats. Prints CSV: benchmark,metric,value,unit.
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"

namespace {

using bench::arg;
using bench::Clock;
using bench::median;
using bench::seconds_since;

constexpr const char* child_flag = "--raw-mpi-child";
constexpr int tag_echo = 1;
constexpr int tag_stop = 2;

bool is_child(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], child_flag) == 0) return true;
  return false;
}

// Child: echo every message from the parent's rank 0 back to it, until a stop message.
int run_child() {
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  if (parent == MPI_COMM_NULL) {
    std::fprintf(stderr, "raw_mpi: %s given but this process has no parent\n", child_flag);
    MPI_Finalize();
    return 1;
  }
  std::vector<char> buf(64);
  for (;;) {
    MPI_Status st;
    MPI_Probe(0, MPI_ANY_TAG, parent, &st);
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    if (buf.size() < std::size_t(n)) buf.resize(std::size_t(n));
    MPI_Recv(buf.data(), n, MPI_BYTE, 0, st.MPI_TAG, parent, MPI_STATUS_IGNORE);
    if (st.MPI_TAG == tag_stop) break;
    MPI_Send(buf.data(), n, MPI_BYTE, 0, tag_echo, parent);
  }
  MPI_Comm_disconnect(&parent);
  MPI_Finalize();
  return 0;
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, std::size_t(n)) : std::string();
}

// Spawns `n` children in one MPI_Comm_spawn call (oversubscribing: the machine has few cores).
// Aborts on failure: there is nothing to measure without them.
MPI_Comm spawn_children(int n) {
  static const std::string exe = self_exe();
  char* argv[] = {const_cast<char*>(child_flag), nullptr};
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "map_by", ":OVERSUBSCRIBE");
  std::vector<int> errs(std::size_t(n), MPI_SUCCESS);
  MPI_Comm inter = MPI_COMM_NULL;
  int rc = MPI_Comm_spawn(exe.c_str(), argv, n, info, 0, MPI_COMM_SELF, &inter, errs.data());
  MPI_Info_free(&info);
  bool ok = rc == MPI_SUCCESS;
  for (int e : errs) ok = ok && e == MPI_SUCCESS;
  if (!ok) {
    std::fprintf(stderr, "raw_mpi: MPI_Comm_spawn of %d processes of %s failed\n", n, exe.c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return inter;
}

// Tells every child of `inter` to stop, then disconnects from them.
void stop_children(MPI_Comm& inter) {
  int n = 0;
  MPI_Comm_remote_size(inter, &n);
  char none = 0;
  for (int i = 0; i < n; ++i) MPI_Send(&none, 0, MPI_BYTE, i, tag_stop, inter);
  MPI_Comm_disconnect(&inter);
}

// One send of `bytes` bytes to child `rank` and its echo back into `in`.
void echo(MPI_Comm inter, int rank, const void* out, void* in, int bytes) {
  MPI_Send(out, bytes, MPI_BYTE, rank, tag_echo, inter);
  MPI_Recv(in, bytes, MPI_BYTE, rank, tag_echo, inter, MPI_STATUS_IGNORE);
}

// Median round trip of 8 bytes, in microseconds, after a few unmeasured trips.
double roundtrip_us(MPI_Comm child, long trips) {
  double out = 0, in = 0;
  for (int i = 0; i < 50; ++i) echo(child, 0, &out, &in, sizeof out);
  std::vector<double> us;
  us.reserve(std::size_t(trips));
  for (long i = 0; i < trips; ++i) {
    out = double(i);
    auto t = Clock::now();
    echo(child, 0, &out, &in, sizeof out);
    us.push_back(seconds_since(t) * 1e6);
    if (in != out) {
      std::fprintf(stderr, "raw_mpi: round trip %ld came back wrong\n", i);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  return median(us);
}

// Median time of sending `v` to the child and receiving it back, after one warm-up trip.
double payload_seconds(MPI_Comm child, const std::vector<double>& v, long trips) {
  std::vector<double> back(v.size());
  const int bytes = int(v.size() * sizeof(double));
  std::vector<double> s;
  for (long i = 0; i <= trips; ++i) {
    std::fill(back.begin(), back.end(), -1.0);
    auto t = Clock::now();
    echo(child, 0, v.data(), back.data(), bytes);
    if (i > 0) s.push_back(seconds_since(t));
    if (back != v) {
      std::fprintf(stderr, "raw_mpi: the payload came back changed\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  return median(s);
}

struct SpawnTimes {
  double call = 0;   // MPI_Comm_spawn returned
  double ready = 0;  // every child answered a ping
};

// Times one MPI_Comm_spawn of `n` children and the pings of all of them; then stops them.
SpawnTimes time_spawn(int n) {
  SpawnTimes r;
  auto t = Clock::now();
  MPI_Comm inter = spawn_children(n);
  r.call = seconds_since(t);
  std::vector<double> pings(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) MPI_Send(&pings[std::size_t(i)], sizeof(double), MPI_BYTE, i, tag_echo, inter);
  for (int i = 0; i < n; ++i)
    MPI_Recv(&pings[std::size_t(i)], sizeof(double), MPI_BYTE, i, tag_echo, inter, MPI_STATUS_IGNORE);
  r.ready = seconds_since(t);
  stop_children(inter);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (is_child(argc, argv)) return run_child();

  const int repeats = int(arg(argc, argv, "--repeats", 5));
  const long trips = arg(argc, argv, "--roundtrips", 2000);
  const long bytes = arg(argc, argv, "--bytes", 64L * 1024 * 1024);
  const long payload_trips = arg(argc, argv, "--payload-repeats", 5);
  std::vector<int> spawn_ns;  // empty or "0": no spawn test
  bool b9 = false;
  for (int i = 1; i < argc; ++i) b9 |= std::strcmp(argv[i], "--b9") == 0;
  for (const auto& n : bench::split_commas(bench::arg_str(argc, argv, "--spawn", "16")))
    if (std::atoi(n.c_str()) > 0) spawn_ns.push_back(std::atoi(n.c_str()));
  if (bytes < 8 || bytes % 8 != 0 || bytes > 2147483640L || repeats < 1 || trips < 1 || payload_trips < 1) {
    std::fprintf(stderr, "raw_mpi: --bytes must be a multiple of 8 below 2 GiB; counts at least 1\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }

  std::printf(
      "# raw MPI (plain MPI_Send/MPI_Recv to spawned children, no fibra), %u hardware threads, "
      "%.0f GiB, %d repeats: %ld round trips of 8 bytes, %ld trips of %ld bytes, spawn of %s\n",
      std::thread::hardware_concurrency(), bench::memory_gib(), repeats, trips, payload_trips, bytes,
      bench::arg_str(argc, argv, "--spawn", "16").c_str());
  std::printf("benchmark,metric,value,unit\n");
  std::fflush(stdout);

  std::vector<double> payload(std::size_t(bytes) / sizeof(double));
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = double(i) * 0.5;

  std::vector<double> rtt, pay;
  std::vector<std::vector<double>> call(spawn_ns.size()), ready(spawn_ns.size());
  for (int r = 0; r < repeats; ++r) {
    // A fresh child per repeat, stopped before the spawn test so that it spins on no core then.
    MPI_Comm child = spawn_children(1);
    rtt.push_back(roundtrip_us(child, trips));
    pay.push_back(payload_seconds(child, payload, payload_trips));
    stop_children(child);
    for (std::size_t k = 0; k < spawn_ns.size(); ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let stopped children exit
      SpawnTimes s = time_spawn(spawn_ns[k]);
      call[k].push_back(s.call);
      ready[k].push_back(s.ready);
    }
  }

  const std::string pname = "payload_" + bench::size_name(bytes);
  const double mib = double(bytes) / (1024.0 * 1024.0);
  std::printf("b2,roundtrip_us,%.1f,us\n", median(rtt));
  std::printf("b6,%s_roundtrip_s,%.6f,s\n", pname.c_str(), median(pay));
  std::printf("b6,%s_bandwidth,%.0f,MiB/s\n", pname.c_str(), 2 * mib / median(pay));
  for (std::size_t k = 0; k < spawn_ns.size(); ++k) {
    std::printf("b5,spawn_call_%d_workers_s,%.3f,s\n", spawn_ns[k], median(call[k]));
    std::printf("b5,startup_%d_workers_s,%.3f,s\n", spawn_ns[k], median(ready[k]));
    if (b9) std::printf("b9,agents_%d_ready_s,%.3f,s\n", spawn_ns[k], median(ready[k]));
  }
  MPI_Finalize();
  return 0;
}
