# SPDX-License-Identifier: Apache-2.0
# Speech data (issue 7): runs ops/make-kws-data (espeak-ng + sox + python3-numpy) and loads what it writes.
if(TARGET prsgd::algorithms)
  prsgd_add_test(prsgd_speech_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/speech/speech_test.cpp
    DEPS prsgd::algorithms
    LABELS integration
    TIMEOUT 120)
  target_compile_definitions(prsgd_speech_test PRIVATE PRSGD_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endif()
