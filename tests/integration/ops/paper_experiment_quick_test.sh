#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ops/paper-experiment --quick into a temporary directory: the table exists, has one row per configuration
# of every part, and every plot it links is a PNG. Exit 77 (skipped) when gnuplot is missing.
#   paper_experiment_quick_test.sh PRSGD_BINARY SOURCE_DIR
set -uo pipefail
bin="${1:?prsgd binary}"
src="${2:?source dir}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/prsgd-paper-quick.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; [[ -f "$tmp/out/table.md" ]] && cat "$tmp/out/table.md" >&2; exit 1; }

st=0
"$src/ops/paper-experiment" --quick --no-install --bin "$bin" --out "$tmp/out" >"$tmp/run.txt" 2>&1 || st=$?
if ((st == 77)); then
  echo "SKIP: gnuplot is not installed (ops/install-deps.sh --bench)"
  exit 77
fi
((st == 0)) || { cat "$tmp/run.txt" >&2; fail "ops/paper-experiment --quick exited with status $st"; }
table="$tmp/out/table.md"
[[ -s "$table" ]] || fail "no table.md"

# rows PART: the table rows of section "## PART:".
rows() { awk -v p="## $1:" 'index($0, p) == 1 {on = 1; next} /^## / {on = 0} on && /^\| (mb|I=[0-9]+)/' "$table"; }
expect_rows() { # expect_rows PART CONFIG...
  local part="$1" c got
  shift
  got="$(rows "$part" | awk -F'|' '{gsub(/ /, "", $2); print $2}' | tr '\n' ' ')"
  local want=""
  for c in "$@"; do [[ "$c" == mb ]] && want+="mb " || want+="I=$c "; done
  [[ "$got" == "$want" ]] || fail "section $part has rows '$got', expected '$want'"
  rows "$part" | grep -q 'failed' && fail "a $part run failed"
  # Every row has a final accuracy (a percentage), not a dash.
  rows "$part" | awk -F'|' '$6 !~ /%/ {exit 1}' || fail "a $part row has no final accuracy"
}
expect_rows mlp mb 1 4 8 16 32
expect_rows resnet mb 16
if [[ $(id -u) -eq 0 ]]; then
  expect_rows netns mb 16
else
  grep -q '^Not run: network namespaces need root' "$table" || fail "netns section does not say why it did not run"
fi

# Every linked plot exists and is a PNG; at least the two curves of the mlp part are there.
grep -q '(mlp-acc-vs-epoch.png)' "$table" || fail "no accuracy-against-epochs plot"
grep -q '(mlp-acc-vs-rounds.png)' "$table" || fail "no accuracy-against-rounds plot"
n=0
for png in $(grep -o '([a-z]*-acc-vs-[a-z]*\.png)' "$table" | tr -d '()'); do
  [[ "$(head -c 4 "$tmp/out/$png" | tail -c 3)" == PNG ]] || fail "$png is missing or not a PNG"
  n=$((n + 1))
done
# --report-only rewrites the same table from raw/ without running anything.
"$src/ops/paper-experiment" --report-only --no-install --bin "$bin" --out "$tmp/out" >"$tmp/report.txt" 2>&1 ||
  { cat "$tmp/report.txt" >&2; fail "--report-only failed"; }
grep -q 'rewritten from the runs' "$table" || fail "--report-only did not rewrite table.md"
expect_rows mlp mb 1 4 8 16 32
[[ -s "$tmp/out/mlp-acc-vs-rounds.png" ]] || fail "--report-only did not redraw the plots"
echo "ok: $(rows mlp | wc -l) mlp rows, $(rows resnet | wc -l) resnet rows, $(rows netns | wc -l) netns rows, $n plots"
