# SPDX-License-Identifier: Apache-2.0
prsgd_add_test(actors_codec_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/codec_test.cpp DEPS prsgd::actors msgpackc-cxx)
