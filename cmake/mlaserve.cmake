# Shared build rules: every target of ours gets the same warnings and include root.
set(MLASERVE_WARNINGS -Wall -Wextra -Werror)

function(mls_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${MLASERVE_WARNINGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror>)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# One gtest binary per subject; each TEST is its own CTest entry, prefixed with the binary's
# name so that `ctest -R <subject>` selects a subject's tests.
function(mls_test name)
  if(NOT MLASERVE_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${MLASERVE_WARNINGS})
  target_compile_definitions(${name} PRIVATE
    MLASERVE_TEST_DATA="${PROJECT_SOURCE_DIR}/tests/data"
    MLASERVE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    MLASERVE_BINARY_DIR="${PROJECT_BINARY_DIR}")
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name} TEST_PREFIX "${name}." DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 60)
endfunction()
