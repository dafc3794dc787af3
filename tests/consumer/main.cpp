// Built against the installed fibra package only (find_package(fibra)); exits 0 when all is right.
#include <fibra/fibra.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <stdexcept>
#include <vector>

double half(int x) {
  if (x < 0) throw std::out_of_range("negative");
  return x / 2.0;
}
FIBRA_REMOTE(half);

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  fibra::Pool pool(2);
  std::vector<int> in;
  for (int i = 0; i < 1000; ++i) in.push_back(i);

  int bad = 0;
  auto r = pool.map(half, in);
  for (int i = 0; i < 1000; ++i) bad += r[i] != i / 2.0;
  std::vector<int> seen(in.size());
  for (auto&& [i, v] : pool.imap_unordered(half, in)) {
    seen[i]++;
    bad += v != double(i) / 2.0;
  }
  for (int s : seen) bad += s != 1;
  bad += pool.apply_async(half, 9).get() != 4.5;
  try {
    pool.apply_async(half, -1).get();
    bad += 1;
  } catch (const fibra::RemoteError& e) {
    bad += e.type_name() != "std::out_of_range";
    std::printf("RemoteError as expected: %s\n", e.what());
  }
  // A checkpointed map (fibra::hdf5_io comes with the package): a rerun resumes the finished file.
  const std::string ckpt =
      (std::filesystem::temp_directory_path() / ("fibra_consumer_" + std::to_string(::getpid()) + ".h5")).string();
  bad += pool.map(half, in, {.checkpoint = ckpt}) != r;
  bad += pool.map(half, in, {.checkpoint = ckpt}) != r;
  for (const char* ext : {"", ".journal", ".lock"}) std::filesystem::remove(ckpt + ext);
  std::printf("%s: %d wrong\n", bad ? "FAIL" : "PASS", bad);
  return bad ? 1 : 0;
}
