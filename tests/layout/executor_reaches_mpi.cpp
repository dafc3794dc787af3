// Compiled by the test layout.executor_refuses_mpi with src/executor/'s include path: it reaches
// <mpi.h> through a fibra header, as a careless include in src/executor/ would, and must be stopped
// by cmake/no_mpi/mpi.h's sentence (it passes only if that sentence is the compiler's error).
#include "transport/mpi.hpp"
