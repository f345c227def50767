#!/usr/bin/env python
"""The GPU check that ships: what the path users run does on one GPU, against baselines measured
in the same run, in at most about 5 minutes.

Parts, each in its own process (its peak memory its own; a part that fails is recorded with its
error and the others go on), one after the other:

- ``probe/<generation>``: the demo's probe (tiny-arith, one epoch over ``--probe-rows`` rows of
  the demo pool) with TRL's ``transformers`` generation and with ``vllm`` (skipped, with the
  reason, where vLLM does not import or the device is a CPU): steps/s, train reward, peak memory.
- ``smollm2/<precision>`` (only with ``--parts ... smollm2``: it adds about 3 minutes on an
  H200): SmolLM2-135M-Instruct's probe on the real-model harness's pool
  (``recipes/data/real_smollm2``), ``--smollm2-steps`` steps of 8 prompts x 8 rollouts of up to
  ``--smollm2-tokens`` tokens at learning rate 1e-5 (by default the setting whose bf16 weights
  went NaN at step 3 on an H200: 6 steps, 256 tokens), under each of ``--precisions`` (default
  ``auto``, bf16-mixed on a GPU, and ``bf16``): each step's loss, gradient norm and wall time,
  and the guard's error where a step went non-finite. Skipped, with the reason, where the
  model's GGUF is absent.
- ``endpoint`` and ``endpoint/cpu_reference``: the demo's endpoint pass (tiny-arith, n = 16) through
  the endpoint mapper on the device and the same pass on CPU; per-family pass rates side by side
  with their difference in standard errors (the two passes sample differently: agreement means
  within noise), and in the device's process a bare ``model.generate`` loop on the same prompts
  and chunks (the baseline of the engine's completions/s and tokens/s).
- ``shape/<name>``: a random-init Llama of a named shape (``llama-0.3b``: 24 layers, hidden 1024;
  ``qwen-1.5b``: Qwen2.5-1.5B's dimensions; ``tiny`` for CPU checks) with tiny-arith's tokenizer:
  the engine's pass throughput against a bare generate loop (completions/s, tokens/s; EOS is
  ignored, so every completion runs its full length), three probe steps (seconds per step) and
  peak memory.
- ``validate_unit``: one ``trajval validate`` training unit (``grpo_run``: tiny-arith, uniform,
  dynamic sampling, held-out evaluation every 10 steps) on the device.

It prints each figure with its ratio against its baseline and writes everything to ``--out``
(JSON; rewritten as each part ends, so a run cut short by its caller keeps what it measured).
The default parts took 267 s on an NVIDIA H200 (docs/results/gpu/index.md).
``--device cpu --quick`` runs the parts at small sizes on CPU (the slow test suite runs every
part so, so the script cannot rot without a GPU); ``--device cuda`` needs a GPU.

    python tools/bench/bench_gpu.py --out outputs/bench/bench_gpu.json           # on a GPU machine
    python tools/bench/bench_gpu.py --parts smollm2 --precisions fp32 auto --smollm2-tokens 128
    python tools/bench/bench_gpu.py --device cpu --quick --out /tmp/bench_gpu.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from trajval_ops.hardware import peak_memory_gib  # noqa: E402 (imports nothing heavy)
from trajval_ops.probe.config import PRECISIONS  # noqa: E402 (imports nothing heavy)
DEMO_POOL = REPO / "trajval_ops" / "data" / "demo_arith_pool.jsonl"
REAL_POOL = REPO / "recipes" / "data" / "real_smollm2" / "pool.jsonl"  # the real-model harness's pool
VERIFIER_OPTIONS = {"fallback_last_number": True}

#: random-init Llama shapes: layers, hidden, intermediate, heads, kv heads, vocab (tied embeddings)
SHAPES = {
    "tiny": (2, 64, 128, 2, 1, 512),
    "llama-0.3b": (24, 1024, 2816, 16, 16, 32000),
    "qwen-1.5b": (28, 1536, 8960, 12, 2, 151936),
}


# ----------------------------------------------------------------------------- parts (child side)


def _rows(count: int) -> list[dict]:
    from trajval_ops.pools.io import read_rows

    return list(read_rows(DEMO_POOL))[:count]


def part_probe(options: dict) -> dict:
    import torch

    from trajval_ops.probe.config import ProbeConfig
    from trajval_ops.probe.run import run_probe

    device = options["device"]
    rows = _rows(options["probe_rows"])
    config = ProbeConfig(model=options.get("model", "tiny-arith"), epochs=1, prompts_per_batch=8,
                         num_generations=8, micro_batch_size=64, max_completion_length=options.get("tokens", 8),
                         learning_rate=3e-4, verifier_options=VERIFIER_OPTIONS, device=device,
                         generation=options["generation"], seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        manifest = run_probe(rows, [row["id"] for row in rows], config, Path(tmp) / "probe", show_progress=False)
        wall = time.perf_counter() - start
    steps = len(rows) // config.prompts_per_batch
    return {"steps": steps, "wall_s": round(wall, 2), "train_s": manifest["wall_time_s"],
            "steps_per_s": round(steps / manifest["wall_time_s"], 3), "generation": manifest.get("generation_engine"),
            "train_reward": manifest["train_reward_per_epoch"], "device": manifest["device"],
            "peak_memory_gib": peak_memory_gib(device), "cuda": torch.cuda.is_available()}


def part_smollm2(options: dict) -> dict:
    """SmolLM2-135M-Instruct's probe under one precision: every step's loss and gradient norm;
    ``stopped`` holds the guard's error when a step went non-finite (the outcome, not a failure)."""
    from transformers import TrainerCallback

    from trajval_ops.errors import TrainingDiverged
    from trajval_ops.models import SMOLLM2
    from trajval_ops.pools.io import read_rows
    from trajval_ops.probe.config import ProbeConfig
    from trajval_ops.probe.run import run_probe

    device, prompts, n, steps = options["device"], options["prompts"], options["n"], options["steps"]
    rows = list(read_rows(REAL_POOL))[:prompts * steps]
    config = ProbeConfig(model=SMOLLM2, epochs=1, prompts_per_batch=prompts, num_generations=n,
                         micro_batch_size=prompts * n, max_completion_length=options["tokens"], learning_rate=1e-5,
                         verifier="math", verifier_options=VERIFIER_OPTIONS, device=device,
                         generation="transformers", precision=options["precision"], seed=0)
    logged: list[dict] = []

    class StepLog(TrainerCallback):
        begun = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            _sync(device)
            self.begun = time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "grad_norm" in logs:
                _sync(device)  # the step's wall time: its generation, scoring and update
                logged.append({"step": state.global_step, "loss": _finite_or_text(logs.get("loss")),
                               "grad_norm": _finite_or_text(logs["grad_norm"]), "reward": logs.get("reward"),
                               "step_s": round(time.perf_counter() - self.begun, 2)})

    record: dict = {"steps": steps, "prompts_per_step": prompts, "n": n, "tokens": options["tokens"],
                    "learning_rate": config.learning_rate, "stopped": None}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        try:
            manifest = run_probe(rows, [row["extra_info"]["index"] for row in rows], config, Path(tmp) / "probe",
                                 show_progress=False, extra_callbacks=[StepLog()])
            record |= {"precision": manifest["precision"], "train_s": manifest["wall_time_s"]}
        except TrainingDiverged as exc:
            record["stopped"] = str(exc)
        record["wall_s"] = round(time.perf_counter() - start, 2)
    record |= {"per_step": logged, "finite": record["stopped"] is None,
               "peak_memory_gib": peak_memory_gib(device)}
    return record


