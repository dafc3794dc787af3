// src/common/private_file.cpp: see private_file.hpp.
#include "common/private_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/unique_fd.hpp"
#include "fibra/error.hpp"

namespace fibra::detail {

namespace {
constexpr std::size_t most_read = 64 * 1024;

std::string mode_text(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m & 07777));
  return b;
}
}  // namespace

void make_private_folder(const std::string& folder, const std::string& what) {
  for (std::size_t at = 1; at <= folder.size(); ++at) {
    if (at != folder.size() && folder[at] != '/') continue;
    const std::string part = folder.substr(0, at);
    if (::mkdir(part.c_str(), at == folder.size() ? 0700 : 0755) != 0 && errno != EEXIST)
      throw ConfigError("fibra: cannot make the folder " + part + " for " + what + " (" + std::strerror(errno) + ")");
    // A folder on the way that another user owns (not root) could have its contents swapped.
    struct stat up {};
    if (at != folder.size() && ::stat(part.c_str(), &up) == 0 && up.st_uid != ::geteuid() && up.st_uid != 0)
      throw ConfigError("fibra: " + part + ", on the way to the folder for " + what + ", belongs to user " +
                        std::to_string(up.st_uid) + ": name a folder whose parents are yours or root's");
  }
  struct stat st {};
  if (::lstat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw ConfigError("fibra: " + folder + ", the folder for " + what + ", is not a folder (a link, or a file)");
  if (st.st_uid != ::geteuid())
    throw ConfigError("fibra: " + folder + ", the folder for " + what + ", belongs to user " +
                      std::to_string(st.st_uid) + ", not to you: name a folder of your own");
  if ((st.st_mode & 077) != 0)
    throw ConfigError("fibra: " + folder + ", the folder for " + what + ", has mode " + mode_text(st.st_mode) +
                      ": others may enter it; `chmod 700 " + folder + "`, or name another folder");
}

void write_private_file(const std::string& path, const std::string& text, const std::string& what, bool replace) {
  if (replace) ::unlink(path.c_str());
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  const std::string why = !fd ? std::strerror(errno) : "";
  if (fd) ::fchmod(fd.get(), 0600);  // (whatever the umask)
  if (!fd || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    throw ConfigError("fibra: cannot write " + what + " to " + path + " (" + (why.empty() ? "a short write" : why) +
                      ")");
}

std::string read_private_file(const std::string& path, const std::string& what) {
  // (non-blocking: a FIFO put in its place would block the open for good; a regular file is read
  // the same either way)
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!fd)
    throw ConfigError("fibra: cannot read " + what + " " + path + " (" + std::strerror(errno) +
                      (errno == ELOOP ? ": a symbolic link, which is not followed" : "") + ")");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    throw ConfigError("fibra: " + what + " " + path + " is not a regular file");
  if (st.st_uid != ::geteuid())
    throw ConfigError("fibra: " + what + " " + path + " belongs to user " + std::to_string(st.st_uid) +
                      ", not to you: it is not used (another user could have written it)");
  if ((st.st_mode & 077) != 0)
    throw ConfigError("fibra: " + what + " " + path + " has mode " + mode_text(st.st_mode) +
                      ": others may read or write it, so it is not used; `chmod 600 " + path +
                      "` if nobody else can have read it, else start the run again");
  if (static_cast<std::size_t>(st.st_size) > most_read)
    throw ConfigError("fibra: " + what + " " + path + " is " + std::to_string(st.st_size) +
                      " bytes, more than such a file holds");
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t k = ::read(fd.get(), text.data() + got, text.size() - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += static_cast<std::size_t>(k);
  }
  text.resize(got);
  return text;
}

}  // namespace fibra::detail
