// src/common/process.hpp: facts about this process and its children that every role needs.
#pragma once

#include <string>

namespace fibra::detail {

/// The path of this process's executable (to start copies of it).
std::string self_exe();
/// This host's name.
std::string host_name();
/// "was killed by signal 11 (Segmentation fault)" / "exited with status 3 ...", from a waitpid status.
std::string describe_exit(int wait_status);

}  // namespace fibra::detail