def _finite_or_text(value):
    """JSON holds no NaN: a non-finite figure is kept as its text."""
    return None if value is None else (float(value) if math.isfinite(float(value)) else str(float(value)))


def smollm2_skip_reason() -> str | None:
    from trajval_ops.models import SMOLLM2, model_dir, smollm2_gguf_path

    if (model_dir(SMOLLM2) / "config.json").is_file():
        return None
    try:
        smollm2_gguf_path()
    except (ImportError, FileNotFoundError) as exc:
        return f"SmolLM2-135M-Instruct is neither built nor buildable here: {exc}"
    return None


def _bare_loop(model_path: Path, prompts: list[str], n: int, max_new_tokens: int, chunk: int, device: str,
               ignore_eos: bool) -> dict:
    """The baseline: transformers' generate in a plain loop, as a user would write it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    from trajval_ops.hardware import auto_dtype

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, auto_dtype(device))).to(device).eval()
    torch.manual_seed(0)
    tokens = 0
    _sync(device)
    start = time.perf_counter()
    with torch.inference_mode():
        for first in range(0, len(prompts), chunk):
            inputs = tokenizer(prompts[first:first + chunk], return_tensors="pt", padding=True,
                               add_special_tokens=False).to(device)
            extra = {"min_new_tokens": max_new_tokens} if ignore_eos else {}
            output = model.generate(**inputs, do_sample=True, temperature=1.0, top_p=1.0, top_k=None,
                                    num_return_sequences=n, max_new_tokens=max_new_tokens,
                                    pad_token_id=tokenizer.pad_token_id, **extra)
            new = output[:, inputs["input_ids"].shape[1]:]
            tokens += int((new != tokenizer.pad_token_id).sum())
            tokenizer.batch_decode(new, skip_special_tokens=True)
    _sync(device)
    seconds = time.perf_counter() - start
    completions = len(prompts) * n
    del model
    return {"seconds": round(seconds, 3), "completions_per_s": round(completions / seconds, 1),
            "tokens_per_s": round(tokens / seconds, 1)}


def _tiny_arith_prompts(rows: list[dict]) -> tuple[Path, list[str]]:
    """tiny-arith's folder and the rows' prompts as the mapper renders them."""
    from transformers import AutoTokenizer

    from trajval_ops.models import resolve_model
    from trajval_ops.rollout.prompts import build_messages, render_prompt

    path = resolve_model("tiny-arith")
    tokenizer = AutoTokenizer.from_pretrained(path)
    return path, [render_prompt(tokenizer, build_messages(row, "auto")) for row in rows]


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def part_endpoint(options: dict) -> dict:
    """The endpoint mapper's pass over the rows (per-family pass rates), then the bare loop."""
    from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper

    device = options["device"]
    rows = _rows(options["rows"])
    if options.get("bare"):
        # the process's first generate pays the device's warm-up (CUDA context, kernels): paid here,
        # once, so neither the mapper nor the bare loop after it carries it (the shapes warm up alike)
        path, prompts = _tiny_arith_prompts(rows[:options["chunk"]])
        _bare_loop(path, prompts, options["n"], 8, options["chunk"], device, ignore_eos=False)
    with tempfile.TemporaryDirectory() as tmp:
        op = TrajvalEndpointRewardMapper(
            model="tiny-arith", output_key="acc", engine="transformers", n=options["n"], max_new_tokens=8,
            prompts_per_generate=options["chunk"], verifier_options=VERIFIER_OPTIONS, cache_dir=tmp,
            seed=options["seed"], torch_threads=options.get("threads"))
        batch = {key: [row.get(key) for row in rows] for key in rows[0]}
        _sync(device)
        start = time.perf_counter()
        out = op.process_batched(batch)
        _sync(device)
        seconds = time.perf_counter() - start
        stats = dict(op.endpoint.stats)  # operator_s: the batches' time without the engine's start
        op.release()
    by_family: dict[str, list[float]] = defaultdict(list)
    for row, rate in zip(rows, out["acc"]):
        by_family[row["extra_info"]["family"]].append(rate)
    completions = len(rows) * options["n"]
    record = {"rows": len(rows), "n": options["n"], "threads": options.get("threads"), "wall_s": round(seconds, 3),
              "operator_s": round(stats["operator_s"], 3), "generate_s": round(stats["generate_s"], 3),
              "completions_per_s": round(completions / stats["operator_s"], 1),
              "family_pass_rates": {f: [round(sum(v) / len(v), 4), len(v)] for f, v in sorted(by_family.items())},
              "peak_memory_gib": peak_memory_gib(device)}
    if options.get("bare"):
        path, prompts = _tiny_arith_prompts(rows)
        record["bare"] = _bare_loop(path, prompts, options["n"], 8, options["chunk"], device, ignore_eos=False)
    return record


