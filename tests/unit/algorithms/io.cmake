# SPDX-License-Identifier: Apache-2.0
# safetensors reading/writing (malformed files included) and models as named tensors.
prsgd_add_test(prsgd_safetensors_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/io/safetensors_test.cpp
               DEPS prsgd::algorithms)
