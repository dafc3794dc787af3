#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include "transport/auth.hpp"
#include "transport/join.hpp"
#include "transport/tcp.hpp"
#include "transport/wire.hpp"

namespace {

using namespace fibra;

TEST(Wire, TaskBatchRoundTrips) {
  std::string b = wire::begin_batch();
  wire::append_task(b, {7, 1, 99, detail::CallMode::single, 100, 3}, "abc");
  wire::TaskHeader h2{8, 2, 98, detail::CallMode::tuple, 103, 0, 2.5, true, {1, 4}};
  h2.objects = {{11, 3, 4096, 1234, 7, 5678}};
  h2.keep_from = std::uint64_t(1) << 20;
  h2.keep_id = 99;
  wire::append_task(b, h2, "");
  wire::set_count(b, 2);
  auto t = wire::parse_tasks(b);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].header.chunk, 7u);
  EXPECT_EQ(t[0].header.attempt, 1u);
  EXPECT_EQ(t[0].header.fn, 99u);
  EXPECT_EQ(t[0].header.first, 100u);
  EXPECT_EQ(t[0].header.count, 3u);
  EXPECT_EQ(t[0].payload, "abc");
  EXPECT_EQ(t[0].header.timeout_s, 0.0);
  EXPECT_FALSE(t[0].header.keep_going);
  EXPECT_TRUE(t[0].header.skip.empty());
  EXPECT_EQ(t[1].header.mode, detail::CallMode::tuple);
  EXPECT_EQ(t[1].header.timeout_s, 2.5);
  EXPECT_TRUE(t[1].header.keep_going);
  EXPECT_EQ(t[1].header.skip, (std::vector<std::uint32_t>{1, 4}));
  EXPECT_EQ(t[1].payload, "");
  ASSERT_EQ(t[1].header.objects.size(), 1u);
  const wire::ObjectRef& o = t[1].header.objects[0];
  EXPECT_EQ(o.id, 11u);
  EXPECT_EQ(o.at, 3u);
  EXPECT_EQ(o.size, 4096u);
  EXPECT_EQ(o.pid, 1234);
  EXPECT_EQ(o.fd, 7);
  EXPECT_EQ(o.origin, 5678);
  EXPECT_EQ(t[1].header.keep_from, std::uint64_t(1) << 20);
  EXPECT_EQ(t[1].header.keep_id, 99u);
  EXPECT_EQ(t[0].header.keep_from, 0u);
}

// Payloads start at multiples of 16 bytes from the message's start (a vector's doubles can then be
// read as doubles), also in a batch sent from pieces: headers in one buffer, payloads where they
// lie (mpi::Pieces), where each header is told how many payload bytes come before it.
TEST(Wire, PayloadsStartAlignedAlsoInABatchSentInPieces) {
  const std::vector<std::string> payloads{"abc", std::string(5, 'x'), "", std::string(17, 'y'), "z"};
  std::string heads = wire::begin_batch();
  std::vector<std::size_t> ends;
  std::size_t before = 0;
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    wire::append_task_head(heads, {i + 1, 1, 9, detail::CallMode::single, 0, 1}, payloads[i].size(), before);
    ends.push_back(heads.size());
    before += payloads[i].size();
  }
  wire::set_count(heads, std::uint32_t(payloads.size()));
  std::string message;  // as Pieces::write_to joins them
  std::size_t at = 0;
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    message.append(heads, at, ends[i] - at);
    message += payloads[i];
    at = ends[i];
  }
  message.append(heads, at);
  const auto t = wire::parse_tasks(message);
  ASSERT_EQ(t.size(), payloads.size());
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    EXPECT_EQ(t[i].header.chunk, i + 1);
    EXPECT_EQ(t[i].payload, payloads[i]) << i;
    EXPECT_EQ(std::size_t(t[i].payload.data() - message.data()) % 16, 0u) << i;
  }

  // Result frames too, whether the payload is appended whole or written after open_result.
  std::string r = wire::begin_results(42);
  wire::append_result(r, {1, 1, wire::Status::ok}, "abc");
  const std::size_t open = wire::open_result(r, {2, 1, wire::Status::ok});
  r += std::string(21, 'q');
  wire::close_result(r, open, {2, 1, wire::Status::ok});
  wire::append_result(r, {3, 1, wire::Status::ok}, "");
  const auto b = wire::parse_results(r);
  ASSERT_EQ(b.results.size(), 3u);
  EXPECT_EQ(b.results[0].payload, "abc");
  EXPECT_EQ(b.results[1].payload, std::string(21, 'q'));
  EXPECT_EQ(b.results[2].payload, "");
  for (const auto& x : b.results) EXPECT_EQ(std::size_t(x.payload.data() - r.data()) % 16, 0u);
}