def _shape_model(name: str, folder: Path) -> Path:
    """A random-init Llama of the shape, with tiny-arith's tokenizer (ids past its vocabulary
    decode to nothing: a random model's text is meaningless anyway, its speed is the point)."""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from trajval_ops.models import resolve_model

    layers, hidden, intermediate, heads, kv_heads, vocab = SHAPES[name]
    source = resolve_model("tiny-arith")
    for file in source.iterdir():
        if file.name.startswith("tokenizer") or file.name in ("chat_template.jinja", "special_tokens_map.json"):
            shutil.copy(file, folder / file.name)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=4096, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    return folder


def part_shape(options: dict) -> dict:
    import torch

    from trajval_ops.probe.config import ProbeConfig
    from trajval_ops.probe.run import run_probe
    from trajval_ops.rollout.engines import DecodingConfig, TransformersEngine
    from trajval_ops.rollout.prompts import build_messages, render_prompt

    device, name = options["device"], options["shape"]
    tokens, n, chunk = options["tokens"], options["n"], options["chunk"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = _shape_model(name, Path(tmp))
        rows = _rows(options["rows"])
        engine = TransformersEngine(folder, dtype="auto", device=device)
        params = sum(p.numel() for p in engine.model.parameters())
        prompts = [render_prompt(engine.tokenizer, build_messages(row, "auto")) for row in rows]
        # the engine with EOS out of reach (min_new_tokens): every completion runs `tokens` long
        decoding = DecodingConfig(n=n, temperature=1.0, max_new_tokens=tokens, seed=0)
        engine.model.generation_config.min_new_tokens = tokens
        engine.generate(prompts[:chunk], decoding)  # warm-up
        _sync(device)
        start, generated = time.perf_counter(), 0
        for first in range(0, len(prompts), chunk):
            generated += sum(engine.generate_counted(prompts[first:first + chunk], decoding)[1])
        _sync(device)
        engine_s = time.perf_counter() - start
        completions = len(prompts) * n
        record = {"params_m": round(params / 1e6, 1), "rows": len(rows), "n": n, "tokens": tokens,
                  "engine": {"seconds": round(engine_s, 3), "completions_per_s": round(completions / engine_s, 1),
                             "tokens_per_s": round(generated / engine_s, 1)}}
        del engine
        record["bare"] = _bare_loop(folder, prompts, n, tokens, chunk, device, ignore_eos=True)
        if device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        steps = options["probe_steps"]
        probe_rows = _rows(8 * steps)
        config = ProbeConfig(model=str(folder), epochs=1, prompts_per_batch=8, num_generations=8,
                             micro_batch_size=16, max_completion_length=tokens, learning_rate=1e-5,
                             verifier_options=VERIFIER_OPTIONS, device=device, generation="transformers", seed=0)
        manifest = run_probe(probe_rows, [row["id"] for row in probe_rows], config, Path(tmp) / "probe",
                             show_progress=False)
        record["probe"] = {"steps": steps, "prompts_per_step": 8, "n": 8,
                           "step_s": round(manifest["wall_time_s"] / steps, 3),
                           "precision": manifest.get("precision"), "peak_memory_gib": peak_memory_gib(device)}
    return record


def part_validate_unit(options: dict) -> dict:
    from tests.test_grpo_unit_cpu_result import _spec  # the committed CPU unit's spec, longer
    from trajval_ops.experiment.grpo_run import run

    with tempfile.TemporaryDirectory() as tmp:
        spec = _spec(Path(tmp)) | {"steps": options["steps"], "device": options["device"]}
        spec["evaluations"][0]["every_steps"] = 10
        start = time.perf_counter()
        result = run(spec)
        wall = time.perf_counter() - start
    return {"steps": result["steps"], "wall_s": round(wall, 2), "train_s": result["wall_time_s"],
            "device": result["device"], "precision": result["precision"],
            "peak_memory_gib": result["peak_memory_gib"]}


#: the groups ``--parts`` chooses from, in the order they run
PART_GROUPS = ("probe", "smollm2", "endpoint", "shape", "validate_unit")
#: the default check, at most about 5 minutes on one GPU; SmolLM2's precision study is asked for
DEFAULT_PARTS = tuple(part for part in PART_GROUPS if part != "smollm2")
PARTS = {"probe": part_probe, "smollm2": part_smollm2, "endpoint": part_endpoint, "shape": part_shape,
         "validate_unit": part_validate_unit}


# ----------------------------------------------------------------------------- driver (parent side)


def run_part(kind: str, options: dict, timeout: float, cpu_only: bool = False) -> dict:
    """One part in a child process: its JSON record, or ``{"error": ...}`` / ``{"skipped": ...}``."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    if cpu_only:
        env["CUDA_VISIBLE_DEVICES"] = ""
    command = [sys.executable, __file__, "--part", kind, "--options", json.dumps(options)]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}",
                "log_tail": done.stderr[-2000:]}
    record = json.loads(done.stdout.strip().splitlines()[-1])
    record["part_wall_s"] = round(time.perf_counter() - start, 1)
    return record


def vllm_skip_reason(device: str) -> str | None:
    from trajval_ops.probe.config import vllm_importable

    if device != "cuda":
        return "TRL's vLLM integration needs a GPU (--device cpu)"
    if not vllm_importable():
        return "vLLM is not installed here (pip install vllm)"
    return None


def family_agreement(device_pass: dict, cpu_pass: dict) -> dict:
    """Per family: both passes' pass rates and their difference in standard errors (binomial,
    over the family's rows x n completions of each pass)."""
    out = {}
    n = device_pass["n"]
    for family, (rate_a, rows) in device_pass["family_pass_rates"].items():
        rate_b = cpu_pass["family_pass_rates"][family][0]
        se = math.sqrt((rate_a * (1 - rate_a) + rate_b * (1 - rate_b)) / (rows * n)) or float("inf")
        out[family] = {"device": rate_a, "cpu": rate_b, "difference_in_se": round((rate_a - rate_b) / se, 2)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--quick", action="store_true", help="small sizes (the CPU check of the slow suite)")
    parser.add_argument("--shapes", nargs="*", default=None, help=f"of {sorted(SHAPES)} (default: llama-0.3b "
                        "qwen-1.5b on cuda, tiny on cpu)")
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "bench" / "bench_gpu.json")
    parser.add_argument("--parts", nargs="+", choices=PART_GROUPS, default=list(DEFAULT_PARTS),
                        help=f"which parts to run (default: {' '.join(DEFAULT_PARTS)})")
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS,
                        default=["auto", "bf16"], help="SmolLM2's probe, once under each (default: auto bf16)")
    parser.add_argument("--smollm2-tokens", type=int, default=256, help="SmolLM2's probe: the completion length "
                        "(default 256, the length of the SmolLM2 precision study; real_smollm2.yaml trains at 128)")
    parser.add_argument("--smollm2-steps", type=int, default=6, help="SmolLM2's probe: steps of 8 prompts x 8 "
                        "(default 6)")
    parser.add_argument("--part", help=argparse.SUPPRESS)
    parser.add_argument("--options", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from trajval_ops.lifetime import die_with_parent

    die_with_parent()  # a part (up to 26 GiB of GPU memory) or the bench cut short ends with its parent
    if args.part:  # a child: one part, its record as the last line of stdout
        import torch

        torch.set_num_threads(1 if json.loads(args.options)["device"] == "cpu" else torch.get_num_threads())
        print(json.dumps(PARTS[args.part](json.loads(args.options))))
        return 0
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("bench_gpu: error: --device cuda, but torch sees no GPU; run with --device cpu for the CPU check",
                  file=sys.stderr)
            return 2
        machine = torch.cuda.get_device_name(0)
    else:
        import platform

        machine = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    quick = args.quick
    shapes = args.shapes if args.shapes is not None else (["tiny"] if args.device == "cpu" else
                                                          ["llama-0.3b", "qwen-1.5b"])
    budget = 60 if quick else 150  # seconds per part before it is recorded as timed out
    report: dict = {"machine": machine, "device": args.device, "quick": quick, "parts": {}}
    parts = report["parts"]
    started = time.perf_counter()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    from trajval_ops.atomic import write_json

    def record(name: str, part: dict) -> None:
        """Each part as it ends, written at once: a run its caller cuts short keeps what it measured."""
        parts[name] = part
        write_json(args.out, report)

    chosen = set(args.parts)
    if "probe" in chosen:
        for generation in ("transformers", "vllm"):
            reason = vllm_skip_reason(args.device) if generation == "vllm" else None
            record(f"probe/{generation}", {"skipped": reason} if reason else run_part(
                "probe", {"device": args.device, "generation": generation, "probe_rows": 64 if quick else 600},
                budget))
    if "smollm2" in chosen:
        # by default the precision study's setting (6 steps of 8 x 8, 256 tokens); quick: one step of 2 x 2, 16 tokens
        smollm2 = {"steps": 1, "prompts": 2, "n": 2, "tokens": 16} if quick else {
            "steps": args.smollm2_steps, "prompts": 8, "n": 8, "tokens": args.smollm2_tokens}
        reason = smollm2_skip_reason()
        for precision in args.precisions:
            record(f"smollm2/{precision}", {"skipped": reason} if reason else run_part(
                "smollm2", smollm2 | {"device": args.device, "precision": precision}, budget * 2))
    if "endpoint" in chosen:
        endpoint = {"rows": 48 if quick else 600, "n": 16, "chunk": 64, "seed": 0}
        # on CPU one torch thread per process (shared cores: measured ~8x faster than two under load)
        record("endpoint", run_part("endpoint", endpoint | {"device": args.device, "bare": True,
                                                            "threads": 1 if args.device == "cpu" else None}, budget))
        # the same pass on CPU, another sampling seed: agreement within noise is the check
        threads = 1 if quick else min(4, os.cpu_count() or 1)
        record("endpoint/cpu_reference", run_part(
            "endpoint", endpoint | {"device": "cpu", "seed": 1, "threads": threads}, budget * 2, cpu_only=True))
    if "shape" in chosen:
        for shape in shapes:
            sizes = {"rows": 8, "n": 4, "tokens": 16, "chunk": 8, "probe_steps": 2} if quick else \
                {"rows": 64, "n": 16, "tokens": 128, "chunk": 64, "probe_steps": 3}
            record(f"shape/{shape}", run_part("shape", sizes | {"device": args.device, "shape": shape}, budget))
    if "validate_unit" in chosen:
        record("validate_unit", run_part("validate_unit", {"device": args.device, "steps": 4 if quick else 30},
                                         budget))
    report["wall_s"] = round(time.perf_counter() - started, 1)
    report["ratios"] = ratios(parts, args.device)
    write_json(args.out, report)
    print_report(report)
    print(f"bench_gpu: {report['wall_s']:.0f} s on {machine}; written to {args.out}")
    failed = [name for name, part in parts.items() if "error" in part]
    return 1 if failed else 0


def ratios(parts: dict, device: str) -> dict:
    out: dict = {}
    device_pass, cpu_pass = parts.get("endpoint", {}), parts.get("endpoint/cpu_reference", {})
    if "completions_per_s" in device_pass and "completions_per_s" in cpu_pass:
        out[f"endpoint_{device}_over_cpu_{cpu_pass['threads']}_threads"] = round(
            device_pass["completions_per_s"] / cpu_pass["completions_per_s"], 2)
        out["family_agreement"] = family_agreement(device_pass, cpu_pass)
    if "bare" in device_pass:
        out["endpoint_mapper_over_bare_loop"] = round(device_pass["completions_per_s"]
                                                      / device_pass["bare"]["completions_per_s"], 2)
    for name, part in parts.items():
        if name.startswith("shape/") and "engine" in part:
            out[f"{name}_engine_over_bare_loop"] = round(part["engine"]["tokens_per_s"] / part["bare"]["tokens_per_s"], 2)
    return out


def print_report(report: dict) -> None:
    for name, part in report["parts"].items():
        if "skipped" in part:
            print(f"{name:24} skipped: {part['skipped']}")
        elif "error" in part:
            print(f"{name:24} FAILED: {part['error']}")
        else:
            shown = {k: v for k, v in part.items() if k not in ("family_pass_rates", "log_tail")}
            print(f"{name:24} {json.dumps(shown)}")
    for name, value in report["ratios"].items():
        if name == "family_agreement":
            worst = max(abs(f["difference_in_se"]) for f in value.values())
            print(f"per-family pass rates, device vs CPU: largest difference {worst:.2f} standard errors "
                  f"over {len(value)} families")
        else:
            print(f"{name}: {value}x")


if __name__ == "__main__":
    sys.exit(main())
