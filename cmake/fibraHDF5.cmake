# HDF5's C library, static, for fibra::hdf5_io (included by hdf5_io/CMakeLists.txt and by the
# installed fibraConfig.cmake, so that a project using fibra links it the same way).
#
# Why static: Debian's shared HDF5 needs libcurl, OpenSSL, GnuTLS, Kerberos and LDAP, 36 more
# shared libraries in every process of a fibra program, which the dynamic loader maps and
# relocates at each start of a worker, an actor or a fibra::Process: 15 of the 20 ms of CPU an
# empty program linked as fibra's took to start here (5 ms without them). The archive brings only
# the code fibra calls, which needs libsz and libz; fibra::hdf5_io links with --as-needed, so the
# rest FindHDF5 lists for the archive (libcurl, libcrypto) is not loaded.
#
# The caller's HDF5_USE_STATIC_LIBRARIES is put back after.
set(_fibra_hdf5_static "${HDF5_USE_STATIC_LIBRARIES}")
set(HDF5_USE_STATIC_LIBRARIES ON)
find_package(HDF5 REQUIRED COMPONENTS C)
set(HDF5_USE_STATIC_LIBRARIES "${_fibra_hdf5_static}")
unset(_fibra_hdf5_static)
# FindHDF5's imported target names the archive alone; what the archive needs is in its list.
get_target_property(_fibra_hdf5_links hdf5::hdf5 INTERFACE_LINK_LIBRARIES)
if(NOT _fibra_hdf5_links)
  set(_fibra_hdf5_links ${HDF5_C_LIBRARIES})
  list(FILTER _fibra_hdf5_links EXCLUDE REGEX "libhdf5[^/]*\\.a$")
  set_property(TARGET hdf5::hdf5 APPEND PROPERTY INTERFACE_LINK_LIBRARIES ${_fibra_hdf5_links})
endif()
unset(_fibra_hdf5_links)
