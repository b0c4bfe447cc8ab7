#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails (exit 1) if a tracked C++ file is not formatted as .clang-format says, listing each such file;
# changes nothing. ops/format.sh applies the formatting.
#   ops/ci/check_format.sh [FILE...]
exec "$(dirname "$0")/../format.sh" --check "$@"
