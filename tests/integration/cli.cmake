# SPDX-License-Identifier: Apache-2.0
# The `prsgd` command as a process, and the local-cluster launcher with real child processes.
if(TARGET prsgd)
  prsgd_add_process_test(cli_launcher_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli/launcher_test.cpp
                         DEPS prsgd::cli_support TIMEOUT 60)

  prsgd_add_process_test(cli_command_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli/command_test.cpp
                         DEPS prsgd::cli_support TIMEOUT 120)
  target_compile_definitions(cli_command_test PRIVATE
    PRSGD_TEST_PLUGIN_WRONG_ABI="$<TARGET_FILE:prsgd_test_plugin_wrong_abi>"
    PRSGD_TEST_PLUGIN_REGISTERS_MODEL="$<TARGET_FILE:prsgd_test_plugin_registers_model>")
  add_dependencies(cli_command_test prsgd_test_plugin_wrong_abi prsgd_test_plugin_registers_model)
  if(TARGET prsgd::transport_zmq)
    target_compile_definitions(cli_command_test PRIVATE PRSGD_TEST_HAVE_KEYGEN=1)
  endif()
endif()

# The job spec: a worker given only the averager's endpoint, one that disagrees with the job, one without
# the plugin of the job's model.
if(TARGET prsgd)
  prsgd_add_process_test(cli_job_spec_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli/job_spec_test.cpp TIMEOUT 600)
  target_compile_definitions(cli_job_spec_test PRIVATE
    PRSGD_TEST_PLUGIN_REGISTERS_MODEL="$<TARGET_FILE:prsgd_test_plugin_registers_model>")
  add_dependencies(cli_job_spec_test prsgd_test_plugin_registers_model)
endif()

# The head service: `prsgd head`, `--head` on the averager and workers (binary level), and its pieces in one
# process (head_role.cpp compiled in, real ZeroMQ on 127.0.0.1).
if(TARGET prsgd AND TARGET prsgd::transport_zmq AND TARGET prsgd::wire)
  prsgd_add_process_test(cli_head_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli/head_test.cpp
                         DEPS prsgd::cli_support TIMEOUT 120)

  prsgd_add_test(cli_head_role_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli/head_role_test.cpp ${PROJECT_SOURCE_DIR}/cli/src/head_role.cpp
                 DEPS prsgd::cli_support prsgd::wire prsgd::transport_zmq prsgd_test_support LABELS integration
                 TIMEOUT 60)
  target_include_directories(cli_head_role_test PRIVATE ${PROJECT_SOURCE_DIR}/cli/src)
endif()

# plot (with gnuplot), models, datasets, the completion scripts and --help against docs/cli.md.
if(TARGET prsgd)
  prsgd_add_process_test(cli_info_commands_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli/info_commands_test.cpp
                         DEPS prsgd::cli_support TIMEOUT 120)
  target_compile_definitions(cli_info_commands_test PRIVATE PRSGD_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    PRSGD_TEST_PLUGIN_REGISTERS_MODEL="$<TARGET_FILE:prsgd_test_plugin_registers_model>")
  add_dependencies(cli_info_commands_test prsgd_test_plugin_registers_model)
  if(TARGET prsgd_docs)
    target_compile_definitions(cli_info_commands_test PRIVATE
      PRSGD_CLI_INSTALL_SCRIPT="${PROJECT_BINARY_DIR}/cli/cmake_install.cmake")
    add_dependencies(cli_info_commands_test prsgd_docs)
    if(PRSGD_HELP2MAN)
      target_compile_definitions(cli_info_commands_test PRIVATE PRSGD_MAN_DIR="${PROJECT_BINARY_DIR}/cli/man")
    endif()
  endif()
endif()

# `prsgd status`, `prsgd ctl` and the dashboard (--http-bind) against a live job; the dashboard in headless
# Chromium when Debian's `chromium` is installed (ops/install-deps.sh installs it).
if(TARGET prsgd AND TARGET prsgd::transport_zmq)
  prsgd_add_process_test(cli_operations_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli/operations_test.cpp
                         DEPS prsgd::cli_support TIMEOUT 600)
  find_program(PRSGD_CHROMIUM NAMES chromium chromium-browser)
  if(PRSGD_CHROMIUM)
    target_compile_definitions(cli_operations_test PRIVATE PRSGD_TEST_CHROMIUM="${PRSGD_CHROMIUM}")
  endif()
endif()
