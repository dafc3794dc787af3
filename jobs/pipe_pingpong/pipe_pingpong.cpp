// A Pipe between the driver and a Process: the driver sends 1,000 numbers, the process answers
// each with its square; the driver closes its end and the process, told so by PipeClosed, sends
// how many it answered on a second, one-way pipe and ends. Prints PASS and exits 0 only if every
// answer was right.
#include <fibra/fibra.hpp>

#include <cstdio>

void squares(fibra::Connection<long> end, fibra::Connection<long> done) {
  long answered = 0;
  try {
    for (;;) {
      const long x = end.recv();
      end.send(x * x);
      ++answered;
    }
  } catch (const fibra::PipeClosed&) {  // the driver closed its end
  }
  done.send(answered);
}
FIBRA_REMOTE(squares);

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  fibra::Pool pool(2);
  auto [mine, theirs] = fibra::Pipe<long>();
  auto [count_in, count_out] = fibra::Pipe<long>(false);  // the first end receives, the second sends
  fibra::Process server({.pool = &pool}, squares, theirs, count_out);
  server.start();
  for (long x = 0; x < 1000; ++x) {
    mine.send(x);
    const long y = mine.recv(std::chrono::seconds(60));
    if (y != x * x) {
      std::fprintf(stderr, "FAIL: the square of %ld came back as %ld\n", x, y);
      return 1;
    }
  }
  mine.close();
  const long answered = count_in.recv(std::chrono::seconds(60));
  if (!server.join(std::chrono::seconds(60)) || server.exitcode() != 0 || answered != 1000) {
    std::fprintf(stderr, "FAIL: the server answered %ld of 1000 and ended with %d\n", answered,
                 server.exitcode().value_or(-999));
    return 1;
  }
  std::printf("1000 round trips through a pipe, then PipeClosed ended the server\nPASS\n");
  return 0;
}