TEST(Wire, PartialResultRoundTrips) {
  std::vector<detail::ItemFailure> f{{1, "std::domain_error", "bad"}, {4, "skipped", "not run again"}};
  const std::string encoded = wire::encode_partial(f, "results");  // what p's views point into
  auto p = wire::decode_partial(encoded);
  ASSERT_EQ(p.failures.size(), 2u);
  EXPECT_EQ(p.failures[0].offset, 1u);
  EXPECT_EQ(p.failures[0].type, "std::domain_error");
  EXPECT_EQ(p.failures[1].message, "not run again");
  EXPECT_EQ(p.results, "results");
}

TEST(Wire, ResultBatchRoundTrips) {
  std::string b = wire::begin_results(4242);
  wire::append_result(b, {7, 1, wire::Status::ok}, "xyz");
  detail::ItemFailure f{5, "std::runtime_error", "boom"};
  wire::append_result(b, {8, 3, wire::Status::raised, 1234, 1796600000123456}, wire::encode(f));
  auto r = wire::parse_results(b);
  EXPECT_EQ(r.executor_pid, 4242);
  ASSERT_EQ(r.results.size(), 2u);
  EXPECT_EQ(r.results[0].payload, "xyz");
  EXPECT_EQ(r.results[1].header.status, wire::Status::raised);
  EXPECT_EQ(r.results[1].header.run_ns, 1234u);
  EXPECT_EQ(r.results[1].header.start_us, 1796600000123456);  // when it began, for the event log
  EXPECT_EQ(r.results[0].header.start_us, 0);
  EXPECT_EQ(wire::result_count(b), 2u);
  auto g = wire::decode<detail::ItemFailure>(r.results[1].payload);
  EXPECT_EQ(g.offset, 5u);
  EXPECT_EQ(g.type, "std::runtime_error");
  EXPECT_EQ(g.message, "boom");
}

TEST(Wire, TruncatedBatchIsAnError) {
  std::string b = wire::begin_batch();
  wire::append_task(b, {7, 1, 99, detail::CallMode::single, 0, 3}, "abcdef");
  wire::set_count(b, 1);
  b.resize(b.size() - 2);
  EXPECT_THROW(wire::parse_tasks(b), wire::Malformed);
}

TEST(Wire, HelloRoundTrips) {
  wire::Hello h{123, 4, 999, "node7", {5, 6}, 40123, "10.1.2.3", true};
  auto g = wire::decode<wire::Hello>(wire::encode(h));
  EXPECT_EQ(g.fingerprint, 123u);
  EXPECT_EQ(g.functions, 4u);
  EXPECT_EQ(g.pid, 999);
  EXPECT_EQ(g.host, "node7");
  EXPECT_EQ(g.lane_fds, (std::vector<std::int32_t>{5, 6}));
  EXPECT_EQ(g.object_port, 40123u);
  EXPECT_EQ(g.object_host, "10.1.2.3");
  EXPECT_TRUE(g.copies_kept);
}

TEST(Wire, AnObjectMessageSplitsIntoItsHeadAndExactlyItsBytes) {
  const std::string m = wire::encode(wire::ObjectHead{9, 1234, 5}) + "bytes";
  wire::ObjectHead h;
  EXPECT_EQ(wire::object_bytes(m, h), "bytes");
  EXPECT_EQ(h.id, 9u);
  EXPECT_EQ(h.origin, 1234);
  EXPECT_EQ(h.size, 5u);
  EXPECT_THROW(wire::object_bytes(m.substr(0, m.size() - 1), h), wire::Malformed) << "a byte short";
  EXPECT_THROW(wire::object_bytes(m + "!", h), wire::Malformed) << "a byte over";
}

