# SPDX-License-Identifier: Apache-2.0
# Neural-network half of prsgd::algorithms: flat parameters, layers, models, registry, SGD.
# The layers: one file per kind (layer.cpp: base, relu, flatten; linear.cpp; conv2d.cpp; pooling.cpp;
# batch_norm.cpp; residual.cpp), the element-wise kernels (kernels.cpp), the BLAS glue (blas.cpp) and the
# loss (loss.cpp), sharing the private header layer_kernels.hpp.
set(_nn_src ${CMAKE_CURRENT_LIST_DIR}/src/nn)
set(_nn_layer_sources ${_nn_src}/kernels.cpp ${_nn_src}/layer.cpp ${_nn_src}/linear.cpp ${_nn_src}/conv2d.cpp
    ${_nn_src}/pooling.cpp ${_nn_src}/batch_norm.cpp ${_nn_src}/residual.cpp ${_nn_src}/loss.cpp)
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${_nn_layer_sources}
  ${_nn_src}/blas.cpp
  ${_nn_src}/model.cpp
  ${_nn_src}/model_registry.cpp
  ${_nn_src}/model_spec.cpp
  ${_nn_src}/sgd.cpp)
# The layer files share Eigen and layer_kernels.hpp, so they compile as one unity file: a clean build costs
# what the single layers.cpp they were split from cost (one by one they took twice its compile time), and
# the kernels they share stay in the translation unit that calls them. blas.cpp is compiled on its own: it
# alone gets the BLAS definitions below (a source with COMPILE_DEFINITIONS is never put in a unity file).
# CMakeLists.txt turns on the target's unity groups.
set_source_files_properties(${_nn_layer_sources} PROPERTIES UNITY_GROUP nn_layers)

# The library is built for the x86-64 baseline (PRSGD_X86_LEVEL), where Eigen's own GEMM cannot use
# AVX2/AVX-512. Routing the layers' matrix products through the system BLAS (Debian's libblas.so.3, which
# the alternatives system points at OpenBLAS when libopenblas0-pthread is installed) picks the CPU's
# best kernels at run time without raising the build's baseline.
option(PRSGD_NN_USE_BLAS "Run the nn layers' GEMMs through the system BLAS (OpenBLAS at run time)" ON)
if(PRSGD_NN_USE_BLAS)
  find_package(BLAS)
  if(BLAS_FOUND)
    set_source_files_properties(${_nn_src}/blas.cpp PROPERTIES
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
