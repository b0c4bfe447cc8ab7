#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deb_test.sh BUILD_DIR: the Debian package CPack makes from this build
#   - has the fields and files it should (prsgd under /usr/bin, the libraries, the CMake package);
#   - its Depends name the package of every shared library its binaries load (other than its own);
#   - unpacked into a scratch root (dpkg -x), `prsgd --version` and a 3-round `prsgd local` job run.
# Installing it with apt-get in a Debian container is the heavier ops/container/deb-install-test.
set -euo pipefail
build=$(cd "$1" && pwd)
source "$(dirname "$0")/common.sh"
need_tool dpkg-deb
need_tool dpkg-shlibdeps
need_tool cpack
need_fmnist
(cd "$scratch" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$scratch/pkg" >"$scratch/cpack.log" 2>&1) ||
  { tail -n 30 "$scratch/cpack.log"; echo "FAILED: cpack"; exit 1; }
deb=$(ls "$scratch"/pkg/prsgd_*.deb)
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
(cd "$scratch" && "$root/usr/bin/prsgd" local --workers 2 --rounds 3 --progress off --log-dir logs >local.out 2>&1) ||
  { cat "$scratch/local.out"; tail -n 20 "$scratch"/logs/*.log; echo "FAILED: prsgd local from the package"; exit 1; }
rounds=$(grep -c '"round":' "$scratch/logs/metrics.jsonl")
[[ "$rounds" -eq 3 ]] || { echo "FAILED: $rounds rounds, expected 3"; exit 1; }
echo "prsgd local from the unpacked package: 3 rounds"
