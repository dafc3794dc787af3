// Built against the installed fibra package only; writes, finishes and resumes a checkpoint.
#include <fibra/hdf5_io/store.hpp>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  using namespace fibra::hdf5_io;
  const char* path = argc > 1 ? argv[1] : "consumer.h5";
  const RunRecord run{"half", 100, "0", 10, "0.1.0"};
  std::vector<double> v(100);
  for (int i = 0; i < 100; ++i) v[i] = i / 2.0;
  {
    Store store = Store::create(path, run, element_type_of<double>());
    store.put_values<double>(0, v);
    store.finish();
  }
  Store again = Store::open_or_create(path, run, element_type_of<double>());
  const bool ok = again.n_done() == 100 && again.value<double>(99) == 49.5;
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
