# Test helpers shared by every component.
#
# cmr_add_test(NAME name SOURCES a.c ... [LIBS lib ...] [LABELS unit|broker|jvm|...]
#              [TIMEOUT seconds] [ARGS ...])
#   Builds one test executable and registers it with ctest. Label `unit` marks tests that
#   start no JVM and no broker: CI runs those again under ASan + UBSan.
function(cmr_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;ARGS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} PkgConfig::CMOCKA)
  add_test(NAME ${T_NAME} COMMAND ${T_NAME} ${T_ARGS})
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "CMR_SOURCE_DIR=${PROJECT_SOURCE_DIR};CMR_BINARY_DIR=${PROJECT_BINARY_DIR}")
endfunction()
