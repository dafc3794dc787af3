// tune/tests/sample_experiment.cpp: writes a small experiment's file for `fibra inspect`'s test:
// four trials (v = 1..4, score = v * iteration), trial 3 done after 3 iterations, trial 0 stopped
// after 1, trial 1 an error, trial 2 waiting.
// Usage: fibra_tune_sample <path>
#include <cstdio>

#include "experiment.hpp"
#include "fibra/hdf5_io/tables.hpp"

int main(int argc, char** argv) {
  namespace tune = fibra::tune;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <path>\n", argv[0]);
    return 2;
  }
  tune::detail::Experiment ex("Sample", tune::Space{{"v", tune::grid({1, 2, 3, 4})}},
                              {.metric = "score", .stop = {{"training_iteration", 3}}, .max_failures = 0});
  for (int i = 0; i < 4; ++i) ex.start_next();
  ex.on_result(0, {{"score", 1}, {"done", 1}}, 0.1);
  ex.on_failure(1, "boom");
  for (int t = 1; t <= 3; ++t) ex.on_result(3, {{"score", 4.0 * t}}, 0.1 * t);
  fibra::hdf5_io::write_table_file(argv[1], ex.to_file(false, 2.5));
  return 0;
}
