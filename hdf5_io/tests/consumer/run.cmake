# Installs the fibra build into a scratch prefix, builds the checkpoint consumer against it, runs it.
file(REMOVE_RECURSE ${WORK})
foreach(step
    "${CMAKE_COMMAND};--install;${FIBRA_BUILD};--prefix;${WORK}/prefix"
    "${CMAKE_COMMAND};-S;${CMAKE_CURRENT_LIST_DIR};-B;${WORK}/build;-DCMAKE_PREFIX_PATH=${WORK}/prefix;-DCMAKE_BUILD_TYPE=Release"
    "${CMAKE_COMMAND};--build;${WORK}/build;-j1"
    "${WORK}/build/consumer;${WORK}/consumer.h5")
  execute_process(COMMAND ${step} RESULT_VARIABLE rc TIMEOUT 240)
  if(rc)
    message(FATAL_ERROR "failed (${rc}): ${step}")
  endif()
endforeach()
