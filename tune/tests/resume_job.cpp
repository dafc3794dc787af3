// tune/tests/resume_job.cpp: an experiment for tune.resume_after_sigkill. Ten trials of eight
// 150 ms steps on 2 workers, a checkpoint every 2 iterations; each trial's process appends
// "start v=<v>" and "restore v=<v> at <n>" to a log, so the test sees what a rerun started again.
// Usage: fibra_tune_resume_job <storage dir> <log file>
#include <fibra/fibra.hpp>
#include <fibra/tune.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

namespace {

std::string g_log;

class Slow {
 public:
  explicit Slow(const fibra::tune::Config& c) : v_(c.integer("v")), log_(c.text("log")) {
    std::ofstream(log_, std::ios::app) << "start v=" << v_ << "\n";
  }
  fibra::tune::Metrics step() {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    ++n_;
    return {{"score", double(v_ * 100 + n_)}};
  }
  std::string save() const { return std::to_string(n_); }
  void restore(const std::string& s) {
    n_ = std::stoi(s);
    std::ofstream(log_, std::ios::app) << "restore v=" << v_ << " at " << n_ << "\n";
  }

 private:
  std::int64_t v_;
  std::string log_;
  int n_ = 0;
};
FIBRA_TRAINABLE(Slow);

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <storage dir> <log file>\n", argv[0]);
    return 2;
  }
  fibra::Pool pool(2);
  const auto grid = fibra::tune::run<Slow>({{"v", fibra::tune::grid({0, 1, 2, 3, 4, 5, 6, 7, 8, 9})}, {"log", argv[2]}},
                                           {.metric = "score",
                                            .stop = {{"training_iteration", 8}},
                                            .storage = argv[1],
                                            .checkpoint_every = 2,
                                            .flush_interval_s = 0.2,
                                            .pool = &pool});
  std::printf("finished: %zu trials, %zu rows, best v=%lld\n", grid.trials().size(), grid.rows().size(),
              static_cast<long long>(grid.best().config.integer("v")));
  return 0;
}
