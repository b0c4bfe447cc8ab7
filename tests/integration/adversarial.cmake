# SPDX-License-Identifier: Apache-2.0
# A hostile peer (pyzmq + msgpack, Debian's python3-zmq and python3-msgpack) against a real averager and two
# real workers on loopback: a zero model claiming 2^50 samples, messages naming members without their tokens,
# a JOIN storm, a worker with another model, CURVE keys (strangers refused, members bound to their key),
# never-ending multipart messages, and forged head and node claims. Each scenario asserts that the job
# completes; those whose attacker adds nothing to x̄ also compare accuracy and log length with the same job
# without the attacker.
if(TARGET prsgd AND EXISTS /usr/bin/python3)
  set(_peer ${CMAKE_CURRENT_LIST_DIR}/adversarial/hostile_peer.py)
  prsgd_scaled_timeout(_timeout 300)
  foreach(scenario zero-model impostor join-storm other-model keys endless-multipart head-spoof)
    add_test(NAME adversarial_${scenario}
             COMMAND /usr/bin/python3 ${_peer} --prsgd $<TARGET_FILE:prsgd>
                     --workdir ${CMAKE_CURRENT_BINARY_DIR}/adversarial/${scenario} ${scenario})
    set_tests_properties(adversarial_${scenario} PROPERTIES LABELS "integration;process" TIMEOUT ${_timeout}
                         ENVIRONMENT "PRSGD_TEST_TIME_SCALE=${PRSGD_TEST_TIME_SCALE};PRSGD_SANITIZERS=${PRSGD_SANITIZERS}")
  endforeach()
endif()
