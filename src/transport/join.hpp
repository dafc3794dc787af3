// src/transport/join.hpp: how a worker started apart (another mpirun, another Slurm job, on any
// node) joins a running driver (docs/architecture.md, "Joining a running driver").
//
// The driver writes a join file (mode 0600, its owner's alone): the run's secret, its build's
// fingerprint, the Open MPI name server (ompi-server) both sides must use, and the TCP address of
// its hello. A joiner reads it (refusing a file others could read or write), starts MPI with that
// name server, connects over TCP, proves it holds the secret and checks that the driver does
// (transport/auth.hpp), says hello sealed (wire::JoinHello), and only once the driver answers "go" (wire::JoinAnswer,
// with an MPI port opened for this joiner alone) calls MPI_Comm_connect, which the driver's MPI_Comm_accept then meets
// at once: an accept never waits for a joiner that might not come. One that dies between its hello and its connect is
// connected for by a stand-in (src/driver/joins.cpp), so the accept still returns.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "transport/auth.hpp"

namespace fibra::detail::join {

/// What the join file says.
struct Address {
  std::optional<auth::Secret> secret;  ///< this run's: a joiner proves it holds it
  std::uint64_t fingerprint = 0;       ///< the driver's registry of remote functions
  std::string server_uri;              ///< ompi-server's URI (OMPI_MCA_pmix_server_uri of every side)
  std::string server_file;             ///< a file holding that URI, for `mpirun --ompi-server file:<it>`
  struct Hello {
    std::string host;
    std::uint16_t port = 0;
  };
  std::vector<Hello> hello;  ///< where the driver hears hellos, in the order to try
};

/// The file's text: a comment saying what it is, then one "key value" line per field.
std::string to_text(const Address& a);
/// Parses a join file's text; ConfigError naming `path` and what is wrong.
Address parse(std::string_view text, const std::string& path);
/// Writes the file whole, mode 0600 (a temporary file renamed over it): a joiner never reads half
/// of it.
void write_file(const std::string& path, const Address& a);
/// Reads and parses the file, waiting up to `wait_s` for it to appear (the driver may still be
/// starting); ConfigError when it does not, does not parse, or others could read or write it.
Address read_file(const std::string& path, double wait_s);

}  // namespace fibra::detail::join
