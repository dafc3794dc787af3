// The event log's file and its writer thread (src/driver/event_log.hpp).
#include "driver/event_log.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "common/log.hpp"
#include "common/process.hpp"
#include "common/unique_fd.hpp"
#include "fibra/detail/events.hpp"
#include "fibra/error.hpp"

namespace fibra::detail {

namespace {
constexpr std::size_t most_waiting = std::size_t(64) << 20;  // bytes buffered before events are counted instead
constexpr auto write_every = std::chrono::milliseconds(200);
constexpr int format_version = 1;

std::string program_name() {
  char buf[256] = {};
  if (std::FILE* f = std::fopen("/proc/self/comm", "r")) {
    if (!std::fgets(buf, sizeof buf, f)) buf[0] = 0;
    std::fclose(f);
  }
  std::string s = buf;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

}  // namespace

struct EventLog::Impl {
  std::string path;
  UniqueFd fd;
  std::mutex mu;
  std::condition_variable cv;
  std::string waiting;        // under mu: lines not yet written
  std::uint64_t dropped = 0;  // under mu: events not kept since the last `dropped` event
  bool stopping = false;      // under mu
  // Held from taking a batch to its end in the file, so that batches are written in order (the
  // writer's and flush()'s). Taken before mu, never after it.
  std::mutex write_mu;
  std::atomic<bool> failed{false};  // a write failed: said once, and nothing more is kept
  std::thread writer;

  // Writes `text` whole (a short write is continued); false if the file refuses it.
  bool write_all(std::string_view text) {
    while (!text.empty()) {
      const ssize_t n = ::write(fd.get(), text.data(), text.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      text.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  // Takes what waits and writes it (under write_mu). Returns whether the log is stopping.
  bool write_waiting(std::string& batch) {
    std::lock_guard wl(write_mu);
    bool last = false;
    {
      std::lock_guard lk(mu);
      if (dropped > 0) {  // said where it happened, in the order of the log
        waiting += "{\"ev\":\"dropped\",\"t\":" + std::to_string(event_time_us()) +
                   ",\"count\":" + std::to_string(dropped) + "}\n";
        dropped = 0;
      }
      batch.swap(waiting);
      last = stopping;
    }
    if (!batch.empty() && !failed.load() && !write_all(batch)) {
      failed.store(true);
      log::warning("fibra: the event log {} could not be written ({}); it keeps no event from now on", path,
                   std::strerror(errno));
    }
    batch.clear();
    return last;
  }

  void run() {
    std::string batch;
    for (;;) {
      {
        std::unique_lock lk(mu);
        cv.wait_for(lk, write_every, [&] { return stopping; });
      }
      if (write_waiting(batch)) {
        std::lock_guard lk(mu);
        if (waiting.empty()) return;
      }
    }
  }
};

EventLog::EventLog(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::shared_ptr<EventLog> EventLog::open(const std::string& folder) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<EventLog>> open_logs;  // by the folder's canonical path
  std::lock_guard lk(mu);
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  std::error_code canon_ec;
  const std::string key = std::filesystem::weakly_canonical(std::filesystem::absolute(folder), canon_ec).string();
  if (auto it = open_logs.find(key); it != open_logs.end())
    if (auto log = it->second.lock()) return log;
  auto impl = std::make_unique<Impl>();
  impl->path = (std::filesystem::path(folder) / "events.jsonl").string();
  impl->fd.reset(::open(impl->path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!impl->fd)
    throw ConfigError("fibra: the event log " + impl->path + " cannot be written (" + std::strerror(errno) +
                      (ec ? ", and its folder could not be made: " + ec.message() : std::string()) +
                      "); name a folder you can write (PoolOptions::events or FIBRA_EVENTS)");
  // One writer at a time: two runs appending to one log would interleave their events. (A run
  // that follows another, a requeued job's, finds the lock free once the first has ended.)
  if (::flock(impl->fd.get(), LOCK_EX | LOCK_NB) != 0)
    throw ConfigError("fibra: another process is writing the event log " + impl->path +
                      " (two runs with one folder): give each run its own (PoolOptions::events or FIBRA_EVENTS)");
  std::shared_ptr<EventLog> log(new EventLog(std::move(impl)));
  log->add("log", ",\"version\":" + std::to_string(format_version) + ",\"pid\":" + std::to_string(::getpid()) +
                      ",\"host\":" + quoted(host_name()) + ",\"program\":" + quoted(program_name()));
  log->impl_->writer = std::thread([raw = log->impl_.get()] { raw->run(); });
  open_logs[key] = log;
  return log;
}

EventLog::~EventLog() {
  add("end", {});
  {
    std::lock_guard lk(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->writer.joinable()) impl_->writer.join();
}

void EventLog::flush() {
  std::string batch;
  impl_->write_waiting(batch);
}

void EventLog::add(std::string_view ev, std::string_view fields) {
  if (impl_->failed.load(std::memory_order_relaxed)) return;
  const std::int64_t t = event_time_us();
  std::lock_guard lk(impl_->mu);
  if (impl_->waiting.size() > most_waiting) {
    ++impl_->dropped;
    return;
  }
  std::string& w = impl_->waiting;
  w += "{\"ev\":\"";
  w += ev;
  w += "\",\"t\":";
  w += std::to_string(t);
  w += fields;
  w += "}\n";
}

std::string EventLog::quoted(std::string_view s) { return json_quoted(s); }

void EventLog::append_quoted(std::string& out, std::string_view s) { append_json_quoted(out, s); }

const std::string& EventLog::path() const { return impl_->path; }

}  // namespace fibra::detail
