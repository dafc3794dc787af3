// What each worker offers, from PoolOptions and the allocation's variables (no processes started).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "fibra/detail/core.hpp"
#include "fibra/error.hpp"
#include "driver/resources.hpp"

using fibra::PoolOptions;
using fibra::Resources;
using fibra::detail::fits;
using fibra::detail::resolve_resources;

namespace {

// Clears the variables resolve_resources reads, and restores none: each test sets its own.
void clear_env() {
  for (const char* v : {"SLURM_CPUS_PER_TASK", "SLURM_GPUS_PER_TASK", "SLURM_MEM_PER_CPU", "SLURM_MEM_PER_NODE",
                        "CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"})
    ::unsetenv(v);
}

}  // namespace

TEST(Resources, AWorkstationWorkerHasOneCpuNoGpuAndUncountedMemory) {
  clear_env();
  const auto r = resolve_resources(PoolOptions{}, 4);
  EXPECT_EQ(r.each.cpus, 1);
  EXPECT_EQ(r.each.gpus, 0);
  EXPECT_EQ(r.each.memory_mb, 0);
  EXPECT_TRUE(r.gpu_ids.empty());
}

TEST(Resources, SlurmVariablesGiveEachWorkerItsShare) {
  clear_env();
  ::setenv("SLURM_CPUS_PER_TASK", "4", 1);
  ::setenv("SLURM_MEM_PER_CPU", "1000", 1);
  ::setenv("SLURM_STEP_GPUS", "2,3", 1);
  ::setenv("SLURM_GPUS_PER_TASK", "1", 1);
  const auto r = resolve_resources(PoolOptions{}, 2);
  EXPECT_EQ(r.each.cpus, 4);
  EXPECT_EQ(r.each.memory_mb, 4000);  // per CPU, times the CPUs of a worker
  EXPECT_EQ(r.each.gpus, 1);
  EXPECT_EQ(r.gpu_ids, (std::vector<std::string>{"2", "3"}));
  ::unsetenv("SLURM_MEM_PER_CPU");
  ::setenv("SLURM_MEM_PER_NODE", "8000", 1);
  EXPECT_EQ(resolve_resources(PoolOptions{}, 4).each.memory_mb, 2000);  // the node's, shared by 4
  clear_env();
}

TEST(Resources, OptionsWinAndVisibleGpusAreSharedOut) {
  clear_env();
  ::setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3", 1);
  ::setenv("SLURM_CPUS_PER_TASK", "8", 1);
  auto r = resolve_resources(PoolOptions{}, 2);
  EXPECT_EQ(r.each.gpus, 2);  // 4 visible over 2 workers
  EXPECT_EQ(r.each.cpus, 8);
  PoolOptions o;
  o.offers = {2, 1, 512};
  o.gpu_ids = {"7"};
  r = resolve_resources(o, 3);
  EXPECT_EQ(r.each.cpus, 2);
  EXPECT_EQ(r.each.gpus, 1);
  EXPECT_EQ(r.each.memory_mb, 512);
  EXPECT_EQ(r.gpu_ids, (std::vector<std::string>{"7"}));
  clear_env();
}

TEST(Resources, GpusAskedWithNoneVisibleIsAClearError) {
  clear_env();
  PoolOptions o;
  o.offers.gpus = 1;
  try {
    resolve_resources(o, 2);
    FAIL() << "no error";
  } catch (const fibra::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no GPU is visible: set CUDA_VISIBLE_DEVICES"), std::string::npos) << e.what();
  }
  o.offers = {-1, 0, 0};
  EXPECT_THROW(resolve_resources(o, 2), fibra::ConfigError);
}

// PoolOptions::resources, the old spelling of offers (issue 45, item 6), still compiles and means
// what it meant, unless offers is set.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST(Resources, TheOldSpellingOfOffersStillWorks) {
  clear_env();
  PoolOptions o{.resources = {.cpus = 3, .memory_mb = 256}};
  auto r = resolve_resources(o, 1);
  EXPECT_EQ(r.each.cpus, 3);
  EXPECT_EQ(r.each.memory_mb, 256);
  o.resources.cpus = 5;
  EXPECT_EQ(resolve_resources(o, 1).each.cpus, 5);
  o.offers.cpus = 2;  // the new spelling wins
  EXPECT_EQ(resolve_resources(o, 1).each.cpus, 2);
  EXPECT_EQ(resolve_resources(o, 1).each.memory_mb, 0);
  // Read and assigned as a whole, as the Resources it was; a braced list still assigns it.
  PoolOptions p;
  p.resources = Resources{4, 1, 0};
  const Resources back = p.resources;
  EXPECT_EQ(back.cpus, 4);
  EXPECT_EQ(back.gpus, 1);
  p.resources = {6, 0, 0};
  EXPECT_EQ(resolve_resources(p, 1).each.cpus, 6);
  p.resources = {-1, 0, 0};
  try {
    resolve_resources(p, 1);
    FAIL() << "no error";
  } catch (const fibra::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("PoolOptions::resources cannot be negative"), std::string::npos) << e.what();
  }
}
#pragma GCC diagnostic pop

