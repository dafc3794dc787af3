// src/wire.hpp: the messages between driver, agents and executors.
//
// A task batch travels driver -> agent over MPI, then agent -> executor over a socket, unchanged;
// a result batch travels back the same way. The agent parses only headers (to know which chunks
// its executor holds), never payloads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fibra/detail/codec.hpp"
#include "fibra/detail/registry.hpp"

namespace fibra::wire {

/// MPI tags between driver and agent.
enum Tag : int {
  tag_hello = 1,      ///< agent -> driver: Hello
  tag_tasks = 2,      ///< driver -> agent: a task batch
  tag_results = 3,    ///< agent -> driver: a result batch
  tag_heartbeat = 4,  ///< both ways, when nothing else was sent for a while
  tag_shutdown = 5,   ///< driver -> agent: stop (executor too), say bye, leave
  tag_bye = 6,        ///< agent -> driver: about to leave
};

struct Hello {
  std::uint64_t fingerprint = 0;
  std::uint64_t functions = 0;
  std::int64_t pid = 0;
  std::string host;
};
std::string encode(const Hello& h);
Hello decode_hello(std::string_view s);

/// One chunk of a task batch.
struct TaskHeader {
  std::uint64_t chunk = 0;    ///< driver-wide chunk id
  std::uint32_t attempt = 0;  ///< 1 for the first try
  std::uint64_t fn = 0;       ///< function id (hash of its registered name)
  detail::CallMode mode = detail::CallMode::single;
  std::uint64_t first = 0;    ///< index of the chunk's first item in its call
  std::uint32_t count = 0;    ///< items in the chunk
  std::uint32_t timeout_ms = 0;  ///< one item may run this long before the agent kills the executor; 0: none
  bool keep_going = false;       ///< collect item failures and go on (RunControl::keep_going)
  std::vector<std::uint32_t> skip;  ///< offsets of poison items not to run
};

/// Appends one chunk to a task batch under construction (the batch starts with a u32 count).
void append_task(std::string& batch, const TaskHeader& h, std::string_view payload);
/// Appends a chunk's header only; its `payload_bytes` bytes of payload must follow it in the message
/// (sent from where they are, see mpi::SendQueue::send_pieces).
void append_task_head(std::string& batch, const TaskHeader& h, std::uint64_t payload_bytes);
/// Starts an empty batch; set_count fixes up the chunk count at the front.
std::string begin_batch();
void set_count(std::string& batch, std::uint32_t n);

struct TaskView {
  TaskHeader header;
  std::string_view payload;
};
std::vector<TaskView> parse_tasks(std::string_view batch);

enum class Status : std::uint8_t {
  ok = 0,           ///< payload: encoded results
  raised = 1,       ///< payload: u32 item offset, type, message (a task threw)
  crashed = 2,      ///< payload: description of how the executor died, while running this chunk
  not_run = 3,      ///< the executor died before starting this chunk: run it again, not an attempt
  unknown_fn = 4,   ///< payload: message (the function is not registered in this worker)
  timed_out = 5,    ///< payload: like crashed; an item ran past the chunk's time limit and was killed
  partial = 6,      ///< payload: encode_partial (keep_going chunks whose items failed or were skipped)
};

struct ResultHeader {
  std::uint64_t chunk = 0;
  std::uint32_t attempt = 0;
  Status status = Status::ok;
  std::uint64_t run_ns = 0;  ///< how long the executor ran the chunk (0 in the agent's reports)
};

/// A result batch: u32 count, i64 executor pid, then (header, u64 length, payload) per chunk.
std::string begin_results(std::int64_t executor_pid);
void append_result(std::string& batch, const ResultHeader& h, std::string_view payload);
/// Starts a result whose payload the caller appends to `batch` itself (no copy of it); returns
/// where the result starts, for close_result.
std::size_t open_result(std::string& batch, const ResultHeader& h);
/// Ends the result opened at `at`: writes its header again (status and run time may have changed)
/// with the length of what was appended since, and counts it in the batch.
void close_result(std::string& batch, std::size_t at, const ResultHeader& h);

struct ResultView {
  ResultHeader header;
  std::string_view payload;
};
struct ResultBatch {
  std::int64_t executor_pid = 0;
  std::vector<ResultView> results;
};
ResultBatch parse_results(std::string_view batch);

/// Payload of a `partial` result: the failed items, then the results of all items (R{} for failed ones).
std::string encode_partial(const std::vector<detail::ItemFailure>& failures, std::string_view results);
struct Partial {
  std::vector<detail::ItemFailure> failures;
  std::string_view results;
};
Partial decode_partial(std::string_view s);

/// ItemFailure::offset of a crash outside any item of the chunk (the executor died between chunks).
inline constexpr std::uint32_t unknown_item = 0xffffffffu;

/// Payload of a `raised` result.
std::string encode_failure(const detail::ItemFailure& f);
detail::ItemFailure decode_failure(std::string_view s);

}  // namespace fibra::wire
