// A rollout loop stopped by an Event: 3 actor Processes each push episodes (their id and a count)
// into a queue until the driver, once it has 300 episodes, sets the stop event; each then reports
// how many it pushed. The driver drains the queue and checks that it received exactly the
// episodes pushed, each once. Prints PASS and exits 0 only then.
#include <fibra/fibra.hpp>

#include <cstdio>
#include <set>
#include <utility>

void rollouts(long id, fibra::Event stop, fibra::Queue<std::pair<long, long>> episodes,
              fibra::Queue<std::pair<long, long>> totals) {
  long n = 0;
  while (!stop.is_set()) episodes.put({id, n++});  // one "episode"
  totals.put({id, n});
}
FIBRA_REMOTE(rollouts);

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  fibra::Pool pool(2);
  fibra::Event stop;
  fibra::Queue<std::pair<long, long>> episodes(100), totals;
  std::vector<fibra::Process> actors;
  for (long id = 0; id < 3; ++id)
    actors.emplace_back(fibra::ProcessOptions{.pool = &pool}, rollouts, id, stop, episodes, totals);
  for (auto& p : actors) p.start();
  std::set<std::pair<long, long>> seen;
  while (seen.size() < 300) seen.insert(episodes.get(std::chrono::seconds(60)));
  stop.set();
  long pushed = 0;
  for (int i = 0; i < 3; ++i) pushed += totals.get(std::chrono::seconds(60)).second;
  for (auto& p : actors)
    if (!p.join(std::chrono::seconds(60)) || p.exitcode() != 0) {
      std::fprintf(stderr, "FAIL: %s ended with %d\n", p.name().c_str(), p.exitcode().value_or(-999));
      return 1;
    }
  std::size_t received = seen.size();
  while (auto e = episodes.try_get()) {
    seen.insert(*e);
    ++received;
  }
  if (received != static_cast<std::size_t>(pushed) || seen.size() != received) {
    std::fprintf(stderr, "FAIL: %ld episodes pushed, %zu received, %zu distinct\n", pushed, received, seen.size());
    return 1;
  }
  std::printf("3 rollout processes stopped on an event; %ld episodes, each received once\nPASS\n", pushed);
  return 0;
}
