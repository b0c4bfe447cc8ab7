# SPDX-License-Identifier: Apache-2.0
# PRSGD_VERSION_DESCRIPTION: what `prsgd --version` prints after "prsgd ". In a git checkout it is the
# project version and `git describe --always --dirty` at configure time, e.g. "0.1.0 (git 86dbd5f-dirty)"
# (re-run cmake to refresh it); from a source tarball or without git, the project version alone.
set(PRSGD_VERSION_DESCRIPTION "${PROJECT_VERSION}")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS "${PROJECT_SOURCE_DIR}/.git")
  execute_process(COMMAND "${GIT_EXECUTABLE}" describe --always --dirty
                  WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
                  OUTPUT_VARIABLE prsgd_git_description RESULT_VARIABLE prsgd_git_result
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(prsgd_git_result EQUAL 0 AND NOT prsgd_git_description STREQUAL "")
    set(PRSGD_VERSION_DESCRIPTION "${PROJECT_VERSION} (git ${prsgd_git_description})")
  endif()
endif()
message(STATUS "prsgd version: ${PRSGD_VERSION_DESCRIPTION}")
