// fibra/slurm/error.hpp: the error of fibra's Slurm client, beside its headers.
#pragma once

#include <fibra/error.hpp>

namespace fibra::slurm {

/// @brief Slurm refused a request or could not be reached; the message says why in plain words.
class SlurmError : public Error {
 public:
  using Error::Error;
};

}  // namespace fibra::slurm
