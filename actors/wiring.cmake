# SPDX-License-Identifier: Apache-2.0
# The actor wrappers that put averager_core / worker_core on the runtime and the transport.
target_sources(prsgd_actors PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/src/codec.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/averager_actor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/worker_actor.cpp)
target_link_libraries(prsgd_actors PUBLIC prsgd::runtime prsgd::transport PRIVATE msgpackc-cxx)
