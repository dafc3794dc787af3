/* Found first on the include path of src/executor/ (CMakeLists.txt, fibra_executor): an executor
   runs user code and never touches MPI, so a file there that includes <mpi.h>, directly or through
   another header, stops the build here. Keep MPI in src/agent/, src/driver/ or src/transport/mpi.*. */
#error "src/executor/ must not include <mpi.h> (an executor has no MPI state): move the MPI code to src/agent/ or src/transport/"
