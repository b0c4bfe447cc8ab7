# SPDX-License-Identifier: Apache-2.0
# The Python package (python/) against a real averager and real C++ workers, with Debian's python3-torch,
# python3-zmq and python3-msgpack. pytorch_install makes a venv in the build tree and installs the package
# into it (the other tests use that venv, a ctest fixture); pytorch_mixed compares a job of 2 C++ + 2
# PyTorch fmnist-mlp workers with an all-C++ one; pytorch_curve runs a C++ and a PyTorch worker over CURVE;
# pytorch_balanced checks time-balanced intervals with a slowed-down PyTorch worker;
# pytorch_example runs examples/pytorch through a kill -9 of a worker and of the averager; pytorch_refused
# checks the one-line refusal of a worker with another model; pytorch_external* run `--model external` jobs
# (PyTorch workers and an evaluator, no C++ model): accuracy and --save-model, recovery from kill -9 of a
# worker and of the averager, the refusal of another parameter count, and a job without an evaluator.
# worker_conformance_{cpp,python} run the same protocol checks against `prsgd worker` and the Python worker.
if(TARGET prsgd AND EXISTS /usr/bin/python3)
  set(_script ${CMAKE_CURRENT_LIST_DIR}/pytorch/pytorch_job.py)
  set(_work ${CMAKE_CURRENT_BINARY_DIR}/pytorch)
  set(_args --prsgd $<TARGET_FILE:prsgd> --python-src ${PROJECT_SOURCE_DIR}/python --venv ${_work}/venv
            --examples ${PROJECT_SOURCE_DIR}/examples)
  add_test(NAME pytorch_install COMMAND /usr/bin/python3 ${_script} ${_args} --workdir ${_work}/install install)
  set_tests_properties(pytorch_install PROPERTIES LABELS "integration" TIMEOUT 300 FIXTURES_SETUP prsgd_python_venv)
  prsgd_scaled_timeout(_timeout 900)
  set(_scenarios mixed curve balanced example refused external external_recovery external_refused
                 external_no_evaluator)
  if(PRSGD_SANITIZERS)
    # Under sanitizers only the averager is instrumented (Python is not), so the scenarios that check the
    # Python side's training (mixed, curve, balanced, the plain external-model job, the Python worker's
    # conformance run) run in the optimised build only; the kill -9 recoveries, the refusals and the job
    # without an evaluator keep the averager's paths under the sanitizers.
    set(_scenarios example refused external_recovery external_refused external_no_evaluator)
  endif()
  foreach(scenario ${_scenarios})
    add_test(NAME pytorch_${scenario} COMMAND /usr/bin/python3 ${_script} ${_args} --workdir ${_work}/${scenario}
                                              ${scenario})
    set_tests_properties(pytorch_${scenario} PROPERTIES LABELS "integration;process" TIMEOUT ${_timeout}
                         FIXTURES_REQUIRED prsgd_python_venv ENVIRONMENT PRSGD_TEST_TIME_SCALE=${PRSGD_TEST_TIME_SCALE})
  endforeach()
  # The codec, ShardSampler and the flat layout, straight from the source tree: no process, no socket.
  add_test(NAME python_package_test COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/pytorch/package_test.py
                                            ${PROJECT_SOURCE_DIR}/python)
  set_tests_properties(python_package_test PROPERTIES LABELS unit TIMEOUT 120 ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
  set(_conformance ${CMAKE_CURRENT_LIST_DIR}/pytorch/conformance.py)
  add_test(NAME worker_conformance_cpp COMMAND /usr/bin/python3 ${_conformance} --worker cpp --prsgd $<TARGET_FILE:prsgd>
                                               --workdir ${_work}/conformance-cpp)
  prsgd_scaled_timeout(_timeout 600)
  set_tests_properties(worker_conformance_cpp PROPERTIES LABELS "integration;process" TIMEOUT ${_timeout}
                       ENVIRONMENT PRSGD_TEST_TIME_SCALE=${PRSGD_TEST_TIME_SCALE})
  if(NOT PRSGD_SANITIZERS)
    add_test(NAME worker_conformance_python COMMAND /usr/bin/python3 ${_conformance} --worker python
                                                    --prsgd $<TARGET_FILE:prsgd> --python ${_work}/venv/bin/python
                                                    --workdir ${_work}/conformance-python)
    set_tests_properties(worker_conformance_python PROPERTIES LABELS "integration;process" TIMEOUT ${_timeout}
                         ENVIRONMENT PRSGD_TEST_TIME_SCALE=${PRSGD_TEST_TIME_SCALE}
                         FIXTURES_REQUIRED prsgd_python_venv)
  endif()
endif()
