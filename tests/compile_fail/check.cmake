# One compile-fail case: compiles SOURCE with the flags of a fibra user (-fsyntax-only) and passes
# when the compiler refuses it and its first error is the sentence on the case's first line
# (`// expect: ...`, without a semicolon). Arguments: CXX, SOURCE, INCLUDES and DEFINES ('|'-separated).
file(STRINGS ${SOURCE} first LIMIT_COUNT 1)
string(REGEX REPLACE "^// expect: " "" expect "${first}")
include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/FibraUserFlags.cmake)
set(args -std=c++20 -fsyntax-only)
fibra_user_flags(args "${INCLUDES}" "${DEFINES}")
execute_process(COMMAND ${CXX} ${args} ${SOURCE} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must be refused with: ${expect}")
endif()
string(REGEX MATCH "error: [^\n]*" first_error "${out}")
string(FIND "${first_error}" "${expect}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${SOURCE}: the first error is not fibra's sentence.\nexpected: ${expect}\nfirst error: ${first_error}\n\n${out}")
endif()
message(STATUS "refused as expected: ${first_error}")
