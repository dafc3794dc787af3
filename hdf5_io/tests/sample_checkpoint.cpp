// hdf5_io/tests/sample_checkpoint.cpp: writes a sample checkpoint for the `fibra inspect` tests.
//
// Usage: fibra_checkpoint_sample FILE partial|complete
//   partial:  10000 float64 results of 'simulate', items [0, 2500) done, flushed to the journal
//   complete: all 10000 done and finished (compact .h5, no journal)
#include <cstdio>
#include <cstring>
#include <vector>

#include "fibra/hdf5_io/store.hpp"

int main(int argc, char** argv) {
  using namespace fibra::hdf5_io;
  if (argc != 3 || (std::strcmp(argv[2], "partial") != 0 && std::strcmp(argv[2], "complete") != 0)) {
    std::fprintf(stderr, "usage: %s FILE partial|complete\n", argv[0]);
    return 2;
  }
  const bool complete = std::strcmp(argv[2], "complete") == 0;
  auto store = Store::create(argv[1], RunRecord{"simulate", 10000, "0123456789abcdef", 100, "0.1.0"},
                             element_type_of<double>());
  std::vector<double> v(complete ? 10000 : 2500);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = double(i) / 8;
  store.put_values<double>(0, v);
  if (complete)
    store.finish();
  else
    store.flush();
  return 0;
}
