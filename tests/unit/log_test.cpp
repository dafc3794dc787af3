#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fibra/error.hpp"
#include "common/log.hpp"

namespace {

using fibra::log::Level;

struct Captured {
  std::vector<std::pair<Level, std::string>> lines;
  Captured() {
    fibra::log::set_sink([this](Level l, std::string_view s) { lines.emplace_back(l, std::string(s)); });
  }
  ~Captured() {
    fibra::log::set_sink({});
    fibra::log::set_level(Level::info);
  }
};

TEST(Log, LinesGoToTheSinkAtOrAboveTheLevel) {
  Captured c;
  fibra::log::set_level(Level::warning);
  fibra::log::info("fibra: {} is not shown", "this");
  fibra::log::warning("fibra: worker {} of {} was lost", 2, 4);
  fibra::log::error("fibra: {:.1f} s", 1.25);
  ASSERT_EQ(c.lines.size(), 2u);
  EXPECT_EQ(c.lines[0].first, Level::warning);
  EXPECT_EQ(c.lines[0].second, "fibra: worker 2 of 4 was lost");
  EXPECT_EQ(c.lines[1].second, "fibra: 1.2 s");
}

TEST(Log, OffSilencesEverything) {
  Captured c;
  fibra::log::set_level(Level::off);
  fibra::log::error("fibra: an error");
  EXPECT_TRUE(c.lines.empty());
}

TEST(Log, LevelNamesAndTheirRefusal) {
  EXPECT_EQ(fibra::log::parse_level("debug"), Level::debug);
  EXPECT_EQ(fibra::log::parse_level("warning"), Level::warning);
  EXPECT_EQ(fibra::log::parse_level("off"), Level::off);
  try {
    fibra::log::parse_level("loud");
    FAIL() << "no error";
  } catch (const fibra::ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "fibra: 'loud' is not a log level (FIBRA_LOG_LEVEL): use debug, info, warning, error or off");
  }
}

}  // namespace
