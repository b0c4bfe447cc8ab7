# SPDX-License-Identifier: Apache-2.0
# The log-mel features against the numpy reference script, run with /usr/bin/python3 (python3-numpy comes
# from ops/install-deps.sh). Included by tests/integration/CMakeLists.txt.
if(TARGET prsgd::algorithms)
  prsgd_add_test(algorithms_log_mel_reference_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/algorithms/log_mel_reference_test.cpp
    DEPS prsgd::algorithms prsgd_test_support
    LABELS integration)
  target_compile_definitions(algorithms_log_mel_reference_test PRIVATE
    PRSGD_ALGORITHMS_TEST_DIR="${CMAKE_CURRENT_LIST_DIR}/algorithms")
  target_include_directories(algorithms_log_mel_reference_test PRIVATE ${PROJECT_SOURCE_DIR}/tests/unit/algorithms/audio)
endif()

# The shared Fashion-MNIST byte cache: two processes (forked by the test) racing to build it build it once.
if(TARGET prsgd::algorithms)
  prsgd_add_test(algorithms_byte_cache_race_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/algorithms/byte_cache_race_test.cpp
    DEPS prsgd::algorithms prsgd_test_support
    LABELS integration TIMEOUT 120)
endif()
