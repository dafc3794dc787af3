// src/common/private_file.hpp: files that hold what only their owner may read (the run's secret,
// the join file, the live page's token): made exclusively with mode 0600 in folders of their
// owner's alone, and read only after checking that nobody else could have read or written them.
#pragma once

#include <string>

namespace fibra::detail {

/// Makes `folder` (and its missing parents) with mode 0700 where it makes it, and checks that it is
/// this user's and that nobody else may enter or write it; ConfigError naming `what` and the fix.
void make_private_folder(const std::string& folder, const std::string& what);
/// Writes `text` to a new file `path` of mode 0600, made exclusively: a file or link already there
/// is an error (or, with `replace`, is removed first: never followed). ConfigError naming `what`.
void write_private_file(const std::string& path, const std::string& text, const std::string& what,
                        bool replace = false);
/// The text of `path` (at most 64 KiB), once it is known to be a regular file (not a link) that
/// this user owns and nobody else may read or write; ConfigError naming `what`, the problem and
/// the fix otherwise.
std::string read_private_file(const std::string& path, const std::string& what);

}  // namespace fibra::detail