TEST(Wire, ObjectFetchRoundTrips) {
  const wire::ObjectFetch f{{77, -5, std::uint64_t(1) << 33}, "vnode2", 45000};
  auto g = wire::decode<wire::ObjectFetch>(wire::encode(f));
  EXPECT_EQ(g.head.id, 77u);
  EXPECT_EQ(g.head.origin, -5);
  EXPECT_EQ(g.head.size, std::uint64_t(1) << 33);
  EXPECT_EQ(g.host, "vnode2");
  EXPECT_EQ(g.port, 45000u);
  EXPECT_THROW(wire::decode<wire::ObjectFetch>(wire::encode(f).substr(0, 20)), wire::Malformed);
}

TEST(Wire, AResultOpenedBeforeItsPayloadIsClosedWithItsLengthStatusAndTime) {
  std::string b = wire::begin_results(7);
  EXPECT_EQ(wire::result_count(b), 0u);
  const std::size_t at = wire::open_result(b, {3, 1, wire::Status::ok});
  b += "payload!";
  wire::close_result(b, at, {3, 1, wire::Status::partial, 99});
  auto r = wire::parse_results(b);
  ASSERT_EQ(r.results.size(), 1u);
  EXPECT_EQ(r.results[0].header.status, wire::Status::partial);
  EXPECT_EQ(r.results[0].header.run_ns, 99u);
  EXPECT_EQ(r.results[0].payload, "payload!");
}

TEST(Wire, AgentSetupRoundTrips) {
  detail::RetryPolicy policy{5, true, 1.5, true, {2.0, 1, 512}};
  wire::AgentSetup s{0.25,
                     7.5,
                     4,
                     3,
                     true,
                     {"0,1", ""},
                     2.5,
                     policy,
                     0x1234567890abcdefULL,
                     std::uint64_t(300) << 20,
                     "node7",
                     4321,
                     {2500, 100, 3.5},
                     3};
  auto g = wire::decode<wire::AgentSetup>(wire::encode(s));
  EXPECT_EQ(g.spare_processes, 3);
  EXPECT_EQ(g.simulation.agents, 2500u);
  EXPECT_EQ(g.simulation.silent_every, 100u);
  EXPECT_EQ(g.simulation.silent_after_s, 3.5);
  EXPECT_EQ(g.heartbeat_s, 0.25);
  EXPECT_EQ(g.driver_silence_s, 7.5);
  EXPECT_EQ(g.executors, 4);
  EXPECT_EQ(g.slot, 3);
  EXPECT_TRUE(g.prefix_output);
  EXPECT_EQ(g.gpus, (std::vector<std::string>{"0,1", ""}));
  EXPECT_EQ(g.cpus, 2.5);
  EXPECT_EQ(g.policy.retries, 5u);
  EXPECT_TRUE(g.policy.keep_going);
  EXPECT_EQ(g.policy.need.memory_mb, 512);
  EXPECT_EQ(g.lane_nonce, 0x1234567890abcdefULL);
  EXPECT_EQ(g.keep_freed_bytes, std::uint64_t(300) << 20);
  EXPECT_EQ(g.driver_host, "node7");
  EXPECT_EQ(g.driver_pid, 4321);
  // the layout both sides read: doubles, ints, a bool, then a count and sized strings, a double, a
  // policy (u32, bool, double, bool, then its needs: double, i32, i64), the lanes' nonce, the freed
  // memory its executors keep, the driver's host (a sized string) and pid, the simulation (u32,
  // u32, double), the spare processes (i32), the initializer (u64, u8, two sized strings), the
  // tasks per executor (u32), the secret file's path (a sized string: never the secret) and whether
  // copies between agents are sealed (a bool)
  constexpr std::size_t policy_bytes = 4u + 1u + 8u + 1u + (8u + 4u + 8u);
  EXPECT_EQ(wire::encode(policy).size(), policy_bytes);
  EXPECT_EQ(wire::encode(s).size(), 8u + 8u + 4u + 4u + 1u + (8u + (8u + 3u) + (8u + 0u)) + 8u + policy_bytes + 8u +
                                        8u + (8u + 5u) + 8u + (4u + 4u + 8u) + 4u + (8u + 1u + 8u + 8u) + 4u + 8u + 1u);
}

