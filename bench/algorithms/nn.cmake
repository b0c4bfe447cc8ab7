# SPDX-License-Identifier: Apache-2.0
# Training-library benchmark: throughput and 3-epoch accuracy of the registry models, run side
# by side with bench/algorithms/nn/torch_bench.py by bench/algorithms/nn/run_vs_pytorch.sh.
prsgd_add_executable(prsgd_nn_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/nn/nn_bench.cpp DEPS prsgd::algorithms)
