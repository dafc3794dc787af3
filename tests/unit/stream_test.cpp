// ChunkStream and ImapResults (chunking, ordering, the bounded window) against an in-process
// PoolCore that runs chunks through the registry and hands outcomes back out of order.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <numeric>
#include <ranges>
#include <thread>
#include <vector>

#include "fibra/pool.hpp"
#include "fibra/remote.hpp"

namespace {
long twice(long x) {
  if (x == -7) throw std::domain_error("-7 is unlucky");
  return 2 * x;
}
}  // namespace
FIBRA_REMOTE(twice);

namespace {

using namespace fibra;
using namespace fibra::detail;

class InProcessCore : public PoolCore {
 public:
  explicit InProcessCore(int workers) : workers_(workers) {
    thread_ = std::thread([this] {
      while (!stop_) {
        flush();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  ~InProcessCore() override {
    stop_ = true;
    thread_.join();
  }
  void submit(const std::shared_ptr<JobState>& job, std::uint64_t first, std::uint32_t count,
              std::string payload) override {
    std::lock_guard lk(mu_);
    submitted_items += count;
    chunk_sizes.push_back(count);
    pending_.push_back({job, first, count, std::move(payload)});
  }
  int size() const override { return workers_; }
  void resize(int) override {}
  void close() override {}
  void join() override {}
  void terminate() override {}
  bool closed() const override { return false; }

  std::atomic<std::uint64_t> submitted_items{0};
  std::vector<std::uint32_t> chunk_sizes;
  std::uint64_t ns_per_item = 1;  // what an executor would report for each item run

 private:
  struct P {
    std::shared_ptr<JobState> job;
    std::uint64_t first;
    std::uint32_t count;
    std::string payload;
  };
  // Runs everything pending, newest first, so outcomes arrive out of order.
  void flush() {
    std::vector<P> ps;
    {
      std::lock_guard lk(mu_);
      ps.swap(pending_);
    }
    for (auto it = ps.rbegin(); it != ps.rend(); ++it) {
      std::string out;
      ItemFailure f;
      Cursor c{0};
      ChunkOutcome o{it->first, it->count, {}, {}};
      if (it->job->fn().run_single(it->payload, it->count, out, f, c, {})) {
        o.payload = std::move(out);
        it->job->note_run(it->count, it->count * ns_per_item);
      } else {
        o.error = std::make_exception_ptr(RemoteError(f.message, f.type, f.message, {}));
      }
      it->job->deliver(std::move(o));
    }
  }
  int workers_;
  std::mutex mu_;
  std::vector<P> pending_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

const FunctionEntry& twice_entry() { return function_by_address(reinterpret_cast<const void*>(&twice), "imap"); }

template <bool Ordered, class Range>
auto imap(std::shared_ptr<InProcessCore> core, Range&& r, MapOptions o = {}) {
  using View = std::views::all_t<Range>;
  auto s = std::make_unique<ChunkStream<View, SingleArg<long>>>(core, twice_entry(), CallMode::single,
                                                                std::views::all(std::forward<Range>(r)), o, "imap");
  return ImapResults<long, View, SingleArg<long>, Ordered>(std::move(s));
}

TEST(Stream, OrderedImapYieldsInInputOrderDespiteOutOfOrderOutcomes) {
  auto core = std::make_shared<InProcessCore>(2);
  std::vector<long> in(1000);
  std::iota(in.begin(), in.end(), 0);
  std::vector<long> got;
  for (long v : imap<true>(core, in, {.chunksize = 7})) got.push_back(v);
  ASSERT_EQ(got.size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(got[i], 2 * in[i]) << i;
}

TEST(Stream, UnorderedImapYieldsEveryIndexOnce) {
  auto core = std::make_shared<InProcessCore>(2);
  std::vector<long> in(500);
  std::iota(in.begin(), in.end(), 1000);
  std::vector<int> seen(in.size(), 0);
  for (auto&& [i, v] : imap<false>(core, in, {.chunksize = 3})) {
    ASSERT_LT(i, in.size());
    EXPECT_EQ(v, 2 * in[i]);
    ++seen[i];
  }
  for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << i;
}

TEST(Stream, AutomaticChunkSizeStartsAtOneItemThenIsAQuarterShareCapped) {
  // Items of 1 ns: once timed, chunks are as large as the cap allows.
  auto core = std::make_shared<InProcessCore>(2);
  std::vector<long> in(100);
  for (long v : imap<true>(core, in)) (void)v;
  EXPECT_EQ(core->chunk_sizes.front(), 1u);                                               // not timed yet
  EXPECT_EQ(*std::max_element(core->chunk_sizes.begin(), core->chunk_sizes.end()), 13u);  // ceil(100 / (4 * 2))
  auto core2 = std::make_shared<InProcessCore>(1);
  std::vector<long> big(1'000'000);
  for (auto&& v : imap<false>(core2, big)) (void)v.second;
  EXPECT_EQ(*std::max_element(core2->chunk_sizes.begin(), core2->chunk_sizes.end()), 65536u);
}

TEST(Stream, AutomaticChunksOfSlowItemsHoldAboutTwentyMilliseconds) {
  auto core = std::make_shared<InProcessCore>(2);
  core->ns_per_item = 8'000'000;  // 8 ms an item: chunks of ceil(20 / 8) = 3 items
  std::vector<long> in(200);
  std::size_t n = 0;
  for (long v : imap<true>(core, in)) n += v == 0;
  EXPECT_EQ(n, 200u);
  EXPECT_EQ(core->chunk_sizes.front(), 1u);
  EXPECT_EQ(*std::max_element(core->chunk_sizes.begin(), core->chunk_sizes.end()), 3u);
}

TEST(Stream, AnExplicitChunkSizeIsAlwaysObeyed) {
  auto core = std::make_shared<InProcessCore>(2);
  core->ns_per_item = 8'000'000;
  std::vector<long> in(100);
  for (long v : imap<true>(core, in, {.chunksize = 10})) (void)v;
  EXPECT_EQ(core->chunk_sizes, std::vector<std::uint32_t>(10, 10u));
}

TEST(Stream, ImapOfAHugeLazyRangeKeepsMemoryBounded) {
  auto core = std::make_shared<InProcessCore>(2);
  auto huge = std::views::iota(0L, 1'000'000'000L);
  long n = 0;
  for (long v : imap<true>(core, huge, {.chunksize = 100, .max_inflight_chunks = 8})) {
    ASSERT_EQ(v, 2 * n);
    if (++n == 5000) break;
  }
  // At most the window (8 chunks of 100) beyond what was read was ever submitted.
  EXPECT_LE(core->submitted_items.load(), 5000u + 8 * 100);
}

TEST(Stream, ARemoteExceptionStopsTheIteration) {
  auto core = std::make_shared<InProcessCore>(2);
  std::vector<long> in(1000);
  std::iota(in.begin(), in.end(), 0);
  in[777] = -7;
  long n = 0;
  try {
    for (long v : imap<true>(core, in, {.chunksize = 10})) {
      (void)v;
      ++n;
    }
    FAIL() << "no error";
  } catch (const RemoteError& e) {
    EXPECT_EQ(e.type_name(), "std::domain_error");
    EXPECT_EQ(e.remote_message(), "-7 is unlucky");
  }
  EXPECT_LE(n, 770);
}

// A checkpointed imap (MapOptions::checkpoint) in one process: a rerun skips done items.
template <bool Ordered>
auto checkpointed_imap(std::shared_ptr<InProcessCore> core, const std::vector<long>& in, MapOptions o) {
  using View = std::views::all_t<const std::vector<long>&>;
  auto s = std::make_unique<ChunkStream<View, SingleArg<long>>>(core, twice_entry(), CallMode::single,
                                                                std::views::all(in), o, "imap");
  attach_checkpoint<long>(*s, twice_entry(), o, "imap");
  return ImapResults<long, View, SingleArg<long>, Ordered>(std::move(s));
}

TEST(Stream, ACheckpointedRerunSendsOnlyWhatIsNotDone) {
  const auto path =
      (std::filesystem::temp_directory_path() / ("fibra_stream_" + std::to_string(::getpid()) + ".h5")).string();
  std::vector<long> in(1000);
  std::iota(in.begin(), in.end(), 0);
  auto first = std::make_shared<InProcessCore>(2);
  long n = 0;
  for (long v : checkpointed_imap<true>(first, in, {.chunksize = 10, .checkpoint = path})) {
    ASSERT_EQ(v, 2 * n);
    if (++n == 300) break;
  }
  const auto done = hdf5_io::Store::open(path, hdf5_io::Access::read_only).n_done();
  EXPECT_GE(done, 300u);
  EXPECT_LE(done, 300u + 8 * 10);  // what was read, plus at most the window
  auto second = std::make_shared<InProcessCore>(2);
  std::vector<long> got;
  for (long v : checkpointed_imap<true>(second, in, {.chunksize = 7, .checkpoint = path})) got.push_back(v);
  ASSERT_EQ(got.size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(got[i], 2 * in[i]) << i;
  EXPECT_EQ(second->submitted_items.load(), in.size() - done);
  wait_for_checkpoints();
  EXPECT_EQ(hdf5_io::Store::open(path, hdf5_io::Access::read_only).n_done(), in.size());
  auto third = std::make_shared<InProcessCore>(2);
  std::size_t count = 0;
  for (auto&& [i, v] : checkpointed_imap<false>(third, in, {.checkpoint = path})) count += v == 2 * in[i];
  EXPECT_EQ(count, in.size());
  EXPECT_EQ(third->submitted_items.load(), 0u);
  wait_for_checkpoints();
  for (const char* ext : {"", ".journal", ".tmp", ".lock"}) std::filesystem::remove(path + ext);
}

}  // namespace
