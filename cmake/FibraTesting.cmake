# Helpers to run fibra programs as tests, the way users launch them.
#
# fibra_add_mpi_test(NAME <name> COMMAND <target> [ARGS ...] [LAUNCH singleton|mpirun|mpirun_recovery]
#                    [TIMEOUT s] [LABELS ...])
#   LAUNCH singleton runs `./app` (an MPI singleton that spawns its workers);
#   LAUNCH mpirun runs `mpirun -n 1 ./app`; LAUNCH mpirun_recovery adds Open MPI's recovery
#   settings (for programs that kill agents) and, since mpirun then exits 0 whatever the program
#   returns, takes GoogleTest's verdict from the output. Every test has a timeout.
function(fibra_add_mpi_test)
  cmake_parse_arguments(T "" "NAME;COMMAND;LAUNCH;TIMEOUT" "ARGS;LABELS" ${ARGN})
  if(NOT T_LAUNCH)
    set(T_LAUNCH singleton)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  if(T_LAUNCH STREQUAL "mpirun")
    add_test(NAME ${T_NAME}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 1 $<TARGET_FILE:${T_COMMAND}> ${T_ARGS})
  elseif(T_LAUNCH STREQUAL "mpirun_recovery")
    add_test(NAME ${T_NAME}
      COMMAND ${MPIEXEC_EXECUTABLE} --enable-recovery --mca orte_abort_on_non_zero_status 0 ${MPIEXEC_NUMPROC_FLAG} 1
              $<TARGET_FILE:${T_COMMAND}> --gtest_color=no ${T_ARGS})
    set_tests_properties(${T_NAME} PROPERTIES
      PASS_REGULAR_EXPRESSION "\\[  PASSED  \\] [0-9]+ tests?\\.\n" FAIL_REGULAR_EXPRESSION "\\[  FAILED  \\]")
  else()
    add_test(NAME ${T_NAME} COMMAND $<TARGET_FILE:${T_COMMAND}> ${T_ARGS})
  endif()
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "mpi;${T_LABELS}"
    ENVIRONMENT "FIBRA_PROGRESS=0;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;EVENT_NOEPOLL=1")
endfunction()

# fibra_discover_gtests(<target> [PREFIX p] [TIMEOUT s] LABELS <label>...)
#   Registers a GoogleTest binary's tests by discovery, each carrying every label in LABELS.
#   gtest_discover_tests flattens a list-valued property (LABELS "unit;tune" became "unit" alone),
#   so the labels are set after discovery. The labels are also recorded for layout.test_labels,
#   which checks that every discovered test carries them (so `ctest -L` selects what it names).
include(GoogleTest)
function(fibra_discover_gtests target)
  cmake_parse_arguments(T "" "PREFIX;TIMEOUT" "LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 60)
  endif()
  if(NOT T_LABELS)
    message(FATAL_ERROR "fibra_discover_gtests(${target}): name at least one label (LABELS unit ...)")
  endif()
  gtest_discover_tests(${target} TEST_PREFIX "${T_PREFIX}" TEST_LIST ${target}_TESTS
                       PROPERTIES TIMEOUT ${T_TIMEOUT} DISCOVERY_TIMEOUT 30)
  set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_labels.cmake)
  file(WRITE ${labels_file} "set_tests_properties(\${${target}_TESTS} PROPERTIES LABELS \"${T_LABELS}\")\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
  string(REPLACE ";" "," comma_labels "${T_LABELS}")
  set_property(GLOBAL APPEND PROPERTY FIBRA_DISCOVERED_GTESTS "$<TARGET_FILE:${target}>=${comma_labels}")
endfunction()

# Writes the list fibra_discover_gtests recorded (one "binary=label,label" a line) to <file>, at
# generation time, for layout.test_labels.
function(fibra_write_discovered_gtests file)
  get_property(entries GLOBAL PROPERTY FIBRA_DISCOVERED_GTESTS)
  string(REPLACE ";" "\n" lines "${entries}")
  file(GENERATE OUTPUT ${file} CONTENT "${lines}\n")
endfunction()
