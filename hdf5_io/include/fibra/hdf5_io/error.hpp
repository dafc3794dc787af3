// fibra/hdf5_io/error.hpp: the error of fibra's HDF5 store, beside its headers (fibra's own errors
// are in <fibra/error.hpp>). Named fibra::Hdf5Error, as before it moved here.
#pragma once

#include <fibra/error.hpp>

namespace fibra {

/// @brief An HDF5 call failed; the message carries HDF5's error stack.
class Hdf5Error : public Error {
 public:
  using Error::Error;
};

}  // namespace fibra
