# SPDX-License-Identifier: Apache-2.0
# Tests for WAV reading, log-mel features and the keyword data-set loader.
if(TARGET prsgd::algorithms)
  prsgd_add_test(prsgd_wav_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/audio/wav_test.cpp
    DEPS prsgd::algorithms prsgd_test_support)
  # The comparison with the numpy reference runs python3: tests/integration/algorithms.
  prsgd_add_test(prsgd_log_mel_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/audio/log_mel_test.cpp
    DEPS prsgd::algorithms)
  prsgd_add_test(prsgd_kws_data_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/audio/kws_data_test.cpp
    DEPS prsgd::algorithms prsgd_test_support)
endif()
if(TARGET prsgd::algorithms)
  prsgd_add_test(prsgd_kws_model_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/audio/kws_model_test.cpp
    DEPS prsgd::algorithms)
endif()
# The wav-folder data set.
if(TARGET prsgd::algorithms)
  prsgd_add_test(prsgd_wav_folder_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/audio/wav_folder_test.cpp
    DEPS prsgd::algorithms prsgd_test_support)
endif()
