// The event log's file (src/driver/event_log.hpp): JSON strings escaped as RFC 8259 says, every line
// whole JSON in the order added between the `log` and `end` events, written while the log is still
// open (within its 0.2 s), one log per folder, and a folder that cannot be written refused naming it.
#include "driver/event_log.hpp"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "fibra/error.hpp"
#include "fibra/log.hpp"

using fibra::detail::EventLog;

namespace {
std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

struct TempDir {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("fibra-event-log-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++)))
                         .string();
  ~TempDir() { std::filesystem::remove_all(path); }
  static inline int counter = 0;
};
}  // namespace

TEST(EventLog, QuotesStringsAsJsonDoes) {
  EXPECT_EQ(EventLog::quoted("plain"), "\"plain\"");
  EXPECT_EQ(EventLog::quoted("a \"b\" \\c"), R"("a \"b\" \\c")");
  EXPECT_EQ(EventLog::quoted("line\nnext\ttab\x01"), R"("line\u000anext\u0009tab\u0001")");
  EXPECT_EQ(EventLog::quoted("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82"),
            "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82\"");
  // Bytes that are not UTF-8 (a lone continuation byte, a cut sequence, an overlong form) become '?'.
  EXPECT_EQ(EventLog::quoted("a\x80z"), "\"a?z\"");
  EXPECT_EQ(EventLog::quoted("cut \xe2\x82"), "\"cut ??\"");
  EXPECT_EQ(EventLog::quoted("\xc0\xaf"), "\"??\"");
  EXPECT_EQ(EventLog::quoted("\xf8\x80\x80 \xff \xed\xa0\x80"), "\"??? ? ???\"");  // no lead byte; a surrogate
  // What it writes, a JSON parser reads back as the text it was given (where it was UTF-8).
  const std::string text = "x \"y\" \\ \b\f\r\n\x1f caf\xc3\xa9";
  EXPECT_EQ(nlohmann::json::parse(EventLog::quoted(text)).get<std::string>(), text);
}

TEST(EventLog, WritesWholeLinesInOrderBetweenItsLogAndEndEvents) {
  TempDir dir;
  std::string path;
  {
    auto log = EventLog::open(dir.path);
    path = log->path();
    EXPECT_EQ(path, dir.path + "/events.jsonl");
    for (int i = 0; i < 1000; ++i)
      log->add("sample", ",\"i\":" + std::to_string(i) + ",\"s\":" + EventLog::quoted("é\n"));
  }
  const auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 1002u);
  const auto first = nlohmann::json::parse(lines.front());
  EXPECT_EQ(first.at("ev"), "log");
  EXPECT_EQ(first.at("version"), 1);
  EXPECT_EQ(first.at("pid").get<long>(), long(::getpid()));
  std::int64_t last_t = first.at("t");
  for (int i = 0; i < 1000; ++i) {
    const auto e = nlohmann::json::parse(lines[1 + i]);
    EXPECT_EQ(e.at("ev"), "sample");
    EXPECT_EQ(e.at("i"), i);
    EXPECT_EQ(e.at("s"), "é\n");
    EXPECT_GE(e.at("t").get<std::int64_t>(), last_t);
    last_t = e.at("t");
  }
  EXPECT_EQ(nlohmann::json::parse(lines.back()).at("ev"), "end");
}

TEST(EventLog, WritesWhileOpenWithinASecond) {
  TempDir dir;
  auto log = EventLog::open(dir.path);
  log->add("early", {});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  bool seen = false;
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    for (const auto& line : lines_of(log->path())) seen |= line.find("\"ev\":\"early\"") != std::string::npos;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(seen) << "an event added to an open log was not in its file within 5 s (it is written every 0.2 s)";
}

// A file that refuses writes (a full disk: /dev/full) costs a warning, never a hang at the end.
TEST(EventLog, AFileThatRefusesWritesIsSaidOnceAndTheLogStillCloses) {
  TempDir dir;
  std::filesystem::create_directories(dir.path);
  std::filesystem::create_symlink("/dev/full", dir.path + "/events.jsonl");
  std::vector<std::string> warnings;
  fibra::log::set_sink([&](fibra::log::Level l, std::string_view s) {
    if (l == fibra::log::Level::warning) warnings.emplace_back(s);
  });
  {
    auto log = EventLog::open(dir.path);
    for (int i = 0; i < 100; ++i) log->add("sample", {});
    log->flush();
    for (int i = 0; i < 100; ++i) log->add("sample", {});
  }  // would wait for ever if the writer could not finish
  fibra::log::set_sink({});
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("could not be written"), std::string::npos) << warnings[0];
}

// Another writer of the file (another process's lock: flock locks belong to an open file, so a
// second open here stands for it) gets a ConfigError naming the file, not a log interleaved with
// its own.
TEST(EventLog, ASecondWriterOfOneFileIsRefused) {
  TempDir dir;
  std::filesystem::create_directories(dir.path);
  const std::string path = dir.path + "/events.jsonl";
  const int other = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(other, 0);
  ASSERT_EQ(::flock(other, LOCK_EX | LOCK_NB), 0);
  try {
    EventLog::open(dir.path);
    ADD_FAILURE() << "a log another writer holds was opened";
  } catch (const fibra::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("another process is writing the event log " + path), std::string::npos)
        << e.what();
  }
  ::close(other);
  EXPECT_NO_THROW(EventLog::open(dir.path)) << "once the other writer is gone";
}

TEST(EventLog, OneLogPerFolderAndAnotherAfterItClosed) {
  TempDir dir;
  auto a = EventLog::open(dir.path);
  auto b = EventLog::open(dir.path);
  EXPECT_EQ(a.get(), b.get());
  a.reset();
  b.reset();
  EventLog::open(dir.path)->add("second", {});  // appended after the first log's end
  const auto lines = lines_of(dir.path + "/events.jsonl");
  ASSERT_EQ(lines.size(), 5u);  // log, end, log, second, end
  EXPECT_EQ(nlohmann::json::parse(lines[2]).at("ev"), "log");
  EXPECT_EQ(nlohmann::json::parse(lines[3]).at("ev"), "second");
}

TEST(EventLog, AFolderThatCannotBeWrittenIsRefusedByName) {
  try {
    EventLog::open("/proc/fibra-no-such-folder/events");
    FAIL() << "no error";
  } catch (const fibra::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/fibra-no-such-folder/events/events.jsonl"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("PoolOptions::events"), std::string::npos) << e.what();
  }
}
