# SPDX-License-Identifier: Apache-2.0
# Neural-network half of prsgd::algorithms: flat parameters, layers, models, registry, SGD.
# layers.cpp holds every Eigen-heavy kernel in one translation unit to keep build times down.
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/src/nn/layers.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/nn/model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/nn/model_registry.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/nn/sgd.cpp)
