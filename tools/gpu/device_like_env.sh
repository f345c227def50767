#!/usr/bin/env bash
# The CPU rehearsal of the GPU device: a virtualenv at $DEVICE_VENV (default /tmp/device-like)
# from this machine's python3.11 holding ONLY packages the device has (those the checks need),
# and tools/gpu/wheels.txt's cp311 wheels in $DEVICE_WHL (default /tmp/device-like-whl), not
# installed: tools/gpu/session.py's `stage` installs them as it does on the device. An
# ImportError after that means wheels.txt misses a package. Idempotent.
#
#   bash tools/gpu/device_like_env.sh
#   bash tools/gpu/prepare.sh                  # .gpu/: the GGUF's two parts (and the cp312 wheels)
#   /tmp/device-like/bin/python tools/gpu/session.py --rehearsal stage --wheels /tmp/device-like-whl
#   /tmp/device-like/bin/python tools/gpu/session.py --rehearsal run bench validate --unit-s 300 --budget 900
#
# The device (Python 3.12.3, /opt/torch/.venv): torch 2.11.0+cu130, transformers 5.17.0,
# accelerate 1.15.0, numpy 2.5.2, huggingface_hub 1.33.0, safetensors 0.8.0, tokenizers 0.23.2,
# sentencepiece 0.2.2; every other package below is in the device image's package list (read
# 2026-11-17) without a known version, taken here at constraints/cpu.txt's. Differences here:
#   - Python 3.11 (this machine's CPU torch wheel is cp311) instead of 3.12.3;
#   - torch: the device's 2.11.0 CPU build from PyTorch's CPU index when it can be reached (not
#     from this machine), else the local 2.13.0+cpu (PyPI's Linux torch is the multi-GB CUDA build);
#   - numpy 2.4.6: numpy 2.5 has no cp311 wheel.
# Every package goes in with --no-deps, so nothing the device lacks slips in as a dependency;
# device packages that no rehearsal step imports (typer, networkx, msgpack, ...) are left out,
# which can only make this env stricter than the device.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${DEVICE_VENV:-/tmp/device-like}"
WHL="${DEVICE_WHL:-/tmp/device-like-whl}"
PY311="${PY311:-python3.11}"

DEVICE_PKGS=(
  # known device versions
  transformers==5.17.0 accelerate==1.15.0 huggingface_hub==1.33.0 safetensors==0.8.0
  tokenizers==0.23.2 sentencepiece==0.2.2
  numpy==2.4.6            # device: 2.5.2 (no cp311 wheel)
  # on the device, version unknown: constraints/cpu.txt's
  peft==0.21.2 pyarrow==26.0.1 pandas==3.1.1 python-dateutil==4.0.0
  pyyaml==6.0.3 requests==2.34.2 certifi==2026.10.18 idna==3.20 urllib3==2.8.0
  charset-normalizer==3.5.2 psutil==7.2.2 regex==2026.11.15 tqdm==4.70.1 tabulate==0.9.0
  rich==15.0.0 pygments==2.21.0
  fsspec==2026.9.0 filelock==4.2.11 jinja2==3.1.6 sympy==1.14.0 mpmath==1.3.0
  typing-extensions==4.16.0 packaging==26.3 xxhash==4.1.0
  httpx==0.28.1 httpcore==1.0.9 h11==0.16.0 anyio==4.16.0
  aiohttp==3.14.5 aiosignal==1.4.0 aiohappyeyeballs==2.7.1 frozenlist==1.8.0 multidict==7.2.1
  yarl==1.25.1 propcache==0.5.4 attrs==26.1.0
  click==8.5.1
  scipy==1.17.1 scikit-learn==1.9.1 joblib==1.6.0 threadpoolctl==3.8.0
  pytest==9.2.0 pytest-timeout==2.4.0 hypothesis==6.170.15 pillow==13.0.0
  cloudpickle==3.1.2 setuptools==84.2.1 wheel==0.48.0   # the last two: pip install -e .
  markupsafe==3.0.4        # jinja2
  iniconfig==2.3.1 pluggy==1.7.0   # pytest
  sortedcontainers==2.4.0  # hypothesis
  narwhals==2.29.0         # scikit-learn >= 1.9 (transformers imports sklearn when present)
  matplotlib==3.11.2 contourpy==1.3.3 cycler==0.12.1 fonttools==4.68.0 kiwisolver==1.5.1 pyparsing==3.3.3  # validate's index.html
)

pip_() { "$VENV/bin/python" -m pip --disable-pip-version-check "$@"; }

if [[ ! -x "$VENV/bin/python" ]]; then
  "$PY311" -m venv "$VENV"
fi

# 1. the device's packages (a stamp of the list skips this on a rerun)
stamp="$VENV/.device-pkgs"
want="$(printf '%s\n' "${DEVICE_PKGS[@]}")"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  pip_ install --quiet --no-deps --only-binary=:all: "${DEVICE_PKGS[@]}" 2>&1 | { grep -v "is ignored: it is neither" || true; }
  printf '%s' "$want" >"$stamp"
fi

# 2. torch, CPU build: the device's version from PyTorch's CPU index if reachable, else the
#    nearest CPU build pip can get here (the local 2.13.0+cpu).
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  pip_ install --quiet --no-deps --timeout 20 --retries 0 torch==2.11.0 \
      --index-url https://download.pytorch.org/whl/cpu 2>/dev/null \
    || pip_ install --quiet --no-deps --only-binary=:all: "${TORCH_FALLBACK:-torch==2.13.0+cpu}"
fi

# 3. the wheels the device lacks, cp311, for session.py's `stage` to install
PYVER=3.11 DEST="$WHL" bash "$HERE/fetch_wheels.sh"

"$VENV/bin/python" -c "import sys, torch, transformers; print('device-like env:', sys.executable, 'torch', torch.__version__, 'transformers', transformers.__version__)"
echo "device_like_env: wheels for session.py stage --wheels $WHL"
