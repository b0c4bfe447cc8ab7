# SPDX-License-Identifier: Apache-2.0
# Runs examples/embed and checks it exits 0 and prints every step's expected answer.
# Usage: cmake -DEXAMPLE=/path/to/prsgd_embed_example -P embed_output.cmake
execute_process(COMMAND ${EXAMPLE} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
message("${out}${err}")
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "prsgd_embed_example exited with '${rc}'")
endif()
set(expected_lines
  "ok   ask/get: 7 apples"
  "ok   unknown item: not_found: the corner shop has no pears"
  "ok   ask/then: front desk: we now have 10 apples"
  "ok   timer: woke after 3\\+ heartbeat ticks"
  "ok   get\\(50ms\\) on a slow reply: timeout"
  "ok   run_compute: 9592 primes below 100000"
  "ok   ask a stopped actor: actor_dead"
  "ok   front desk after the shop closed: actor_dead"
  "ok   shutdown: drained, 0 actors left"
  "embed example: all steps gave the expected answer")
foreach(line IN LISTS expected_lines)
  if(NOT out MATCHES "(^|\n)${line}\n")
    message(FATAL_ERROR "missing output line: ${line}")
  endif()
endforeach()
if(out MATCHES "FAIL")
  message(FATAL_ERROR "a step failed")
endif()