TEST(Resources, ARequestFitsAWorkerThatOffersAsMuch) {
  const Resources worker{2, 1, 1000};
  EXPECT_TRUE(fits(Resources{}, worker));
  EXPECT_TRUE(fits(Resources{2, 1, 1000}, worker));
  EXPECT_FALSE(fits(Resources{3, 0, 0}, worker));
  EXPECT_FALSE(fits(Resources{0, 2, 0}, worker));
  EXPECT_FALSE(fits(Resources{0, 0, 1001}, worker));
  EXPECT_TRUE(fits(Resources{0, 0, 1 << 20}, Resources{1, 0, 0}));  // a worker's memory not known: not checked
}

TEST(Placement, SlurmsCompressedHostListsExpand) {
  using fibra::detail::expand_hostlist;
  EXPECT_EQ(expand_hostlist("vnode[1-3]"), (std::vector<std::string>{"vnode1", "vnode2", "vnode3"}));
  EXPECT_EQ(expand_hostlist("gpu[08-10],login"), (std::vector<std::string>{"gpu08", "gpu09", "gpu10", "login"}));
  EXPECT_EQ(expand_hostlist("a[1,3-4]x,b"), (std::vector<std::string>{"a1x", "a3x", "a4x", "b"}));
  EXPECT_EQ(expand_hostlist("node7"), (std::vector<std::string>{"node7"}));
  EXPECT_THROW(expand_hostlist("node[1-"), fibra::ConfigError);
  EXPECT_THROW(expand_hostlist("node[3-1]"), fibra::ConfigError);
  EXPECT_THROW(expand_hostlist("node[a-b]"), fibra::ConfigError);
  EXPECT_THROW(expand_hostlist("n[9223372036854775807]"), fibra::ConfigError);  // no overflow, no endless loop
  EXPECT_THROW(expand_hostlist("n[99999999999999999999]"), fibra::ConfigError);
  EXPECT_THROW(expand_hostlist("a[1-2]b[3-4]"), fibra::ConfigError);
  EXPECT_THROW(expand_hostlist("node[]"), fibra::ConfigError);
  EXPECT_EQ(expand_hostlist("vnode1, vnode2"), (std::vector<std::string>{"vnode1", "vnode2"}));
}

TEST(Placement, AgentsSpreadOverAnAllocationOfSeveralNodes) {
  using fibra::detail::resolve_placement;
  ::setenv("SLURM_JOB_NODELIST", "vnode[1-3]", 1);
  ::setenv("SLURM_TASKS_PER_NODE", "3,2(x2)", 1);
  auto p = resolve_placement(PoolOptions{});
  EXPECT_EQ(p.hosts, (std::vector<std::string>{"vnode1", "vnode2", "vnode3"}));
  EXPECT_EQ(p.slots, (std::vector<int>{3, 2, 2}));
  EXPECT_FALSE(p.pack);
  ::unsetenv("SLURM_TASKS_PER_NODE");
  EXPECT_EQ(resolve_placement(PoolOptions{}).slots, (std::vector<int>{0, 0, 0}));  // not known
  PoolOptions none;
  none.placement = "none";
  EXPECT_TRUE(resolve_placement(none).hosts.empty());
  PoolOptions mine;
  mine.placement = "pack";
  mine.hosts = {"x:4", "y"};
  p = resolve_placement(mine);
  EXPECT_EQ(p.hosts, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(p.slots, (std::vector<int>{4, 0}));
  EXPECT_TRUE(p.pack);
  for (const char* bad : {"x:", ":3", "x:0", "x:two", "x:-1"}) {
    PoolOptions b;
    b.hosts = {bad};
    EXPECT_THROW(resolve_placement(b), fibra::ConfigError) << bad;
  }
  PoolOptions typo;
  typo.placement = "spred";
  EXPECT_THROW(resolve_placement(typo), fibra::ConfigError);
  ::setenv("SLURM_JOB_NODELIST", "vnode1", 1);
  EXPECT_TRUE(resolve_placement(PoolOptions{}).hosts.empty());  // one node: MPI places them there
  ::unsetenv("SLURM_JOB_NODELIST");
  EXPECT_TRUE(resolve_placement(PoolOptions{}).hosts.empty());
}

// A name this machine cannot resolve is refused before any spawn (Open MPI would hang in it),
// naming the host and where it came from; this host and localhost are never looked up.
TEST(Placement, HostsThatDoNotResolveAreRefusedBeforeASpawn) {
  using fibra::detail::check_hosts_resolve;
  using fibra::detail::Placement;
  EXPECT_NO_THROW(check_hosts_resolve(Placement{false, {"localhost", "thishost"}, {0, 0}, "PoolOptions::hosts"},
                                      "thishost.example"));
  try {
    check_hosts_resolve(Placement{false, {"localhost", "node1.invalid"}, {0, 0}, "SLURM_JOB_NODELIST"}, "vm");
    ADD_FAILURE() << "node1.invalid resolved";
  } catch (const fibra::ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("\"node1.invalid\" (from SLURM_JOB_NODELIST)"), std::string::npos) << what;
    EXPECT_NE(what.find("unset SLURM_JOB_NODELIST"), std::string::npos) << what;
  }
}

