// hdf5_io/tests/sample_checkpoint.cpp: the example of docs/checkpoint-format.md, compiled and run;
// it writes the sample checkpoints of the `fibra inspect` tests.
//
// Usage: fibra_checkpoint_sample FILE partial|complete
//   partial:  10000 float64 results of 'simulate', stops after 2500, flushed to the journal
//   complete: all 10000 done and finished (compact .h5, no journal)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "fibra/hdf5_io/store.hpp"
#include "fibra/version.hpp"

using namespace fibra::hdf5_io;

std::vector<double> compute(std::uint64_t first, std::uint64_t count) {
  std::vector<double> out(count);
  for (std::uint64_t i = 0; i < count; ++i) out[i] = double(first + i) / 8;
  return out;
}

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[2], "partial") != 0 && std::strcmp(argv[2], "complete") != 0)) {
    std::fprintf(stderr, "usage: %s FILE partial|complete\n", argv[0]);
    return 2;
  }
  const bool complete = std::strcmp(argv[2], "complete") == 0;
  const std::uint64_t stop = complete ? 10000 : 2500;
  std::filesystem::remove(argv[1]);  // start over, so that the inspect tests always see the same file

  RunRecord run{"simulate", 10000, "0123456789abcdef", 100, fibra::version};
  Store store = Store::open_or_create(argv[1], run, element_type_of<double>());
  for (ItemRange r : store.pending_ranges()) {  // what is not done yet
    if (r.first >= stop) break;
    std::vector<double> out = compute(r.first, std::min(r.count, stop - r.first));
    store.put_values<double>(r.first, out);  // memory + journal buffer
    store.flush_if_due();                    // at most one flush per flush_interval
  }
  if (complete)
    store.finish();  // everything into a compact .h5 file, journal removed
  else
    store.flush();  // durable, in the journal
  return 0;
}
