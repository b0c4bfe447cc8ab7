#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Formats the tracked C++ files (*.cpp, *.hpp, *.h) in place as .clang-format says, or with --check only
# lists the files that would change (with the number of lines clang-format would rewrite) and exits 1 if
# there is any (ops/ci/check_format.sh runs that).
#   ops/format.sh [--check]             every tracked C++ file
#   ops/format.sh [--check] FILE...     just these
# CLANG_FORMAT picks the binary (default: clang-format; the configuration is written for version 14).
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [[ "${1:-}" == "--check" ]]; then
  check=1
  shift
fi
clang_format="${CLANG_FORMAT:-clang-format}"
if ! command -v "$clang_format" >/dev/null; then
  echo "format: '$clang_format' not found (Debian: apt-get install clang-format, or ops/install-deps.sh)" >&2
  exit 2
fi
if (($# > 0)); then
  files=("$@")
else
  mapfile -t files < <(git ls-files -- '*.cpp' '*.hpp' '*.h')
fi
for f in "${files[@]}"; do
  if [[ ! -f "$f" ]]; then
    echo "format: no such file: $f" >&2
    exit 2
  fi
done
if ((check == 0)); then
  "$clang_format" --style=file -i -- "${files[@]}"
  echo "format: ${#files[@]} file(s) formatted"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  # Counts the rewritten lines from a diff (--dry-run reports one violation per changed region).
  n=$("$clang_format" --style=file -- "$f" | diff -- "$f" - | grep -c '^>' || true)
  if ((n > 0)); then
    echo "$f: $n line(s) to reformat"
    bad=$((bad + 1))
  fi
done
if ((bad > 0)); then
  echo "format: $bad of ${#files[@]} file(s) not formatted; run ops/format.sh (or ops/format.sh FILE...)"
  exit 1
fi
echo "format: ${#files[@]} file(s) formatted as .clang-format says"
