// fibra's FIBRA_* variables (src/common/env.hpp): the docs list exactly the declared ones, each as
// it is declared, and the readers parse values as the docs say.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "common/env.hpp"
#include "fibra/error.hpp"

namespace env = fibra::detail::env;

namespace {

// Rows "| `FIBRA_X` | kind | when unset | effect |" of docs/getting-started.md's Environment section.
std::map<std::string, std::string> documented() {
  std::ifstream in(std::string(FIBRA_SOURCE_DIR) + "/docs/getting-started.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  const auto at = s.find("\n## Environment\n");
  const auto end = s.find("\n## ", at + 1);
  const std::string section = s.substr(at, end == std::string::npos ? std::string::npos : end - at);
  std::map<std::string, std::string> rows;
  const std::regex row(R"(\n\| `(FIBRA_\w+)` \| ([^\n]*) \|)");
  for (auto it = std::sregex_iterator(section.begin(), section.end(), row); it != std::sregex_iterator(); ++it)
    rows[(*it)[1]] = (*it)[2];
  return rows;
}

TEST(Env, TheDocsListEveryVariableAsItIsDeclared) {
  auto rows = documented();
  ASSERT_FALSE(rows.empty()) << "no table of FIBRA_* variables under '## Environment' in docs/getting-started.md";
  for (const auto& v : env::variables) {
    const std::string name(v.name);
    const auto row = rows.find(name);
    if (row == rows.end()) {
      ADD_FAILURE() << name << " is declared in src/common/env.hpp but not in docs/getting-started.md#environment";
      continue;
    }
    EXPECT_EQ(row->second, std::string(v.kind) + " | " + std::string(v.unset) + " | " + std::string(v.meaning))
        << "the docs' row for " << name << " says otherwise than src/common/env.hpp";
    rows.erase(row);
  }
  for (const auto& [name, text] : rows)
    ADD_FAILURE() << name << " is in docs/getting-started.md but fibra does not read it (not in src/common/env.hpp)";
}

TEST(Env, NumbersAreCheckedAgainstTheirRangeAndFlagsAreZeroForOff) {
  ::unsetenv("FIBRA_SIMULATED_SILENT_EVERY");
  EXPECT_EQ(env::number("FIBRA_SIMULATED_SILENT_EVERY", 7, 0, 100, true), 7);
  ::setenv("FIBRA_SIMULATED_SILENT_EVERY", "", 1);
  EXPECT_EQ(env::number("FIBRA_SIMULATED_SILENT_EVERY", 7, 0, 100, true), 7) << "empty is unset";
  ::setenv("FIBRA_SIMULATED_SILENT_EVERY", "42", 1);
  EXPECT_EQ(env::number("FIBRA_SIMULATED_SILENT_EVERY", 7, 0, 100, true), 42);
  for (const char* bad : {"4x", "101", "-1", "2.5", "many"}) {
    ::setenv("FIBRA_SIMULATED_SILENT_EVERY", bad, 1);
    try {
      env::number("FIBRA_SIMULATED_SILENT_EVERY", 7, 0, 100, true, "unset it");
      ADD_FAILURE() << bad << " was taken";
    } catch (const fibra::ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("fibra: FIBRA_SIMULATED_SILENT_EVERY=") + bad +
                                           " is not a whole number from 0 to 100; unset it");
    }
  }
  ::setenv("FIBRA_SIMULATED_SILENT_AFTER_S", "0.25", 1);
  EXPECT_EQ(env::number("FIBRA_SIMULATED_SILENT_AFTER_S", 0, 0, 1e6), 0.25);
  ::unsetenv("FIBRA_SIMULATED_SILENT_EVERY");
  ::unsetenv("FIBRA_SIMULATED_SILENT_AFTER_S");

  ::unsetenv("FIBRA_OBJECTS_AS_REMOTE");
  EXPECT_EQ(env::flag("FIBRA_OBJECTS_AS_REMOTE"), std::nullopt);
  EXPECT_EQ(env::raw("FIBRA_OBJECTS_AS_REMOTE"), nullptr);
  ::setenv("FIBRA_OBJECTS_AS_REMOTE", "0", 1);
  EXPECT_EQ(env::flag("FIBRA_OBJECTS_AS_REMOTE"), false);
  ::setenv("FIBRA_OBJECTS_AS_REMOTE", "yes", 1);
  EXPECT_EQ(env::flag("FIBRA_OBJECTS_AS_REMOTE"), true);
  EXPECT_EQ(env::shown("FIBRA_OBJECTS_AS_REMOTE"), "FIBRA_OBJECTS_AS_REMOTE=yes");
  ::unsetenv("FIBRA_OBJECTS_AS_REMOTE");
}

}  // namespace
