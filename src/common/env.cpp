// src/common/env.cpp: the one place fibra reads its FIBRA_* environment variables.
#include "common/env.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fibra/error.hpp"

namespace fibra::detail::env {

const char* raw(Name n) noexcept { return std::getenv(n.c_str()); }

std::string text(Name n) {
  const char* v = raw(n);
  return v ? std::string(v) : std::string();
}

std::optional<bool> flag(Name n) noexcept {
  const char* v = raw(n);
  if (!v || !*v) return std::nullopt;
  return std::string_view(v) != "0";
}

namespace {
std::string number_text(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.15g", x);
  return text;
}
}  // namespace

double number(Name n, double unset, double least, double most, bool whole, std::string_view advice) {
  const char* v = raw(n);
  if (!v || !*v) return unset;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(x >= least && x <= most) || (whole && x != std::floor(x)))
    throw ConfigError(std::string("fibra: ") + n.c_str() + "=" + v + " is not a " + (whole ? "whole " : "") +
                      "number from " + number_text(least) + " to " + number_text(most) +
                      (advice.empty() ? "" : "; " + std::string(advice)));
  return x;
}

std::string shown(Name n) { return std::string(n.c_str()) + "=" + text(n); }

}  // namespace fibra::detail::env