// The pool's initializer reaches executors as text in their environment, whole: its function,
// how its arguments are laid out, its name, and argument bytes that include a NUL.
TEST(Wire, APoolsInitializerTravelsWholeAsText) {
  wire::Initializer i{0x0123456789abcdefULL, detail::CallMode::single, "load_model", std::string("a\0b", 3)};
  wire::AgentSetup s;
  s.initializer = i;
  s.max_tasks_per_child = 2;
  const auto g = wire::decode<wire::AgentSetup>(wire::encode(s));
  EXPECT_EQ(g.max_tasks_per_child, 2u);
  const std::string text = wire::initializer_text(g.initializer);
  EXPECT_EQ(text.find_first_not_of("0123456789abcdef"), std::string::npos) << text;
  const auto j = wire::initializer_from_text(text);
  EXPECT_EQ(j.fn, i.fn);
  EXPECT_EQ(j.mode, detail::CallMode::single);
  EXPECT_EQ(j.name, "load_model");
  EXPECT_EQ(j.args, std::string("a\0b", 3));
  EXPECT_THROW(wire::initializer_from_text("xyz0"), wire::Malformed);
  EXPECT_THROW(wire::initializer_from_text(text.substr(2)), wire::Malformed);
}

// The pool's default policy reaches executors as text in their environment, every field of it
// (the text form once dropped keep_going and the needs).
TEST(Wire, APoolsDefaultPolicyTravelsWholeAsText) {
  const detail::RetryPolicy p{7, true, 2.5, true, {1.5, 2, 300}};
  const std::string text = wire::policy_text(p);
  EXPECT_EQ(text.size(), 2 * wire::encode(p).size());
  EXPECT_EQ(text.find_first_not_of("0123456789abcdef"), std::string::npos) << text;
  const auto q = wire::policy_from_text(text);
  EXPECT_EQ(q.retries, 7u);
  EXPECT_TRUE(q.retry_exceptions);
  EXPECT_EQ(q.task_timeout_s, 2.5);
  EXPECT_TRUE(q.keep_going);
  EXPECT_EQ(q.need.cpus, 1.5);
  EXPECT_EQ(q.need.gpus, 2);
  EXPECT_EQ(q.need.memory_mb, 300);
  EXPECT_THROW(wire::policy_from_text("junk"), wire::Malformed);          // not hex
  EXPECT_THROW(wire::policy_from_text(text.substr(2)), wire::Malformed);  // short
  EXPECT_THROW(wire::policy_from_text(text + "00"), wire::Malformed);     // a byte too many
}

