// src/driver/run_secret.hpp: the driver's run secret (transport/auth.hpp), which its agents' object
// servers and the workers that join it prove they hold (docs/security.md). It is made on first
// use: 32 random bytes in a file of mode 0600, made exclusively in a folder of this user's alone
// (FIBRA_SECRET_DIR, else ~/.fibra/secrets), named for this host, boot and process and a random
// word. Spawned agents are given the file's path (never its bytes) and read it there; a worker
// that joins reads it from the join file. The file goes when the driver ends; one left by a killed
// driver is removed, once a day old, by a later driver on that host that finds its process gone.
#pragma once

#include <string>

#include "transport/auth.hpp"

namespace fibra::detail {

struct RunSecret {
  auth::Secret secret;
  std::string file;  ///< where it is kept; empty if it could not be written (agents then get none)
};
/// The run's secret, made on first call; Error if no random bytes can be had.
const RunSecret& run_secret();
/// Removes the secret's file (the driver's end); harmless if none was made.
void remove_run_secret() noexcept;

}  // namespace fibra::detail
