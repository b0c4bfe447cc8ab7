# SPDX-License-Identifier: Apache-2.0
# Neural-network half of prsgd::algorithms: flat parameters, layers, models, registry, SGD.
# layers.cpp holds every Eigen-heavy kernel in one translation unit to keep build times down.
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/src/nn/layers.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/nn/model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/nn/model_registry.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/nn/model_spec.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/nn/sgd.cpp)

# The library is built for the x86-64 baseline (PRSGD_X86_LEVEL), where Eigen's own GEMM cannot use
# AVX2/AVX-512. Routing the layers' matrix products through the system BLAS (Debian's libblas.so.3, which
# the alternatives system points at OpenBLAS when libopenblas0-pthread is installed) picks the CPU's
# best kernels at run time without raising the build's baseline.
option(PRSGD_NN_USE_BLAS "Run the nn layers' GEMMs through the system BLAS (OpenBLAS at run time)" ON)
if(PRSGD_NN_USE_BLAS)
  find_package(BLAS)
  if(BLAS_FOUND)
    set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/src/nn/layers.cpp PROPERTIES
      COMPILE_DEFINITIONS "EIGEN_USE_BLAS;PRSGD_NN_BLAS=1")
    cmake_language(DEFER CALL target_link_libraries prsgd_algorithms PRIVATE BLAS::BLAS)
    # prsgdConfig.cmake finds BLAS again for consumers of a static build.
    set_property(GLOBAL PROPERTY PRSGD_NN_BLAS ON)
  else()
    message(STATUS "prsgd nn: no BLAS found; using Eigen's built-in GEMM (slower)")
  endif()
endif()

# Files: safetensors reading and writing, and the model <-> named tensors conversion (io/).
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/src/io/json.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/io/safetensors.cpp)
