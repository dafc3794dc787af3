# fibra_user_flags(<out> <includes> <defines>): appends to <out> the -I and -D flags a fibra user
# compiles with, from the '|'-separated include directories and definitions the tests pass in
# (the fibra target's INTERFACE_INCLUDE_DIRECTORIES and INTERFACE_COMPILE_DEFINITIONS). For scripts
# run with `cmake -P` that call the compiler themselves (tests/compile_fail, tests/docs).
function(fibra_user_flags out includes defines)
  set(args ${${out}})
  string(REPLACE "|" ";" includes "${includes}")
  string(REPLACE "|" ";" defines "${defines}")
  foreach(dir IN LISTS includes)
    if(dir)
      list(APPEND args -I${dir})
    endif()
  endforeach()
  foreach(def IN LISTS defines)
    if(def)
      list(APPEND args -D${def})
    endif()
  endforeach()
  set(${out} ${args} PARENT_SCOPE)
endfunction()
