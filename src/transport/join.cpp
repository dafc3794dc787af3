// src/transport/join.cpp: see join.hpp.
#include "transport/join.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "fibra/error.hpp"
#include "common/private_file.hpp"
#include "common/unique_fd.hpp"
#include "transport/wire.hpp"

namespace fibra::detail::join {

namespace {
constexpr const char* first_line =
    "# fibra join file: start workers that join this run with `./app --fibra-join <this file>`";

std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%016" PRIx64, v);
  return b;
}
}  // namespace

std::string to_text(const Address& a) {
  std::string t = std::string(first_line) + "\n";
  t += "version 3\n";
  t += "secret " + (a.secret ? a.secret->hex() : std::string()) + "\n";
  t += "fingerprint " + hex(a.fingerprint) + "\n";
  t += "server " + a.server_uri + "\n";
  t += "server_file " + a.server_file + "\n";
  for (const auto& h : a.hello) t += "hello " + h.host + " " + std::to_string(h.port) + "\n";
  return t;
}

Address parse(std::string_view text, const std::string& path) {
  Address a;
  bool version = false;
  std::istringstream in{std::string(text)};
  std::string line;
  int n = 0;
  const auto bad = [&](const std::string& what) {
    return ConfigError("fibra: the join file " + path + " is not one a fibra driver wrote (line " + std::to_string(n) +
                       ": " + what + "); pass the file named by the driver's FIBRA_JOIN_FILE");
  };
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    const auto sp = line.find(' ');
    const std::string key = line.substr(0, sp), value = sp == std::string::npos ? "" : line.substr(sp + 1);
    const auto number = [&](int base) {
      char* end = nullptr;
      errno = 0;
      const unsigned long long v = std::strtoull(value.c_str(), &end, base);
      if (value.empty() || *end != '\0' || errno != 0) throw bad(key + " is not a number");
      return static_cast<std::uint64_t>(v);
    };
    if (key == "version") {
      if (value != "3") throw bad("version " + value + ", where this build reads version 3");
      version = true;
    } else if (key == "secret") {
      a.secret = auth::Secret::from_hex(value, "the join file " + path);
    } else if (key == "fingerprint") {
      a.fingerprint = number(16);
    } else if (key == "server") {
      a.server_uri = value;
    } else if (key == "server_file") {
      a.server_file = value;
    } else if (key == "hello") {
      const auto s2 = value.rfind(' ');
      if (s2 == std::string::npos) throw bad("hello needs a host and a port");
      char* end = nullptr;
      const unsigned long p = std::strtoul(value.c_str() + s2 + 1, &end, 10);
      if (*end != '\0' || p == 0 || p > 65535) throw bad("hello's port is not a TCP port");
      a.hello.push_back({value.substr(0, s2), static_cast<std::uint16_t>(p)});
    } else {  // (a key is shown cut short, and never one that may be the secret)
      throw bad("unknown key \"" + (key.rfind("secret", 0) == 0 ? std::string("secret...") : key.substr(0, 24)) + "\"");
    }
  }
  if (!version || !a.secret || a.server_uri.empty() || a.hello.empty())
    throw bad("it lacks version, secret, server or hello");
  return a;
}

void write_file(const std::string& path, const Address& a) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    // Its owner's alone: its secret is what lets a worker join (and be given tasks).
    ::unlink(tmp.c_str());
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (fd) ::fchmod(fd.get(), 0600);
    const std::string text = to_text(a);
    if (!fd || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
      throw Error("fibra: cannot write the join file " + tmp + " (" + std::strerror(errno) + ")");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw Error("fibra: cannot write the join file " + path + " (" + std::strerror(e) + ")");
  }
}

Address read_file(const std::string& path, double wait_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  for (;;) {
    if (::access(path.c_str(), F_OK) == 0) return parse(read_private_file(path, "the join file"), path);
    if (std::chrono::steady_clock::now() >= end)
      throw ConfigError("fibra: no join file " + path + " after waiting " + std::to_string(static_cast<int>(wait_s)) +
                        " s (FIBRA_JOIN_WAIT_S): start the driver with FIBRA_JOIN_FILE=" + path +
                        ", on a file system this node reads too");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace fibra::detail::join
