# Compares `fibra slurm render SPEC` with a golden file. Run from the source folder, so the spec's
# path in the script's header is the same everywhere.
#   cmake -DFIBRA=<fibra> -DSPEC=<spec, relative to the source folder> -DGOLDEN=<file> [-DUPDATE=ON] -P golden.cmake
# With -DUPDATE=ON (or env FIBRA_UPDATE_GOLDEN=1) it rewrites the golden file instead.
execute_process(COMMAND ${FIBRA} slurm render ${SPEC} OUTPUT_VARIABLE rendered ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fibra slurm render ${SPEC} failed (${rc}): ${err}")
endif()
# The script must at least be valid bash.
execute_process(COMMAND bash -n -c "${rendered}" RESULT_VARIABLE syntax ERROR_VARIABLE syntax_err)
if(NOT syntax EQUAL 0)
  message(FATAL_ERROR "rendered script for ${SPEC} is not valid bash: ${syntax_err}")
endif()
if(UPDATE OR "$ENV{FIBRA_UPDATE_GOLDEN}")
  file(WRITE ${GOLDEN} "${rendered}")
  message(STATUS "updated ${GOLDEN}")
  return()
endif()
file(READ ${GOLDEN} expected)
if(NOT rendered STREQUAL expected)
  file(WRITE ${GOLDEN}.actual "${rendered}")
  execute_process(COMMAND diff -u ${GOLDEN} ${GOLDEN}.actual)
  message(FATAL_ERROR "rendered script differs from ${GOLDEN} (diff above; new text in ${GOLDEN}.actual). "
                      "If the change is intended, rerun with FIBRA_UPDATE_GOLDEN=1.")
endif()
