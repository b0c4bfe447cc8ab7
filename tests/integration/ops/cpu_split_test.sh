#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/vs_gloo/cpu_split passes the command's lines through with their times, prints a row per step in which
# a busy loop of the command shows as at least half a core in use, and exits with the command's status; no
# command is a usage error.
#   cpu_split_test.sh SOURCE_DIR
set -uo pipefail
tool="${1:?source dir}/bench/vs_gloo/cpu_split"
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
out=$("$tool" --step 0.25 -- bash -c 'echo hello; end=$((SECONDS + 2)); while ((SECONDS < end)); do :; done; exit 3')
status=$?
echo "$out"
((status == 3)) || fail "exit status $status, expected the command's 3"
grep -Eq '^ +[0-9]+\.[0-9]{2}  hello$' <<<"$out" || fail "the command's line is not passed through with its time"
grep -Eq '^ from s +busy +user +system +irq$' <<<"$out" || fail "no table header"
# The loop keeps one core busy for at least a second: other load only adds to what the machine's cores show.
busy_rows=$(awk '/^ from s/ {t = 1; next} t && $2 >= 0.5' <<<"$out" | wc -l)
((busy_rows >= 2)) || fail "$busy_rows rows show half a core in use or more, expected at least 2"
"$tool" >/dev/null 2>&1
status=$?
((status == 2)) || fail "no command gave status $status, expected 2"
echo "PASSED"
