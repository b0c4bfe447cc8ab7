# SPDX-License-Identifier: Apache-2.0
# The shipped examples, run as a user runs them, so they cannot rot. Label: integration.

# examples/plugin: the stock `prsgd` trains the plugin's fmnist-lenet (and refuses it without --plugin).
if(TARGET prsgd AND TARGET prsgd_example_plugin)
  prsgd_add_process_test(example_plugin_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/examples/plugin_test.cpp
                         DEPS prsgd::algorithms TIMEOUT 120)
  target_compile_definitions(example_plugin_test PRIVATE PRSGD_EXAMPLE_PLUGIN="$<TARGET_FILE:prsgd_example_plugin>")
  add_dependencies(example_plugin_test prsgd_example_plugin)
endif()

# examples/own-data: your data in (npy, csv, wav-folder) with models given as spec strings.
if(TARGET prsgd)
  prsgd_add_process_test(example_own_data_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/examples/own_data_test.cpp
                         TIMEOUT 180)
  target_compile_definitions(example_own_data_test PRIVATE PRSGD_OWN_DATA_DIR="${PROJECT_SOURCE_DIR}/examples/own-data")
endif()

# examples/embed: the runtime embedded in a program; it must exit 0 and print every expected answer.
if(TARGET prsgd_embed_example)
  add_test(NAME example_embed_output
           COMMAND ${CMAKE_COMMAND} -DEXAMPLE=$<TARGET_FILE:prsgd_embed_example>
                   -P ${CMAKE_CURRENT_LIST_DIR}/examples/embed_output.cmake)
  prsgd_scaled_timeout(timeout 90)
  set_tests_properties(example_embed_output PROPERTIES LABELS integration TIMEOUT ${timeout})
endif()

# examples/embed/embed_training.cpp: averager + workers embedded in one program train above 70%.
if(TARGET prsgd_embed_training)
  add_test(NAME example_embed_training COMMAND prsgd_embed_training 40)
  prsgd_scaled_timeout(timeout 300)
  set_tests_properties(example_embed_training PROPERTIES LABELS integration TIMEOUT ${timeout})
endif()