TEST(Wire, RequestsAndRepliesRoundTrip) {
  wire::Request r{7, 42, detail::CallMode::single, 10, 3, 5, 9, "args", {4, true, 0.5, true, {1.5, 2, 300}}};
  r.objects = {{21, 2, 100, 11, 12, 13}};
  const auto g = wire::decode<wire::Request>(wire::encode(r));
  ASSERT_EQ(g.objects.size(), 1u);
  EXPECT_EQ(g.objects[0].id, 21u);
  EXPECT_EQ(g.objects[0].at, 2u);
  EXPECT_EQ(g.objects[0].origin, 13);
  EXPECT_EQ(g.id, 7u);
  EXPECT_EQ(g.fn, 42u);
  EXPECT_EQ(g.mode, detail::CallMode::single);
  EXPECT_EQ(g.first, 10u);
  EXPECT_EQ(g.count, 3u);
  EXPECT_EQ(g.pool, 5u);
  EXPECT_EQ(g.actor, 9u);
  EXPECT_EQ(g.payload, "args");
  EXPECT_EQ(g.policy.retries, 4u);
  EXPECT_TRUE(g.policy.retry_exceptions);
  EXPECT_EQ(g.policy.task_timeout_s, 0.5);
  EXPECT_TRUE(g.policy.keep_going);
  EXPECT_EQ(g.policy.need.cpus, 1.5);
  EXPECT_EQ(g.policy.need.gpus, 2);
  EXPECT_EQ(g.policy.need.memory_mb, 300);
  // the agent passes a request on behind its route, bytes unchanged: the driver reads both
  const std::string bytes = wire::encode(r);
  const std::string routed = wire::routed_request(wire::route_actor_bit | 3, bytes);
  EXPECT_EQ(routed.size(), 8u + bytes.size());
  const auto [route, back] = wire::parse_routed_request(routed);
  EXPECT_EQ(route, wire::route_actor_bit | 3);
  EXPECT_EQ(back.payload, "args");
  EXPECT_EQ(back.policy.need.memory_mb, 300);
  EXPECT_THROW(wire::parse_routed_request(routed.substr(0, 5)), wire::Malformed);
  const wire::Reply p{wire::route_actor_bit | 4, 7, false, "why", {2}, {"e"}};
  const auto q = wire::decode<wire::Reply>(wire::encode(p));
  EXPECT_EQ(q.route, wire::route_actor_bit | 4);
  EXPECT_EQ(q.id, 7u);
  EXPECT_FALSE(q.ok);
  EXPECT_EQ(q.payload, "why");
  EXPECT_EQ(q.error_offsets, std::vector<std::uint32_t>{2});
  EXPECT_EQ(q.errors, std::vector<std::string>{"e"});
  // a frame's kind lives in the top byte of its length, apart from lengths up to 2^56
  const auto prefix = wire::frame_prefix(wire::frame_request, (std::uint64_t(1) << 40) + 5);
  EXPECT_EQ(wire::frame_kind(prefix), wire::frame_request);
  EXPECT_EQ(wire::frame_length(prefix), (std::uint64_t(1) << 40) + 5);
  EXPECT_EQ(wire::frame_kind(std::uint64_t(12345)), wire::frame_batch);  // a plain length is a batch
}

// A wait count is an i32 both hops (executor -> agent, agent -> driver), and nothing more.
TEST(Wire, AWaitDeltaIsFourBytesExactly) {
  const std::string m = wire::encode(wire::WaitDelta{-3});
  EXPECT_EQ(m.size(), 4u);
  EXPECT_EQ(wire::decode_whole<wire::WaitDelta>(m).delta, -3);
  EXPECT_THROW(wire::decode_whole<wire::WaitDelta>(m + "x"), wire::Malformed);
  EXPECT_THROW(wire::decode_whole<wire::WaitDelta>(m.substr(1)), wire::Malformed);
}

