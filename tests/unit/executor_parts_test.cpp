// The executor's parts (src/executor/) on their own, over real Unix sockets: the frames written to
// and read from a socket (src/transport/frame_writer.hpp), the inbox matching replies to the calls
// that wait for them and failing them when its agent goes, and a task's puts in flight.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fibra/error.hpp"
#include "fibra/future.hpp"
#include "common/unique_fd.hpp"
#include "executor/channel_calls.hpp"
#include "executor/inbox.hpp"
#include "transport/frame_reader.hpp"
#include "transport/frame_writer.hpp"
#include "transport/wire.hpp"

namespace wire = fibra::wire;
using fibra::detail::ChunkOutcome;
using fibra::detail::JobState;
using fibra::detail::read_frame;
using fibra::detail::UniqueFd;
using fibra::detail::write_frame;
using fibra::detail::write_frame_some;

namespace {

struct SocketPair {
  UniqueFd a, b;
  SocketPair() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) throw std::runtime_error("socketpair");
    a = UniqueFd(fds[0]);
    b = UniqueFd(fds[1]);
  }
};

std::shared_ptr<JobState> a_call() {
  fibra::detail::RetryPolicy once;
  once.retries = 0;
  return std::make_shared<JobState>(fibra::detail::channel_entry(), fibra::detail::CallMode::tuple, once);
}

// What the agent's side of the socket read: the next frame, which must be a request.
wire::Request next_request(int fd) {
  std::uint64_t prefix = 0;
  std::string body;
  if (!read_frame(fd, prefix, body)) throw std::runtime_error("the executor's side wrote no frame");
  EXPECT_EQ(wire::frame_kind(prefix), wire::frame_request);
  return wire::decode<wire::Request>(body);
}

void reply(int fd, const wire::Reply& r) {
  const std::string body = wire::encode(r);
  ASSERT_TRUE(write_frame(fd, wire::frame_prefix(wire::frame_reply, body.size()), body));
}

// Reads what comes within `most` until `done`; false if it did not come (the inbox reads the
// socket itself only when a thread waits, as a task's get would).
template <class F>
bool read_until(fibra::detail::exec::Inbox& inbox, F done, std::chrono::seconds most = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + most;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    inbox.read_a_little(std::chrono::milliseconds(50), false);
  }
  return true;
}

}  // namespace

TEST(FrameWriter, AFrameAndItsDescriptorsArriveWholeThroughAFrameReader) {
  SocketPair s;
  ASSERT_EQ(::fcntl(s.b.get(), F_SETFL, O_NONBLOCK), 0);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  UniqueFd r(pipe_fds[0]), w(pipe_fds[1]);
  const std::string body = "a batch's bytes";
  const int sent_fds[] = {w.get()};
  ASSERT_TRUE(write_frame(s.a.get(), wire::frame_prefix(wire::frame_results, body.size()), body, sent_fds));
  fibra::detail::FrameReader reader(wire::frame_wake, 1 << 20);
  bool got = false;
  ASSERT_EQ(reader.read(s.b.get(), got), fibra::detail::FrameReader::Status::frame);
  auto f = reader.take();
  EXPECT_EQ(f.kind, wire::frame_results);
  EXPECT_EQ(f.body, body);
  ASSERT_EQ(f.fds.size(), 1u);
  // The descriptor received is the pipe's write end: what goes through it comes out of the read end.
  ASSERT_EQ(::write(f.fds[0].get(), "x", 1), 1);
  char c = 0;
  ASSERT_EQ(::read(r.get(), &c, 1), 1);
  EXPECT_EQ(c, 'x');
}

