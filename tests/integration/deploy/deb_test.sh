#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deb_test.sh BUILD_DIR: the Debian package CPack makes from this build
#   - has the fields and files it should (prsgd under /usr/bin, the libraries, the CMake package);
#   - its Depends name the package of every shared library its binaries load (other than its own);
#   - unpacked into a scratch root (dpkg -x): `prsgd --version` runs; the sysusers.d and tmpfiles.d
#     configuration make the prsgd user and its directories in that root; the averager unit and two
#     instances of the worker@ unit, run from their ExecStart= with the example configuration, train a
#     3-round job that leaves a checkpoint in /var/lib/prsgd/checkpoints (of the root).
# Installing it with apt-get in a Debian container is the heavier ops/container/deb-install-test.
set -euo pipefail
build=$(cd "$1" && pwd)
source "$(dirname "$0")/common.sh"
need_tool dpkg-deb
need_tool dpkg-shlibdeps
need_tool cpack
need_fmnist
# The .deb that deploy_release made from this build (ctest runs that test first), unless it is missing or
# older than the build's prsgd; then CPack makes one here.
deb=$(ls "$build"/deploy-test-dist/prsgd_*.deb 2>/dev/null | head -n 1 || true)
if [[ -z "$deb" || "$deb" -ot "$build/cli/prsgd" ]]; then
  (cd "$scratch" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$scratch/pkg" >"$scratch/cpack.log" 2>&1) ||
    { tail -n 30 "$scratch/cpack.log"; echo "FAILED: cpack"; exit 1; }
  deb=$(ls "$scratch"/pkg/prsgd_*.deb)
fi
echo "package: $(basename "$deb")"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
[[ "$(dpkg-deb -f "$deb" Package)" == prsgd ]] || { echo "FAILED: package name"; exit 1; }

root="$scratch/root"
dpkg-deb -x "$deb" "$root"
for f in usr/bin/prsgd usr/lib/cmake/prsgd/prsgdConfig.cmake usr/lib/python3/dist-packages/prsgd/worker.py \
         usr/lib/python3/dist-packages/prsgd_twins.py; do
  [[ -e "$root/$f" ]] || { echo "FAILED: $f is not in the package"; exit 1; }
done
ls "$root"/usr/lib/libprsgd_common.so.* >/dev/null || { echo "FAILED: no libprsgd_common in the package"; exit 1; }

# Every NEEDED library that the package does not ship must come from a package that Depends names, or
# that provides a name Depends gives (libspdlog1.10 provides libspdlog1.10-fmt9; alternatives such as
# libblas.so.3 count when any package providing the file is named).
missing=0
dep_names=" $(sed 's/([^)]*)//g; s/[,|]/ /g' <<<"$depends" | tr -s ' ') "
needed=$(find "$root" -type f \( -name '*.so*' -o -path '*/bin/*' \) -exec objdump -p {} \; |
         awk '/NEEDED/ {print $2}' | sort -u)
for lib in $needed; do
  [[ -n "$(find "$root" -name "$lib" -print -quit)" ]] && continue
  owners=$(dpkg -S "*/$lib" 2>/dev/null | cut -d: -f1 | tr ',' '\n' | sed 's/ //g' | sort -u)
  [[ -n "$owners" ]] || { echo "FAILED: no installed package has $lib"; missing=1; continue; }
  found=0
  for o in $owners; do
    for name in "$o" $(dpkg-query -W -f='${Provides}' "$o" 2>/dev/null | sed 's/([^)]*)//g; s/,/ /g'); do
      [[ "$dep_names" == *" $name "* ]] && found=1
    done
  done
  ((found)) || { echo "FAILED: $lib comes from $(tr '\n' ' ' <<<"$owners")which Depends does not name"; missing=1; }
done
((missing == 0)) || exit 1
echo "Depends cover every library the binaries load"

"$root/usr/bin/prsgd" --version
for f in usr/lib/systemd/system/prsgd-averager.service usr/lib/systemd/system/prsgd-worker@.service \
         usr/lib/systemd/system/prsgd-head.service usr/lib/sysusers.d/prsgd.conf usr/lib/tmpfiles.d/prsgd.conf \
         usr/share/doc/prsgd/copyright usr/share/doc/prsgd/deployment.md usr/share/doc/prsgd/examples/averager.yaml; do
  [[ -e "$root/$f" ]] || { echo "FAILED: $f is not in the package"; exit 1; }
done
dpkg-deb -I "$deb" postinst | grep -q "systemd-sysusers prsgd.conf" || { echo "FAILED: no postinst making the user"; exit 1; }
# Every Documentation= of a unit names a file the package installs.
for doc in $(sed -n 's/^Documentation=//p' "$root"/usr/lib/systemd/system/*.service | tr ' ' '\n' | sort -u); do
  [[ "$doc" == file://* && -f "$root${doc#file://}" ]] || { echo "FAILED: Documentation=$doc is not installed"; exit 1; }
done

# The postinst's work, into the unpacked root: sysusers.d makes the user, tmpfiles.d the directories.
if command -v systemd-sysusers >/dev/null && command -v systemd-tmpfiles >/dev/null; then
  mkdir -p "$root/etc"
  systemd-sysusers --root="$root" "$root/usr/lib/sysusers.d/prsgd.conf"
  uid=$(awk -F: '$1 == "prsgd" {print $3}' "$root/etc/passwd")
  [[ -n "$uid" ]] || { echo "FAILED: sysusers.d made no prsgd user"; exit 1; }
  systemd-tmpfiles --root="$root" --create "$root/usr/lib/tmpfiles.d/prsgd.conf"
  for d in etc/prsgd var/lib/prsgd var/lib/prsgd/checkpoints; do
    [[ -d "$root/$d" ]] || { echo "FAILED: tmpfiles.d made no /$d"; exit 1; }
  done
  [[ $(stat -c %u "$root/var/lib/prsgd") == "$uid" ]] || { echo "FAILED: /var/lib/prsgd is not the prsgd user's"; exit 1; }
  echo "sysusers.d and tmpfiles.d: user prsgd (uid $uid), /etc/prsgd, /var/lib/prsgd/checkpoints"
else
  mkdir -p "$root/etc/prsgd" "$root/var/lib/prsgd/checkpoints"
  echo "no systemd-sysusers/systemd-tmpfiles here: directories made by hand"
fi

# The units' ExecStart= with the example configuration, run by run_unit.py (no systemd; the units' /usr,
# /etc and /var/lib paths are looked up in the unpacked root). prsgd.env changes only what a test on a
# shared machine must: a port the system chooses, 3 rounds, the metrics file inside the root.
cp "$root"/usr/share/doc/prsgd/examples/*.yaml "$root/etc/prsgd/"
endpoint="$scratch/averager.endpoint"
echo "PRSGD_AVERAGER_ARGS=\"--listen tcp://127.0.0.1:* --endpoint-file $endpoint --rounds 3 --progress off" \
     "--metrics-jsonl $root/var/lib/prsgd/metrics.jsonl\"" >"$root/etc/prsgd/prsgd.env"
unit="$(cd "$(dirname "$0")" && pwd)/run_unit.py"
python3 "$unit" "$root" prsgd-averager.service >"$scratch/averager.log" 2>&1 &
avg=$!
deadline=$((SECONDS + 120 * ${PRSGD_TEST_TIME_SCALE:-1}))
until [[ -s "$endpoint" ]]; do
  kill -0 "$avg" 2>/dev/null && ((SECONDS < deadline)) ||
    { cat "$scratch/averager.log"; echo "FAILED: the averager unit did not listen"; exit 1; }
  sleep 0.2
done
echo "PRSGD_WORKER_ARGS=--averager $(cat "$endpoint")" >>"$root/etc/prsgd/prsgd.env"
python3 "$unit" "$root" prsgd-worker@.service 0 >"$scratch/worker-0.log" 2>&1 &
w0=$!
python3 "$unit" "$root" prsgd-worker@.service 1 >"$scratch/worker-1.log" 2>&1 &
w1=$!
st=0
wait "$avg" || st=$?
[[ "$st" == 0 ]] || { cat "$scratch/averager.log"; echo "FAILED: the averager unit exited $st"; exit 1; }
for i in 0 1; do
  pid=$w0
  ((i == 0)) || pid=$w1
  st=0
  wait "$pid" || st=$?
  [[ "$st" == 0 ]] || { cat "$scratch/worker-$i.log"; echo "FAILED: worker@$i exited $st"; exit 1; }
done
rounds=$(grep -c '"round":' "$root/var/lib/prsgd/metrics.jsonl")
[[ "$rounds" -eq 3 ]] || { echo "FAILED: $rounds rounds, expected 3"; exit 1; }
[[ -n "$(ls -A "$root/var/lib/prsgd/checkpoints")" ]] ||
  { echo "FAILED: no checkpoint in /var/lib/prsgd/checkpoints"; exit 1; }
grep -q -- "averager --config $root/etc/prsgd/averager.yaml --checkpoint-dir $root/var/lib/prsgd/checkpoints" \
  "$scratch/averager.log" || { head -n 3 "$scratch/averager.log"; echo "FAILED: the averager's ExecStart"; exit 1; }
echo "the units' ExecStart with the example configuration: 3 rounds, a checkpoint in /var/lib/prsgd/checkpoints"