TEST(Placement, TasksPerNodeExpand) {
  using fibra::detail::expand_tasks_per_node;
  EXPECT_EQ(expand_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_tasks_per_node("4"), (std::vector<int>{4}));
  EXPECT_EQ(expand_tasks_per_node("1,5(x2)"), (std::vector<int>{1, 5, 5}));
  for (const char* bad : {"2(x3", "(x3)", "2(x)", "a", "2(y3)", "9999999"})
    EXPECT_THROW(expand_tasks_per_node(bad), fibra::ConfigError) << bad;
}

// Hosts vnode1 (the driver's, 3 slots), vnode2 (2), vnode3 (2). Spread counts MPI processes (the
// driver and agents) against the slots; pack counts workers (the driver as one), a CPU each.
TEST(Placement, SpreadGoesRoundAndPackFillsEachHostFirst) {
  using fibra::detail::choose_host;
  using fibra::detail::HostLoad;
  using fibra::detail::Placement;
  using Loads = std::vector<HostLoad>;
  const Placement spread{false, {"vnode1", "vnode2", "vnode3"}, {3, 2, 2}};
  const std::vector<bool> all(3, true);
  EXPECT_EQ(choose_host(spread, all, Loads{{1, 1}, {0, 0}, {0, 0}}, 2, 1), 0u);
  EXPECT_EQ(choose_host(spread, all, Loads{{2, 3}, {0, 0}, {0, 0}}, 2, 2), 1u);
  EXPECT_EQ(choose_host(spread, all, Loads{{2, 3}, {1, 2}, {0, 0}}, 2, 3), 2u);
  EXPECT_EQ(choose_host(spread, all, Loads{{2, 3}, {1, 2}, {1, 2}}, 2, 4), 0u);  // k mod n: a free process slot
  EXPECT_EQ(choose_host(spread, all, Loads{{3, 5}, {1, 2}, {1, 2}}, 2, 4), 1u);  // vnode1 full: the next with room
  EXPECT_EQ(choose_host(spread, all, Loads{{3, 5}, {2, 4}, {2, 4}}, 2, 4), 0u);  // all full: its own choice
  EXPECT_EQ(choose_host(spread, {true, false, true}, Loads{{1, 1}, {0, 0}, {0, 0}}, 2, 2), 2u);  // vnode2 avoided
  EXPECT_EQ(choose_host(spread, {false, false, false}, Loads{{1, 1}, {0, 0}, {0, 0}}, 2, 1), 3u);
  const Placement pack{true, {"vnode1", "vnode2", "vnode3"}, {3, 2, 2}};
  EXPECT_EQ(choose_host(pack, all, Loads{{1, 1}, {0, 0}, {0, 0}}, 1, 1), 0u);
  EXPECT_EQ(choose_host(pack, all, Loads{{2, 2}, {0, 0}, {0, 0}}, 1, 2), 0u);
  EXPECT_EQ(choose_host(pack, all, Loads{{3, 3}, {0, 0}, {0, 0}}, 1, 3), 1u);
  EXPECT_EQ(choose_host(pack, all, Loads{{2, 2}, {0, 0}, {0, 0}}, 2, 2), 1u);  // 2 workers no longer fit on vnode1
  EXPECT_EQ(choose_host(pack, all, Loads{{3, 3}, {2, 2}, {0, 0}}, 1, 4), 2u);
  EXPECT_EQ(choose_host(pack, all, Loads{{1, 1}, {0, 0}, {0, 0}}, 8, 1), 0u);  // fits nowhere: the first host
  EXPECT_EQ(choose_host(pack, {false, true, true}, Loads{{1, 1}, {0, 0}, {0, 0}}, 1, 1), 1u);
  const Placement unknown{true, {"a", "b"}, {0, 0}};
  EXPECT_EQ(choose_host(unknown, {true, true}, Loads{{5, 9}, {0, 0}}, 4, 6), 0u);  // slots not known: always room
}
