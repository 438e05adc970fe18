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

# cmr_add_fuzzer(NAME name SOURCES a.c ... [LIBS lib ...] [CORPUS dir])
#   A libFuzzer target (only when CMR_FUZZ is ON, with clang). ctest -L fuzz runs it for
#   CMR_FUZZ_SECONDS seconds over a copy of CORPUS (the seeds in the source tree stay as
#   they are); any crash, leak, out-of-bounds access or UB report fails the test.
function(cmr_add_fuzzer)
  cmake_parse_arguments(F "" "NAME;CORPUS" "SOURCES;LIBS" ${ARGN})
  if(NOT CMR_FUZZ)
    return()
  endif()
  add_executable(${F_NAME} ${F_SOURCES})
  target_link_libraries(${F_NAME} PRIVATE ${F_LIBS})
  target_link_options(${F_NAME} PRIVATE -fsanitize=fuzzer)
  set(work ${CMAKE_CURRENT_BINARY_DIR}/${F_NAME}-corpus)
  set(seed_args "")
  if(F_CORPUS)
    set(seed_args ${F_CORPUS})
  endif()
  add_test(NAME ${F_NAME}
    COMMAND ${CMAKE_COMMAND} -E env UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
            sh -c "mkdir -p '${work}' && exec '$<TARGET_FILE:${F_NAME}>' -max_total_time=${CMR_FUZZ_SECONDS} -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 '${work}' ${seed_args}")
  math(EXPR t "${CMR_FUZZ_SECONDS} + 120")
  set_tests_properties(${F_NAME} PROPERTIES LABELS fuzz TIMEOUT ${t})
endfunction()

# The JDKs the JVM tests run on, as VERSION:JAVA_HOME: Debian's OpenJDK 17 always, and
# Temurin 25 where it is installed.
set(CMR_TEST_JDKS "17:${CMR_JAVA_HOME}")
if(EXISTS /usr/lib/jvm/temurin-25-jdk-amd64/bin/java)
  list(APPEND CMR_TEST_JDKS "25:/usr/lib/jvm/temurin-25-jdk-amd64")
endif()

# cmr_add_jvm_test(NAME command...)
#   One test NAME_<version> per JDK of CMR_TEST_JDKS (label jvm, 600 s, exit 77 = skipped);
#   in the command, @JAVA_HOME@ stands for that JDK's home.
function(cmr_add_jvm_test name)
  foreach(jdk IN LISTS CMR_TEST_JDKS)
    string(REPLACE ":" ";" parts ${jdk})
    list(GET parts 0 version)
    list(GET parts 1 home)
    string(REPLACE "@JAVA_HOME@" "${home}" cmd "${ARGN}")
    add_test(NAME ${name}_${version} COMMAND ${cmd})
    set_tests_properties(${name}_${version} PROPERTIES LABELS jvm TIMEOUT 600 SKIP_RETURN_CODE 77)
  endforeach()
endfunction()
