#!/usr/bin/env bash
# Put exactly the wheels the GPU device lacks into $DEST (default: <repo>/.gpu/wheels), for CPython
# $PYVER (default 3.12, the device's Python) on manylinux x86_64 (.gpu/wheels is the folder a
# device call carries):
#   - every name==version of tools/gpu/wheels.txt, downloaded from the index (a pure-Python
#     package published only as an sdist is built here into a py3-none-any wheel);
#   - trajval_gpu_ray_import_shim, built here from tools/gpu/ray_import_shim (a stand-in `ray` package: Data-
#     Juicer 1.6.1 imports Ray at import time, and Ray's ~80 MB wheel does not fit the transfer).
# Idempotent: wheels already there are kept; wheels of other packages, other versions or another
# CPython are removed, so `pip install .whl/*.whl` installs one version of each. Prints the total
# size; exits non-zero naming the package when a wheel cannot be had.
#
#   bash tools/gpu/fetch_wheels.sh                                        # cp312 -> .gpu/wheels/ (the device)
#   PYVER=3.11 DEST=/tmp/device-like-whl bash tools/gpu/fetch_wheels.sh   # the CPU rehearsal
#
# On the device, tools/gpu/session.py's `stage` installs them (--no-index --no-deps) and the repo.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PYVER="${PYVER:-3.12}"
DEST="${DEST:-$ROOT/.gpu/wheels}"
LIST="${WHEELS_TXT:-$HERE/wheels.txt}"
PIP_PYTHON="${PIP_PYTHON:-python3}"   # any Python >= 3.8 with pip; --python-version picks the target
CPTAG="cp${PYVER/./}"
mkdir -p "$DEST"
DEST="$(cd "$DEST" && pwd)"
LOG="$DEST/.fetch.log"

mapfile -t REQS < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$LIST" | grep -v '^$' || true)
[[ ${#REQS[@]} -gt 0 ]] || { echo "fetch_wheels: $LIST lists no package" >&2; exit 1; }
for req in "${REQS[@]}"; do
  [[ "$req" =~ ^[A-Za-z0-9._-]+==[A-Za-z0-9.+!_-]+$ ]] \
    || { echo "fetch_wheels: '$req' in $LIST is not pinned as name==version" >&2; exit 1; }
done

# helper: have <req> (exit 0 if a wheel for it, usable on $CPTAG, is in $DEST) | build-shim | prune <reqs...>
helper() { "$PIP_PYTHON" "$HERE/_wheels.py" "$DEST" "$CPTAG" "$@"; }

download() {
  "$PIP_PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    --dest "$DEST" "$1"
}

# A package with no wheel on the index, built here; accepted only when pure Python.
build_pure_wheel() {
  local tmp
  tmp="$(mktemp -d)"
  if "$PIP_PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-binary=:all: \
       --wheel-dir "$tmp" "$1" && compgen -G "$tmp/*-none-any.whl" >/dev/null; then
    mv "$tmp"/*-none-any.whl "$DEST/"
    rm -rf "$tmp"
    echo "fetch_wheels: $1 has no wheel on the index: built a pure-Python one" >&2
    return 0
  fi
  rm -rf "$tmp"
  return 1
}

failed=()
: >"$LOG"
for req in "${REQS[@]}"; do
  helper have "$req" && continue
  if ! download "$req" >>"$LOG" 2>&1 && ! build_pure_wheel "$req" >>"$LOG" 2>&1; then
    echo "fetch_wheels: NO WHEEL for $req ($CPTAG, manylinux x86_64); pip said:" >&2
    grep -E '^(ERROR|error)' "$LOG" | tail -n 3 >&2 || true
    failed+=("$req")
  fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fetch_wheels: FAILED, missing: ${failed[*]} (full log: $LOG)" >&2
  exit 1
fi
rm -f "$LOG"
shim="$(helper build-shim "$HERE/ray_import_shim")"
# one wheel per requirement, nothing else
helper prune "${REQS[@]}" "$shim"
total=$(du -cb "$DEST"/*.whl | tail -n1 | cut -f1)
echo "fetch_wheels: total $(awk -v b="$total" 'BEGIN{printf "%.2f MiB (%d bytes)", b/1048576, b}') in $DEST"
