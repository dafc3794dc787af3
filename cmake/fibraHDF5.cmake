# HDF5's C library for fibra::hdf5_io, static where there is one (included by
# hdf5_io/CMakeLists.txt and by the installed fibraConfig.cmake, so that a project using fibra
# links it the same way). Sets HDF5_FOUND; the caller says what a missing HDF5 means.
#
# Why static: Debian's shared HDF5 needs libcurl, OpenSSL, GnuTLS, Kerberos and LDAP, 36 more
# shared libraries in every process of a fibra program, which the dynamic loader maps and
# relocates at each start of a worker, an actor or a fibra::Process (docs/architecture.md,
# "Processes", has the figures). The archive brings only the code fibra calls, which needs libsz
# and libz; the rest FindHDF5 lists for it (libcurl, libcrypto) is linked --as-needed, so that it
# is not loaded. Where there is no static library (conda, some distributions), the shared one.
#
# The caller's HDF5_USE_STATIC_LIBRARIES is put back after.
set(_fibra_hdf5_static "${HDF5_USE_STATIC_LIBRARIES}")
set(HDF5_USE_STATIC_LIBRARIES ON)
find_package(HDF5 QUIET COMPONENTS C)
if(NOT HDF5_FOUND)
  set(HDF5_USE_STATIC_LIBRARIES OFF)
  find_package(HDF5 QUIET COMPONENTS C)
endif()
set(HDF5_USE_STATIC_LIBRARIES "${_fibra_hdf5_static}")
unset(_fibra_hdf5_static)
# FindHDF5's imported target names the archive alone: what the archive needs is in its list,
# added here between --push-state,--as-needed and --pop-state (only these libraries are dropped
# when unused; the rest of a program's link line is left as it is).
if(HDF5_FOUND AND TARGET hdf5::hdf5)
  get_target_property(_fibra_hdf5_location hdf5::hdf5 IMPORTED_LOCATION)
  get_target_property(_fibra_hdf5_links hdf5::hdf5 INTERFACE_LINK_LIBRARIES)
  if(_fibra_hdf5_location MATCHES "\\.a$" AND NOT _fibra_hdf5_links)
    set(_fibra_hdf5_links ${HDF5_C_LIBRARIES})
    list(FILTER _fibra_hdf5_links EXCLUDE REGEX "libhdf5[^/]*\\.a$")
    set_property(TARGET hdf5::hdf5 APPEND PROPERTY INTERFACE_LINK_LIBRARIES
                 "-Wl,--push-state,--as-needed" ${_fibra_hdf5_links} "-Wl,--pop-state")
  endif()
  unset(_fibra_hdf5_location)
  unset(_fibra_hdf5_links)
endif()
