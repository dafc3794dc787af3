// The argv with which an agent starts an executor (src/roles.hpp: ExecutorArgs), written and read
// through one definition: what to_argv writes, parse reads back; anything else is refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "roles.hpp"

using fibra::detail::ExecutorArgs;

namespace {

std::optional<ExecutorArgs> parse(std::vector<std::string> args, bool& malformed) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return ExecutorArgs::parse(int(args.size()), argv.data(), malformed);
}

TEST(ExecutorArgs, WhatTheAgentWritesTheExecutorReadsBack) {
  const ExecutorArgs sent{7, 9, 123456};
  const auto argv = sent.to_argv("/opt/app");
  EXPECT_EQ(argv, (std::vector<std::string>{"/opt/app", "--fibra-executor", "7", "9", "123456"}));
  bool malformed = true;
  const auto got = parse(argv, malformed);
  ASSERT_TRUE(got);
  EXPECT_FALSE(malformed);
  EXPECT_EQ(got->socket_fd, 7);
  EXPECT_EQ(got->region_fd, 9);
  EXPECT_EQ(got->parent_pid, 123456);
}

TEST(ExecutorArgs, AnotherProgramsArgvIsNoneAndABadOneIsMalformed) {
  bool malformed = true;
  EXPECT_FALSE(parse({"/opt/app", "--lr", "0.1"}, malformed));
  EXPECT_FALSE(malformed) << "not an executor's argv: the program runs as a driver";
  EXPECT_FALSE(parse({"/opt/app"}, malformed));
  EXPECT_FALSE(malformed);
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"/opt/app", "--fibra-executor", "3", "4"},
                                              {"/opt/app", "--fibra-executor", "3", "x", "42"},
                                              {"/opt/app", "--fibra-executor", "3", "4", "-1"},
                                              {"/opt/app", "--fibra-executor", "3", "4", "42", "extra"}}) {
    EXPECT_FALSE(parse(bad, malformed));
    EXPECT_TRUE(malformed) << bad.size() << " arguments";
  }
}

}  // namespace
