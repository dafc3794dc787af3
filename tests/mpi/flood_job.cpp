// Four tasks print 20,000 lines each at once (issue 28, item 2); tests/mpi/flood_check.py reads
// this program's output (a file, a pipe; with and without lanes and prefixes) and wants every line
// whole and every line there. The last line of each task has no newline.
#include <fibra/fibra.hpp>

#include <cstdio>
#include <cstdlib>
#include <vector>

int flood(int task) {
  const int lines = std::getenv("FLOOD_LINES") ? std::atoi(std::getenv("FLOOD_LINES")) : 20000;
  for (int i = 0; i < lines; ++i)
    std::printf("task %d out line %d of %d: the quick brown fox jumps over the lazy dog%s", task, i, lines,
                i + 1 < lines ? "\n" : "");
  std::fflush(stdout);
  return task;
}
FIBRA_REMOTE(flood);

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  fibra::Pool pool(4);
  const std::vector<int> done = pool.map(flood, std::vector<int>{0, 1, 2, 3}, {.chunksize = 1});
  std::fprintf(stderr, "flood: %zu tasks done\n", done.size());
  return done.size() == 4 ? 0 : 1;
}