// A queue's items travel as one block: each item's size (8 bytes) and its encoding, back to back.
// The driver finds where each starts before it keeps them, and refuses bytes that do not hold what
// they say (a cut item, one that runs past the end, bytes left over, a count they do not hold).
TEST(Wire, ChannelItemsTravelAsOneBlockAndBadBlocksAreRefused) {
  wire::ChannelCall c;
  c.op = detail::ChannelOp::put;
  c.items.add(std::string("first"));
  c.items.add(42L);
  c.items.add_encoded("");
  const auto back = wire::decode<wire::ChannelCall>(wire::encode(c));
  ASSERT_EQ(back.items.size(), 3u);
  std::vector<std::string> seen;
  back.items.each([&](std::string_view s) { seen.emplace_back(s); });
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(detail::decode_value<std::string>(seen[0]), "first");
  EXPECT_EQ(detail::decode_value<long>(seen[1]), 42);
  EXPECT_EQ(seen[2], "");
  EXPECT_EQ(detail::decode_value<std::string>(back.items.front()), "first");
  // Each item is its size and its bytes: "first" is 8 + 5 bytes, 42L 8, the empty one none.
  const std::string bytes = back.items.bytes();
  EXPECT_EQ(back.items.offsets(), (std::vector<std::uint64_t>{0, 8 + 13, 8 + 13 + 8 + 8, 8 + 13 + 8 + 8 + 8}));
  auto refused = [](std::string b, std::uint64_t count) {
    try {
      (void)detail::ChannelItems(std::move(b), count).offsets();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(refused(bytes.substr(0, bytes.size() - 1), 3).find("cut short"), std::string::npos);
  EXPECT_NE(refused(bytes.substr(0, 30), 3).find("past the end"), std::string::npos);
  EXPECT_NE(refused(bytes + "x", 3).find("1 bytes follow the last of 3 items"), std::string::npos);
  EXPECT_NE(refused(bytes, 4).find("item 3 of 4 is cut short"), std::string::npos);
  EXPECT_NE(refused(bytes, std::uint64_t(1) << 62).find("cut short"), std::string::npos);  // not allocated
  // A reader given a count its bytes do not hold gets fibra's error, not an allocation's.
  EXPECT_THROW((void)detail::ChannelItems(bytes, std::uint64_t(1) << 40).decode_all<std::string>(), Error);
}

// Values of a raw type go as they are in memory, all of one size (no size before each); an item
// of another kind turns the block into items that each say their size, in order.
TEST(Wire, RawItemsTravelAsTheyAreAndTurnSizedWhenMixed) {
  detail::ChannelItems items;
  for (long v : {1L, 2L, 3L}) items.add(v);
  EXPECT_EQ(items.stride(), sizeof(long));
  EXPECT_EQ(items.bytes().size(), 3 * sizeof(long));
  EXPECT_EQ(items.offsets(), (std::vector<std::uint64_t>{0, 8, 16, 24}));
  const auto back = wire::decode<wire::ChannelReply>(wire::encode(wire::ChannelReply{items}));
  EXPECT_EQ(back.items.decode_all<long>(), (std::vector<long>{1, 2, 3}));
  EXPECT_EQ(detail::decode_value<long>(back.items.front()), 1);
  items.add(std::string("x"));  // 8 + 1 bytes: every item now says its size
  EXPECT_EQ(items.stride(), 0u);
  EXPECT_EQ(items.offsets(), (std::vector<std::uint64_t>{0, 16, 32, 48, 48 + 8 + 9}));
  std::vector<std::string> seen;
  items.each([&](std::string_view s) { seen.emplace_back(s); });
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(detail::decode_value<long>(seen[2]), 3);
  EXPECT_EQ(detail::decode_value<std::string>(seen[3]), "x");
  // Laid-out items of another layout are added item by item; a block that is not count x stride
  // bytes is refused.
  detail::ChannelItems mixed;
  mixed.add_laid_out(std::string(16, '\1'), 2, 8);
  mixed.add_laid_out(items.bytes(), items.size(), items.stride());
  EXPECT_EQ(mixed.size(), 6u);
  EXPECT_EQ(mixed.stride(), 0u);
  EXPECT_EQ(mixed.offsets().back(), 2 * 16 + items.bytes().size());
  try {
    (void)detail::ChannelItems(std::string(23, '\0'), 3, 8).offsets();
    ADD_FAILURE() << "23 bytes taken for 3 items of 8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("23 bytes do not hold 3 items of 8 bytes"), std::string::npos) << e.what();
  }
}

TEST(Wire, AHugeCountInAMalformedBatchIsRefusedNotAllocated) {
  std::string b = wire::begin_results(7);
  wire::set_count(b, 0xffffffffu);
  EXPECT_THROW(wire::parse_results(b), wire::Malformed);
  std::string p(4, '\xff');
  EXPECT_THROW(wire::decode_partial(p), wire::Malformed);
  EXPECT_THROW(wire::decode<wire::Hello>("xx"), wire::Malformed);
}

// A fetch from a peer's ObjectServer, sealed once the connection is authenticated: the name (a
// u32 length and its bytes), how long to wait, whether to seal the bytes. A name longer than
// max_object_name is refused.
TEST(Wire, AnObjectRequestRoundTripsAndATooLongOrCutOneIsRefused) {
  const wire::ObjectRequest r{"fibra-obj-42-7", 2500, true};
  const std::string bytes = wire::encode_object_request(r);
  EXPECT_EQ(bytes.size(), 4u + r.name.size() + 8u + 1u);  // the layout: name's length, name, wait, sealed
  const auto g = wire::decode_object_request(bytes);
  EXPECT_EQ(g.name, "fibra-obj-42-7");
  EXPECT_EQ(g.wait_ms, 2500u);
  EXPECT_TRUE(g.encrypted);
  EXPECT_EQ(wire::decode_object_request(wire::encode_object_request({"", 0, false})).name, "");
  const std::string longest(wire::max_object_name, 'n');
  EXPECT_EQ(wire::decode_object_request(wire::encode_object_request({longest, 1, false})).name, longest);
  EXPECT_LE(wire::encode_object_request({longest, 1, false}).size(), wire::max_object_request);

  EXPECT_THROW(wire::decode_object_request(bytes.substr(0, bytes.size() - 1)), wire::Malformed) << "a byte short";
  EXPECT_THROW(wire::decode_object_request(bytes + "x"), wire::Malformed) << "a byte over";
  EXPECT_THROW(wire::decode_object_request(""), wire::Malformed);
  std::string two = bytes;
  two.back() = '\x02';
  EXPECT_THROW(wire::decode_object_request(two), wire::Malformed) << "a flag of 2";
  const std::string too_long = wire::encode_object_request({longest + "n", 1, false});
  try {
    (void)wire::decode_object_request(too_long);
    ADD_FAILURE() << "a name of 257 bytes announced";
  } catch (const wire::Malformed& e) {
    EXPECT_STREQ(e.what(), "fibra: a malformed object request: a name of 257 bytes, over the 256 a server reads");
  }
}

// The server's answer: a u64, the object's size or all ones (not held), then whether its bytes
// come sealed.
TEST(Wire, AnObjectReplyIsTheSizeOrNotHeldAndWhetherSealed) {
  for (const std::uint64_t size : {std::uint64_t(0), std::uint64_t(5), std::uint64_t(1) << 40}) {
    const std::string bytes = wire::encode_object_reply({wire::ObjectAnswer::held, size, size == 5});
    ASSERT_EQ(bytes.size(), wire::object_reply_bytes);
    std::uint64_t raw = 0;
    std::memcpy(&raw, bytes.data(), sizeof raw);
    EXPECT_EQ(raw, size);
    const auto g = wire::decode_object_reply(bytes);
    EXPECT_EQ(g.answer, wire::ObjectAnswer::held);
    EXPECT_EQ(g.size, size);
    EXPECT_EQ(g.encrypted, size == 5);
  }
  const std::string no = wire::encode_object_reply({wire::ObjectAnswer::not_held});
  std::uint64_t raw = 0;
  std::memcpy(&raw, no.data(), sizeof raw);
  EXPECT_EQ(raw, ~std::uint64_t(0));
  EXPECT_EQ(wire::decode_object_reply(no).answer, wire::ObjectAnswer::not_held);
  EXPECT_THROW(wire::decode_object_reply(std::string(8, '\0')), wire::Malformed);
  EXPECT_THROW(wire::decode_object_reply(std::string(10, '\0')), wire::Malformed);
  EXPECT_THROW(wire::decode_object_reply(std::string(8, '\0') + "\x07"), wire::Malformed) << "a flag of 7";
}

// The handshake's first message: fixed size, fibra's magic first; anything else is refused.
TEST(Wire, AnAuthHelloHasAFixedSizeAndFibrasMagic) {
  const std::string nonce(wire::auth_nonce_bytes, '\x5a');
  const std::string bytes = wire::encode_auth_hello({wire::auth_version, wire::AuthRole::object, 77, nonce});
  ASSERT_EQ(bytes.size(), wire::auth_hello_bytes);
  EXPECT_EQ(bytes.substr(0, 4), "fbra");
  const auto h = wire::decode_auth_hello(bytes);
  EXPECT_EQ(h.version, wire::auth_version);
  EXPECT_EQ(h.role, wire::AuthRole::object);
  EXPECT_EQ(h.pool, 77u);
  EXPECT_EQ(h.nonce, nonce);
  EXPECT_THROW(wire::decode_auth_hello(bytes.substr(1)), wire::Malformed);
  EXPECT_THROW(wire::decode_auth_hello(bytes + "x"), wire::Malformed);
  std::string other = bytes;
  other[0] = 'G';  // "GET / HTTP/1.1..." or any other protocol
  EXPECT_THROW(wire::decode_auth_hello(other), wire::Malformed);
}

// A frame: a u32 length, then the bytes, at most the reader's bound; a reader refuses a longer
// announcement from the head, before reading the rest.
TEST(Wire, AFrameIsItsLengthThenItsBytesUpToTheReadersBound) {
  const auto frame = wire::frame("hello", 64);
  ASSERT_TRUE(frame);
  EXPECT_EQ(frame->size(), 4u + 5u);
  EXPECT_EQ(wire::frame_length(frame->substr(0, wire::frame_head), 64), 5u);
  EXPECT_EQ(frame->substr(wire::frame_head), "hello");
  EXPECT_EQ(wire::frame_length(*wire::frame("", 64), 64), 0u);
  const std::string largest(wire::max_join_message, 'x');
  ASSERT_TRUE(wire::frame(largest, wire::max_join_message));
  EXPECT_EQ(wire::frame_length(wire::frame(largest, wire::max_join_message)->substr(0, 4), wire::max_join_message),
            64u * 1024u);
  EXPECT_FALSE(wire::frame(largest + "x", wire::max_join_message)) << "a message over the bound is not framed";

  const std::uint32_t over = wire::max_join_message + 1;
  std::string head(sizeof over, '\0');
  std::memcpy(head.data(), &over, sizeof over);
  try {
    (void)wire::frame_length(head, wire::max_join_message);
    ADD_FAILURE() << "65537 bytes announced";
  } catch (const wire::Malformed& e) {
    EXPECT_STREQ(e.what(), "fibra: a malformed frame: it announces 65537 bytes, over the 65536 its reader takes");
  }
  EXPECT_THROW(wire::frame_length(head.substr(0, 3), 64), wire::Malformed) << "a head cut short";
}

// The join file (version 3) holds the run's secret and names no MPI port: each joiner's "go"
// carries one opened for it alone, so a stand-in connecting for a joiner that left can never meet a
// later joiner's accept.
TEST(Wire, AJoinFileRoundTripsAndAGoCarriesItsOwnPort) {
  detail::join::Address a;
  a.secret = detail::auth::Secret::random();
  a.fingerprint = 0xfedcba9876543210ULL;
  a.server_uri = "1234.0;tcp://10.0.0.1:5000";
  a.server_file = "/tmp/x.uri";
  a.hello = {{"10.0.0.1", 4000}, {"127.0.0.1", 4000}};
  const std::string text = detail::join::to_text(a);
  EXPECT_EQ(text.find("\nport "), std::string::npos) << text;
  const auto b = detail::join::parse(text, "join");
  ASSERT_TRUE(b.secret);
  EXPECT_EQ(b.secret->hex(), a.secret->hex());
  EXPECT_EQ(b.fingerprint, a.fingerprint);
  EXPECT_EQ(b.server_uri, a.server_uri);
  EXPECT_EQ(b.server_file, a.server_file);
  ASSERT_EQ(b.hello.size(), 2u);
  EXPECT_EQ(b.hello[1].host, "127.0.0.1");
  EXPECT_EQ(b.hello[1].port, 4000);
  std::string old = text;
  old.replace(old.find("version 3"), 9, "version 2");
  try {
    (void)detail::join::parse(old, "join");
    ADD_FAILURE() << "a version 2 join file was read";
  } catch (const fibra::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("version 2, where this build reads version 3"), std::string::npos) << e.what();
  }
  std::string cut = text;
  cut.replace(cut.find("secret ") + 7, 64, std::string(63, 'a'));
  EXPECT_THROW((void)detail::join::parse(cut, "join"), fibra::ConfigError) << "a secret of 63 digits";

  wire::JoinAnswer go;
  go.go = true;
  go.port = "2953052160.0:3457843723";
  const auto back = wire::decode<wire::JoinAnswer>(wire::encode(go));
  EXPECT_TRUE(back.go);
  EXPECT_EQ(back.port, go.port);
  EXPECT_EQ(back.why, "");
}

}  // namespace
