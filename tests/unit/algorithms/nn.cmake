# SPDX-License-Identifier: Apache-2.0
# Layers (finite-difference checks), models, registry and SGD. Two binaries keep Eigen compile time modest.
prsgd_add_test(nn_layers_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/nn/layers_test.cpp DEPS prsgd::algorithms)
prsgd_add_test(nn_model_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/nn/model_test.cpp ${CMAKE_CURRENT_LIST_DIR}/nn/sgd_test.cpp
  DEPS prsgd::algorithms)
# Model spec strings (mlp:..., cnn:...).
prsgd_add_test(nn_model_spec_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/nn/model_spec_test.cpp DEPS prsgd::algorithms)
