// tune/tests/space_test.cpp: configurations, domains and the seeded sampling of a search space.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "fibra/error.hpp"
#include "fibra/tune.hpp"
#include "internal.hpp"

namespace fibra::tune {
namespace {

TEST(Space, GridsAreCrossedAndRepeatedPerSample) {
  Space s{{"a", grid({1, 2, 3})}, {"b", grid({"x", "y"})}, {"c", 0.5}};
  EXPECT_EQ(s.grid_size(), 6u);
  std::set<std::pair<std::int64_t, std::string>> seen;
  for (std::size_t i = 0; i < 6; ++i) {
    const Config c = s.sample(7, i);
    seen.emplace(c.integer("a"), c.text("b"));
    EXPECT_EQ(c.number("c"), 0.5);
  }
  EXPECT_EQ(seen.size(), 6u);                 // every combination once
  EXPECT_EQ(s.sample(7, 6), s.sample(7, 0));  // the second sample repeats the grid
  EXPECT_EQ(s.sample(7, 0).integer("a"), 1);
  EXPECT_EQ(s.sample(7, 5).integer("a"), 3);
  EXPECT_EQ(s.sample(7, 5).text("b"), "y");
}

TEST(Space, DrawsStayInTheirDomainsAndDependOnSeedAndIndexOnly) {
  Space s{{"u", uniform(2, 3)}, {"l", loguniform(1e-4, 1e-1)}, {"r", randint(5, 8)}, {"ch", choice({"p", "q"})}};
  std::set<std::int64_t> ints;
  std::set<std::string> picks;
  double lsum = 0;
  for (std::size_t i = 0; i < 2000; ++i) {
    const Config c = s.sample(1, i);
    EXPECT_GE(c.number("u"), 2);
    EXPECT_LT(c.number("u"), 3);
    EXPECT_GE(c.number("l"), 1e-4);
    EXPECT_LT(c.number("l"), 1e-1);
    lsum += std::log10(c.number("l"));
    ints.insert(c.integer("r"));
    picks.insert(c.text("ch"));
  }
  EXPECT_EQ(ints, (std::set<std::int64_t>{5, 6, 7}));
  EXPECT_EQ(picks, (std::set<std::string>{"p", "q"}));
  EXPECT_NEAR(lsum / 2000, -2.5, 0.1);  // log-uniform: the mean exponent is the middle one
  EXPECT_EQ(s.sample(1, 17), s.sample(1, 17));
  EXPECT_NE(s.sample(1, 17), s.sample(2, 17));
  EXPECT_NE(s.sample(1, 17), s.sample(1, 18));
}

TEST(Space, ErrorsNameTheProblem) {
  try {
    Config c{{"lr", 0.1}};
    (void)c.number("momentum");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "fibra::tune: the configuration has no key 'momentum' (it has: lr); add it to the search space");
  }
  EXPECT_THROW(uniform(1, 1), ConfigError);
  EXPECT_THROW(loguniform(0, 1), ConfigError);
  EXPECT_THROW(Space({{"a", 1}, {"a", 2}}), ConfigError);
  EXPECT_THROW((void)Value("x").number(), ConfigError);
  EXPECT_THROW((void)Value(0.5).integer(), ConfigError);
  EXPECT_EQ(Value(3.0).integer(), 3);
}

TEST(Config, SubAndBytesRoundTrip) {
  Config c{{"optimizer.lr", 0.01}, {"optimizer.name", "adam"}, {"layers", 3}};
  const Config o = c.sub("optimizer");
  EXPECT_EQ(o.number("lr"), 0.01);
  EXPECT_EQ(o.text("name"), "adam");
  EXPECT_FALSE(o.contains("layers"));
  EXPECT_EQ(detail::decode_config(detail::encode_config(c)), c);
  EXPECT_EQ(c.str(), "layers=3, optimizer.lr=0.01, optimizer.name=adam");
}

}  // namespace
}  // namespace fibra::tune