TEST(FrameWriter, AFrameLargerThanTheSocketTakesGoesInPiecesThatReadBackWhole) {
  SocketPair s;
  ASSERT_EQ(::fcntl(s.a.get(), F_SETFL, O_NONBLOCK), 0);
  std::string body(8 << 20, '\0');
  for (std::size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>(i * 131 + (i >> 11));
  const std::uint64_t prefix = wire::frame_prefix(wire::frame_request, body.size());
  std::string read_back;
  std::uint64_t read_prefix = 0;
  std::thread reader([&] { read_frame(s.b.get(), read_prefix, read_back); });
  std::size_t done = 0, pieces = 0;
  bool gone = false;
  while (done < sizeof prefix + body.size()) {
    const auto k = write_frame_some(s.a.get(), prefix, body, done);
    if (k < 0) {  // (the reader is there: the socket cannot be gone)
      gone = true;
      s.a = UniqueFd();  // the reader's read ends, and it can be joined
      break;
    }
    if (k == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    done += static_cast<std::size_t>(k);
    ++pieces;
  }
  reader.join();
  ASSERT_FALSE(gone) << "write_frame_some said the peer was gone while it read";
  EXPECT_GT(pieces, 1u) << "8 MiB went in one write: the test shows nothing about pieces";
  EXPECT_EQ(read_prefix, prefix);
  EXPECT_TRUE(read_back == body) << "the frame read back differs from the one written in pieces";
}

TEST(FrameWriter, AWriteToAClosedPeerSaysItIsGone) {
  SocketPair s;
  s.b = UniqueFd();
  EXPECT_FALSE(write_frame(s.a.get(), wire::frame_prefix(wire::frame_results, 3), "abc"));
  std::uint64_t prefix = 0;
  std::string body;
  SocketPair t;
  t.b = UniqueFd();
  EXPECT_FALSE(read_frame(t.a.get(), prefix, body));
}

TEST(FrameWriter, MoreDescriptorsThanOneMessageCarriesAreRefusedNotOverflowed) {
  SocketPair s;
  const std::vector<int> fds(fibra::detail::FrameReader::max_fds + 1, s.a.get());
  EXPECT_EQ(write_frame_some(s.a.get(), wire::frame_prefix(wire::frame_results, 1), "x", 0, fds), -1);
  EXPECT_FALSE(write_frame(s.a.get(), wire::frame_prefix(wire::frame_results, 1), "x", fds));
}

TEST(ExecutorInbox, RepliesReachTheCallsTheyAnswerWhateverTheirOrder) {
  SocketPair s;
  fibra::detail::exec::Inbox inbox(s.a.get());
  auto first = a_call(), second = a_call();
  wire::Request r;
  r.payload = "first";
  inbox.request(r, first);
  r.payload = "second";
  inbox.request(r, second);
  const wire::Request got1 = next_request(s.b.get()), got2 = next_request(s.b.get());
  EXPECT_EQ(got1.payload, "first");
  EXPECT_EQ(got2.payload, "second");
  EXPECT_NE(got1.id, got2.id);
  // Answered the other way round; an answer to no call (a stale id) is dropped.
  wire::Reply stale;
  stale.id = got2.id + 1000;
  stale.payload = fibra::detail::encode_value(std::string("nobody's"));
  reply(s.b.get(), stale);
  wire::Reply a2;
  a2.id = got2.id;
  a2.payload = fibra::detail::encode_value(std::string("to the second"));
  reply(s.b.get(), a2);
  wire::Reply a1;
  a1.id = got1.id;
  a1.ok = false;
  a1.payload = wire::encode(wire::ErrorText{"fibra::GetTimeout", "fibra: gave up waiting", "", ""});
  reply(s.b.get(), a1);
  ASSERT_TRUE(read_until(inbox, [&] { return first->ready() && second->ready(); }))
      << "the replies were written, but the calls they answer did not get them within 10 s";
  EXPECT_EQ(fibra::Future<std::string>(second).get(), "to the second");
  // fibra's own error types reach a task's caller as themselves (issue 45).
  EXPECT_THROW(fibra::Future<std::string>(first).get(), fibra::GetTimeout);
}

TEST(ExecutorInbox, ACallWaitingWhenTheAgentGoesFailsWithPoolClosed) {
  SocketPair s;
  fibra::detail::exec::Inbox inbox(s.a.get());
  auto waiting = a_call();
  inbox.request(wire::Request{}, waiting);
  next_request(s.b.get());
  s.b = UniqueFd();  // the agent is gone
  ASSERT_TRUE(read_until(inbox, [&] { return waiting->ready(); }))
      << "the socket closed, but the call waiting on it was not answered within 10 s";
  EXPECT_TRUE(inbox.closed());
  EXPECT_THROW(fibra::Future<std::string>(waiting).get(), fibra::PoolClosed);
}

TEST(PutsInFlight, AFailedPutIsToldAtTheNextCallAndDrainWaitsForEveryAnswer) {
  fibra::detail::exec::PutsInFlight puts;
  auto ok = a_call(), failed = a_call(), late = a_call();
  puts.add(ok);
  puts.add(failed);
  puts.add(late);
  EXPECT_NO_THROW(puts.reap()) << "nothing was answered yet: nothing to tell";
  ok->deliver(ChunkOutcome{0, 1, fibra::detail::encode_value(std::string()), {}, {}});
  failed->deliver(ChunkOutcome{0, 1, {}, std::make_exception_ptr(fibra::QueueClosed("fibra: closed")), {}});
  try {
    puts.reap();
    ADD_FAILURE() << "the failed put was not told";
  } catch (const fibra::QueueClosed&) {
    ADD_FAILURE() << "a put's failure must not read as the end of a queue's stream";
  } catch (const fibra::Error& e) {
    EXPECT_NE(std::string(e.what()).find("an earlier put of this task"), std::string::npos) << e.what();
  }
  std::atomic<bool> answering{false};
  std::thread answer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    answering = true;  // (before the answer: drain cannot see the answer without this set)
    late->deliver(ChunkOutcome{0, 1, fibra::detail::encode_value(std::string()), {}, {}});
  });
  EXPECT_NO_THROW(puts.drain());
  answer.join();
  EXPECT_TRUE(answering) << "drain returned before the last put was answered";
  EXPECT_FALSE(puts.full());
}
