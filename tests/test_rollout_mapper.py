"""trajval_endpoint_reward_mapper: fields, provenance, cache and resume, bad input, dj-process."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper
from trajval_ops.errors import TrajvalInputError

from tests.conftest import (
    REPO, arithmetic_rows, dj_process, tagged_processes_after, read_jsonl, vllm_importable, write_jsonl,
)


def _batch(rows):
    keys = rows[0].keys()
    return {key: [row[key] for row in rows] for key in keys}


def _op(tmp_path, **options):
    settings = dict(model="tiny-random-llama", output_key="trajval_acc_early", engine="transformers",
                    n=3, max_new_tokens=6, cache_dir=str(tmp_path / "rollouts"))
    settings.update(options)
    return TrajvalEndpointRewardMapper(**settings)


def test_writes_pass_rate_count_and_provenance_in_row_order(tmp_path):
    rows = arithmetic_rows()[:4]
    op = _op(tmp_path, verifier_options={"fallback_last_number": True})
    out = op.process_batched(_batch(rows))
    assert out["id"] == [r["id"] for r in rows]  # same rows, same order
    assert out["trajval_acc_early_n"] == [3] * 4
    assert all(rate in (0.0, 1 / 3, 2 / 3, 1.0) for rate in out["trajval_acc_early"])
    provenance = out["trajval_acc_early_provenance"][0]
    assert provenance["model"] == "tiny-random-llama" and provenance["engine"] == "transformers"
    assert provenance["n"] == 3 and provenance["temperature"] == 1.0 and provenance["max_new_tokens"] == 6
    assert provenance["seed"] == 0 and provenance["verifier"]["fallback_last_number"] is True
    assert provenance["checkpoint"] == {"name": "tiny-random-llama", "source": "short_ref"}
    op.release()


def test_pass_rate_is_the_verifier_mean(tmp_path):
    """A custom verifier that always rewards 1 makes every pass rate exactly 1."""
    op = _op(tmp_path, verifier="custom", verifier_options={"function": f"{__name__}:always_right"})
    out = op.process_batched(_batch(arithmetic_rows()[:2]))
    assert out["trajval_acc_early"] == [1.0, 1.0]
    op.release()


def always_right(completion, ground_truth, row):
    return 1.0


def test_same_seed_same_output_and_cache_reuse(tmp_path):
    rows = arithmetic_rows()[:3]
    first = _op(tmp_path, use_cache=False).process_batched(_batch(rows))
    second = _op(tmp_path, use_cache=False).process_batched(_batch(rows))
    assert first["trajval_acc_early"] == second["trajval_acc_early"]

    cached_op = _op(tmp_path, keep_completions=True)
    once = cached_op.process_batched(_batch(rows))
    assert cached_op.endpoint.stats["completions"] == 9
    again = cached_op.process_batched(_batch(rows))  # everything from the cache
    assert cached_op.endpoint.stats["completions"] == 9
    assert again["trajval_acc_early"] == once["trajval_acc_early"]
    records = [json.loads(line) for log in (tmp_path / "rollouts").rglob("results-*.jsonl") for line in open(log)]
    assert len(records) == 3 and all(len(r["completions"]) == 3 for r in records)
    cached_op.release()

    # another sampling setting is another cache entry
    other = _op(tmp_path, n=2)
    other.process_batched(_batch(rows))
    assert other.endpoint.stats["completions"] == 6
    other.release()


def test_a_verifier_that_reads_answers_otherwise_does_not_reuse_cached_rewards(tmp_path, monkeypatch):
    """The cache keeps rewards, not a way to recompute them: a release whose math verifier reads
    answers otherwise (revision 2: percent answers, truncated boxes) samples afresh instead of
    reusing the rewards an earlier reading gave."""
    from trajval_ops.rollout.verifiers import MathVerifier

    rows = arithmetic_rows()[:2]
    first = _op(tmp_path)
    first.process_batched(_batch(rows))
    assert first.endpoint._cache.run_key["verifier_revision"] == MathVerifier.revision
    first.release()
    again = _op(tmp_path)
    again.process_batched(_batch(rows))
    assert again.endpoint.stats["completions"] == 0  # the same reading: every row from the cache
    again.release()
    monkeypatch.setattr(MathVerifier, "revision", MathVerifier.revision + 1)
    revised = _op(tmp_path)
    revised.process_batched(_batch(rows))
    assert revised.endpoint.stats["completions"] == 6
    revised.release()


def test_an_edited_custom_verifier_does_not_reuse_the_rewards_it_gave_before(tmp_path, monkeypatch):
    """The custom verifier's spec named the function only: a user who fixed a bug in it kept every
    reward the old code gave (0 completions sampled). The spec holds the module file's sha256."""
    import importlib
    import sys

    module = tmp_path / "my_reward.py"
    module.write_text("def score(completion, ground_truth, row):\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = arithmetic_rows()[:2]
    options = dict(verifier="custom", verifier_options={"function": "my_reward:score"})
    first = _op(tmp_path, **options)
    assert first.process_batched(_batch(rows))["trajval_acc_early"] == [1.0, 1.0]
    first.release()
    module.write_text("def score(completion, ground_truth, row):\n    return 0.0  # fixed\n")
    sys.modules.pop("my_reward", None)
    importlib.invalidate_caches()
    fixed = _op(tmp_path, **options)
    assert fixed.process_batched(_batch(rows))["trajval_acc_early"] == [0.0, 0.0]
    assert fixed.endpoint.stats["completions"] == 6
    fixed.release()


def test_the_cache_key_holds_what_fits_a_prompt_beyond_the_models_files(tmp_path):
    """``overlong_prompt`` decided whether a cached row had been cut (a cache filled with
    ``truncate_left`` answered an ``error`` pass with cut rows instead of the error), vLLM's
    ``max_model_len`` (the setting or ``engine_kwargs``') where it cuts, and a tokenizer named in
    ``engine_kwargs`` the chat template; none was in the key. The defaults keep their key."""
    def run_key(**options):
        op = _op(tmp_path, **options)
        op.endpoint._prepare()
        return op.endpoint._cache.run_key

    default = run_key()
    assert "overlong_prompt" not in default and "tokenizer" not in default
    # the transformers engine cuts at the model's max_position_embeddings (2048), not at vLLM's setting
    cut = run_key(overlong_prompt="truncate_left", max_model_len=256)
    assert cut["overlong_prompt"] == {"mode": "truncate_left", "context": 2048}
    for engine in ("vllm", "auto"):
        assert run_key(overlong_prompt="truncate_left", engine=engine, max_model_len=256)["overlong_prompt"]["context"] == 256
        assert run_key(overlong_prompt="truncate_left", engine=engine,
                       engine_kwargs={"max_model_len": 512})["overlong_prompt"]["context"] == 512
    from trajval_ops.models import resolve_model

    # a composite config (Gemma 3's, Qwen2.5-VL's) holds the context in its text config, where vLLM
    # reads it: the transformers engine read 2048 there (cutting and refusing prompts vLLM takes),
    # and under vLLM a max_model_len beyond it cut elsewhere than auto's fallback under one key
    import shutil

    nested = tmp_path / "nested-config"
    shutil.copytree(resolve_model("tiny-random-llama"), nested)
    # the key is made before any model loads: Gemma 3's config beside the tiny model's files
    (nested / "config.json").write_text(json.dumps({"model_type": "gemma3",
                                                    "text_config": {"max_position_embeddings": 8192}}))
    assert run_key(overlong_prompt="truncate_left", model=str(nested))["overlong_prompt"]["context"] == 8192
    # vLLM reads the context itself (max_seq_len, rope scaling) and refuses a max_model_len beyond it
    assert run_key(overlong_prompt="truncate_left", engine="vllm", max_model_len=4096,
                   model=str(nested))["overlong_prompt"]["context"] == 4096
    tokenizer = run_key(engine_kwargs={"tokenizer": str(resolve_model("tiny-arith"))})["tokenizer"]
    assert tokenizer["path"] == str(resolve_model("tiny-arith").resolve()) and tokenizer["files"]


@pytest.mark.parametrize("options, pinned", [
    ({}, "b9b3b8d22f09d4e122e3671c"),
    ({"window": "late", "budget": "adaptive", "budget_prior": {"prior": "trajval", "alpha": 0.3, "eps": 0.05}},
     "cd43d8d5bcede2b4810be4d5"),
    ({"sample_fraction": 0.5, "sample_seed": 3, "sample_group_key": "family"}, "1bba429fef05d25d06820447"),
    ({"window": "early", "budget": "adaptive", "budget_prior": {"prior": "variance"}, "sample_fraction": 0.25},
     "c79fb4179920d81862754876"),
    ({"reuse_key": "base_rate", "reuse_n": 8, "reuse_missing": "measure"}, "b9b3b8d22f09d4e122e3671c"),
    ({"reuse_key": "base_rate", "reuse_n": 8, "reuse_missing": "measure", "window": "late", "budget": "adaptive",
      "budget_prior": {"prior": "trajval", "alpha": 0.3, "eps": 0.05}}, "cd43d8d5bcede2b4810be4d5"),
], ids=["measured", "adaptive", "sampled", "sampled_adaptive", "reused_measure", "reused_adaptive"])
def test_each_modes_rollout_cache_key_stays_the_one_users_caches_are_filed_under(tmp_path, options, pinned):
    """A pass finds its rollouts by its cache key: a key that changes makes every user's cache a
    miss, and their rollouts are sampled again. Each mode's key, less the model folder's fingerprint
    (its path and mtimes), pinned (a reused pass measuring its missing rows files them as a measured
    pass does); only a deliberate change (a verifier's new reading, a new
    setting that decides the rollouts) updates these."""
    from trajval_ops.canonical import stable_hash

    op = _op(tmp_path, **options)
    op.endpoint._prepare()
    key = {name: value for name, value in op.endpoint._cache.run_key.items() if name != "model"}
    op.release()
    assert stable_hash(key)[:24] == pinned, key


def test_repeated_tasks_in_several_workers_are_warned_of(tmp_path, caplog_loguru):
    """Copies of a task in batches of two workers take the rollouts of whichever samples it first,
    and a call is sampled as a whole: their rate followed the workers' order (0.5 or 0.1875 in the
    auditor's reproduction), silently. Said before the first batch; one worker says nothing."""
    import pyarrow as pa

    rows = arithmetic_rows()[:3]
    rows.append({**rows[0], "id": "copy-of-0"})
    table = pa.Table.from_pylist(rows)
    _op(tmp_path).check_pool(table)
    assert "repeats tasks" not in caplog_loguru.text
    _op(tmp_path, num_proc=2).check_pool(table)
    assert ("the pool repeats tasks (1 row(s) copy an earlier row's prompt and ground truth) and its batches run in 2 "
            "worker processes (num_proc)") in caplog_loguru.text


@pytest.mark.parametrize("settings, said", [
    ({"template": "dapo_math", "verifier": "math"}, ["template 'dapo_math'", "verifier 'math' where verl scores "
                                                     "data_source 'math_dapo' (3 rows) with its math_dapo reward"]),
    ({"template": "pool", "verifier": "math"}, ["verifier 'math' where verl scores data_source 'math_dapo'"]),
    ({"template": "chat", "verifier": "dapo"}, ["template 'chat' (verl renders the row's own chat prompt"]),
    ({"template": "pool", "verifier": "dapo"}, []),
    ({"template": "chat", "verifier": "custom", "verifier_options": {"function": "tests.test_rollout_budget:always_right"}},
     ["template 'chat'"]),  # a custom reward is the user's: only the template is compared
])
def test_a_pass_under_another_prompt_or_reward_than_the_main_runs_is_warned_of(tmp_path, caplog_loguru, settings,
                                                                                said):
    """verl picks a row's reward by its data_source (math_dapo: the 'Answer:' line) and renders
    the row's own prompt: a pass measuring otherwise is said so, before the first batch."""
    import pyarrow as pa

    from tests.test_rollout_prompts import DAPO_ROW

    rows = [{**DAPO_ROW, "id": f"t{i}"} for i in range(3)] + [{**DAPO_ROW, "id": "other", "data_source": "mine"}]
    _op(tmp_path, **settings).check_pool(pa.Table.from_pylist(rows))
    warned = [line for line in caplog_loguru.messages if line.startswith("WARNING") and "another prompt" in line]
    assert len(warned) == (1 if said else 0)
    for fragment in said:
        assert fragment in warned[0]
    assert "'mine'" not in caplog_loguru.text  # a data_source verl's default reward does not know is not judged


def test_the_repeat_check_reads_only_the_rows_a_sampled_pass_measures(tmp_path, caplog_loguru):
    """The check built every row's task: a row the sample leaves out, without a ground truth, was
    refused with two workers and accepted with one; and copies among unmeasured rows, which share
    no rollouts, were warned of."""
    from trajval_ops.priors.sampled import stratified_sample
    from trajval_ops.pools.io import table_from_columns

    rows = _family_rows()
    chosen = stratified_sample([r["id"] for r in rows], 0.25, 3, [r["family"] for r in rows])
    left_out = [i for i, keep in enumerate(chosen) if not keep]
    del rows[left_out[0]]["reward_model"]
    copy = rows[left_out[2]]
    rows[left_out[2]] = {**rows[left_out[1]], "id": copy["id"], "family": copy["family"]}  # both unmeasured
    for workers in (1, 2):
        op = _op(tmp_path, sample_fraction=0.25, sample_seed=3, sample_group_key="family", num_proc=workers)
        op.check_pool(table_from_columns(dict(_batch(rows))))
    assert "repeats tasks" not in caplog_loguru.text


def test_a_sampled_pass_names_a_measured_row_by_its_id_not_by_a_wrong_position(tmp_path):
    """The rows a sampled pass rolls out are not contiguous in the pool: an error about one named
    the batch's first position plus its place among the chosen rows (row 3 for pool row 6). The
    row is named by its id (a sampled pass reads ids)."""
    from trajval_ops.pools.io import table_from_columns

    rows = _family_rows(12)
    op = _op(tmp_path, sample_fraction=0.5, sample_seed=0)
    op.check_pool(table_from_columns(dict(_batch(rows))))
    chosen = [i for i, row in enumerate(rows) if repr(row["id"]) in op.endpoint._sampled_ids]
    last = chosen[-1]
    assert len(chosen) - 1 != last  # the position the batch's first row plus its place gave
    broken = [dict(row) for row in rows]
    broken[last]["prompt"] = ""
    with pytest.raises(TrajvalInputError, match=rf"row \(id={rows[last]['id']!r}\): field 'prompt' must be non-empty"):
        op.process_batched(_batch(broken))
    op.release()


def test_interrupted_run_resumes_with_only_the_missing_rows(tmp_path):
    rows = arithmetic_rows(10)
    pool = write_jsonl(tmp_path / "pool.jsonl", rows)
    cache = tmp_path / "rollouts"
    worker = subprocess.run([sys.executable, str(Path(__file__).with_name("resume_worker.py")), str(pool), str(cache)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    assert worker.returncode == -signal.SIGKILL  # killed itself right after its third cached row
    done = sum(1 for log in cache.rglob("results-*.jsonl") for _ in open(log))
    assert done == 3

    op = _op(tmp_path, output_key="acc", n=2, max_new_tokens=48, prompts_per_generate=1)
    out = op.process_batched(_batch(rows))
    assert out["acc_n"] == [2] * len(rows)
    assert op.endpoint.stats["completions"] == 2 * (len(rows) - done)  # only the missing rows sampled
    op.release()


def test_a_pass_resumed_with_another_dtype_says_its_rows_are_mixed(tmp_path, caplog_loguru):
    """The rollout cache is keyed by what defines the distribution, not by the engine or dtype: a
    pass resumed in another dtype keeps its cached rows, and the end of the pass says so."""
    import pyarrow as pa

    rows = arithmetic_rows()[:4]
    first = _op(tmp_path, dtype="float32")
    first.process_batched(_batch(rows[:1]))
    first.release()
    again = _op(tmp_path, dtype="bfloat16")
    out = again.process_batched(_batch(rows))
    assert [p["dtype"] for p in out["trajval_acc_early_provenance"]] == ["float32"] + ["bfloat16"] * 3
    again.finish_pool(pa.Table.from_pydict(out), 1.0)
    assert ("the rows were sampled by more than one engine or dtype (3 by transformers in bfloat16, 1 by "
            "transformers in float32; each row's trajval_acc_early_provenance names its own)") in caplog_loguru.text
    again.release()
    alone = _op(tmp_path / "other", dtype="bfloat16")
    alone.finish_pool(pa.Table.from_pydict(alone.process_batched(_batch(rows))), 1.0)
    assert caplog_loguru.text.count("more than one engine or dtype") == 1
    alone.release()


def test_a_generate_call_out_of_gpu_memory_names_its_rows_and_the_settings_that_lower_it(tmp_path, monkeypatch):
    """The transformers engine's generate call raising torch's out-of-memory error (as it does on
    a GPU; raised here by hand) stops the pass with the call's size and the settings to lower;
    the message names the call's first rows, not all of them; nothing of the call is cached."""
    import torch
    import transformers

    def exhausted(self, *args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.50 GiB. GPU 0 has a total capacity of "
                                     "79.19 GiB of which 3.12 GiB is free. Of the allocated memory 70 GiB is ...")

    monkeypatch.setattr(transformers.GenerationMixin, "generate", exhausted)
    rows = arithmetic_rows()[:6]
    op = _op(tmp_path, prompts_per_generate=6)
    with pytest.raises(TrajvalInputError) as raised:
        op.process_batched(_batch(rows))
    op.release()
    from trajval_ops.errors import DeviceOutOfMemory

    assert isinstance(raised.value, DeviceOutOfMemory)
    labels = ", ".join(f"row {i} (id={row['id']!r})" for i, row in enumerate(rows[:4]))
    assert str(raised.value) == (
        f"trajval_endpoint_reward_mapper: the generate call of {labels} and 2 more: transformers engine: out of "
        "memory on cpu in a generate call of 6 prompt(s) x 3 completion(s) of up to 6 new tokens (CUDA out of "
        "memory. Tried to allocate 9.50 GiB. GPU 0 has a total capacity of 79.19 GiB of which 3.12 GiB is free); "
        "lower prompts_per_generate (the prompts of one call) or max_new_tokens, or use engine: vllm (it pages its "
        "KV cache)")
    assert [line for log in (tmp_path / "rollouts").rglob("results-*.jsonl") for line in open(log)] == []


def test_a_run_killed_mid_call_resumes_to_the_uninterrupted_bytes(tmp_path):
    """transformers samples a generate call as a whole: a kill after two of a call's four rows
    reached the cache must not regroup the other two into a new call (other completions)."""
    pool = REPO / "trajval_ops" / "data" / "demo_arith_pool.jsonl"
    rows = [json.loads(line) for line in pool.read_text().splitlines()[:6]]
    options = dict(model="tiny-arith", n=8, max_new_tokens=8, prompts_per_generate=4, keep_completions=True,
                   verifier_options={"fallback_last_number": True})

    def cache_records():
        return {record["row"]: record for log in (tmp_path / "rollouts").rglob("results-*.jsonl")
                for line in log.read_text().splitlines() if line.endswith("}")
                for record in [json.loads(line)]}

    full = _op(tmp_path, **options)
    uninterrupted = full.process_batched(_batch(rows))
    full.release()
    sampled = cache_records()
    [log] = list((tmp_path / "rollouts").rglob("results-*.jsonl"))
    lines = log.read_text().splitlines(keepends=True)
    assert len(lines) == 6
    log.write_text("".join(lines[:2]) + lines[2][:40])  # the third record cut short by the kill

    resumed_op = _op(tmp_path, **options)
    resumed = resumed_op.process_batched(_batch(rows))
    resumed_op.release()
    assert cache_records() == sampled  # the same completions, each row once
    assert json.dumps(resumed, sort_keys=True) == json.dumps(uninterrupted, sort_keys=True)
    # the first call ran again whole (its two cached rows kept), the second call as before
    assert resumed_op.endpoint.stats["completions"] == 8 * 6


@pytest.mark.parametrize("row, fragment", [
    ({"id": "bad1", "prompt": "1+1?"}, "row 1 (id='bad1'): field 'reward_model.ground_truth'"),
    ({"id": "bad2", "reward_model": {"ground_truth": "2"}}, "row 1 (id='bad2'): field 'prompt'"),
    ({"id": "bad3", "prompt": "1+1?", "reward_model": {"ground_truth": ""}},
     "row 1 (id='bad3'): field 'reward_model.ground_truth': the ground truth is empty"),
    ({"id": "bad4", "prompt": "1+1?", "reward_model": {"ground_truth": "\\frac{"}},
     "row 1 (id='bad4'): field 'reward_model.ground_truth': math-verify cannot read the ground truth"),
])
def test_bad_rows_name_row_and_field(tmp_path, row, fragment):
    good = {"id": "ok", "prompt": "2+2?", "reward_model": {"ground_truth": "4"}}
    op = _op(tmp_path, use_cache=False)
    with pytest.raises(TrajvalInputError) as err:
        op.process_batched(_batch([good, {**{k: None for k in good}, **row}]))
    assert fragment in str(err.value)
    op.release()


def test_bad_settings(tmp_path):
    with pytest.raises(ValueError, match="engine"):
        _op(tmp_path, engine="sglang")
    with pytest.raises(ValueError, match="template"):
        _op(tmp_path, template="poem")
    with pytest.raises(ValueError, match="unknown verifier"):
        _op(tmp_path, verifier="regex")
    # when the operator is built, not as torch's AttributeError when the model loads
    with pytest.raises(ValueError, match="dtype must be one of 'auto', 'bfloat16', 'float16', 'float32', got 'fp16'"):
        _op(tmp_path, dtype="fp16")
    op = _op(tmp_path, model="/no/such/model")
    with pytest.raises(FileNotFoundError, match="tiny-random-llama"):
        op.process_batched(_batch(arithmetic_rows()[:1]))


def test_manifest_reference(tmp_path, tiny_model_path):
    from trajval_ops.probe_manifest import FORMAT, write_manifest
    from trajval_ops.probe_manifest import resolve_model_reference

    probe = tmp_path / "probe"
    write_manifest(probe, {
        "format": FORMAT, "base_model": "tiny-random-llama", "seed": 0, "probe_ids": ["q0"], "config": {},
        "config_hash": "sha256:abc", "versions": {}, "train_reward_per_epoch": [0.0], "wall_time_s": 1.0,
        "status": "complete",
        "checkpoints": [{"name": "base", "epoch": 0, "step": 0, "path": str(tiny_model_path)},
                        {"name": "epoch-1", "epoch": 1, "step": 2, "path": str(tiny_model_path)}],
        "windows": {"early": ["base"], "late": ["epoch-1"]},
    })
    path, checkpoint = resolve_model_reference(f"manifest:{probe}#late[-1]")
    assert path == tiny_model_path
    assert checkpoint["name"] == "epoch-1" and checkpoint["window"] == "late" and checkpoint["step"] == 2
    assert checkpoint["config_hash"] == "sha256:abc"
    with pytest.raises(ValueError, match="manifest:<probe dir"):
        resolve_model_reference(f"manifest:{probe}")
    with pytest.raises(ValueError, match="unknown checkpoint reference"):
        resolve_model_reference(f"manifest:{probe}#epoch-9")


# ----------------------------------------------------------------------------- slow: dj-process

@pytest.fixture()
def private_rollout_cache(tmp_path, monkeypatch):
    """dj-process writes its rollout cache under tmp; models stay in the shared cache."""
    from trajval_ops.models import cache_dir

    root = tmp_path / "trajval_cache"
    root.mkdir()
    (root / "models").symlink_to(cache_dir() / "models")
    monkeypatch.setenv("TRAJVAL_CACHE", str(root))
    return root


@pytest.mark.slow
def test_recipe_under_dj_process_end_to_end(tmp_path, private_rollout_cache):
    rows = arithmetic_rows()
    pool = write_jsonl(tmp_path / "pool.jsonl", rows)
    out = tmp_path / "out" / "scored.jsonl"
    result = dj_process(REPO / "recipes" / "endpoint_rewards_tiny.yaml", tmp_path,
                        "--dataset_path", str(pool), "--export_path", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    scored = read_jsonl(out)
    assert [r["id"] for r in scored] == [r["id"] for r in rows]
    for row in scored:
        assert row["trajval_r_early_n"] == 4 and 0 <= row["trajval_r_early"] <= 1
        assert row["trajval_r_late_provenance"]["seed"] == 1
        assert "trajval_weight" in row and "trajval_profile" in row
    assert "trajval_endpoint_reward_mapper [trajval_r_late]: done" in result.stderr + result.stdout
    assert len(list((private_rollout_cache / "rollouts").iterdir())) == 2  # one cache per instance


@pytest.mark.slow
@pytest.mark.skipif(not vllm_importable()[0], reason=vllm_importable()[1])
def test_vllm_engine_under_dj_process_exits_and_leaves_no_process(tmp_path, private_rollout_cache):
    """Two vLLM instances (early and late) in one dj-process run: every row scored, the process
    exits (captured pipes close, so no vLLM process holds them) and nothing it started lives on."""
    import uuid

    import yaml

    recipe = yaml.safe_load((REPO / "recipes" / "endpoint_rewards_tiny.yaml").read_text())
    for step in recipe["process"][:2]:
        step["trajval_endpoint_reward_mapper"].update(
            engine="vllm", enforce_eager=True, max_model_len=512, kv_cache_space_gb=1)
    rows = arithmetic_rows()[:5]
    pool = write_jsonl(tmp_path / "pool.jsonl", rows)
    out = tmp_path / "out" / "scored.jsonl"
    tag = uuid.uuid4().hex
    result = dj_process(recipe, tmp_path, "--dataset_path", str(pool), "--export_path", str(out),
                        env={"TRAJVAL_TEST_TAG": tag}, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert tagged_processes_after(tag, 10) == []
    scored = read_jsonl(out)
    assert [r["id"] for r in scored] == [r["id"] for r in rows]
    for row in scored:
        for key in ("trajval_r_early", "trajval_r_late"):
            assert row[f"{key}_n"] == 4 and 0 <= row[key] <= 1
            assert row[f"{key}_provenance"]["engine"] == "vllm"
        assert "trajval_weight" in row
    assert "did not stop by themselves" not in result.stderr + result.stdout


@pytest.mark.slow
def test_bad_row_stops_dj_process(tmp_path, private_rollout_cache):
    rows = arithmetic_rows()[:3]
    del rows[1]["reward_model"]
    pool = write_jsonl(tmp_path / "pool.jsonl", rows)
    result = dj_process(REPO / "recipes" / "endpoint_rewards_tiny.yaml", tmp_path,
                        "--dataset_path", str(pool), "--export_path", str(tmp_path / "o.jsonl"))
    assert result.returncode != 0
    assert "id='q1'" in result.stderr + result.stdout and "reward_model.ground_truth" in result.stderr + result.stdout


@pytest.mark.slow
def test_an_overflowing_float16_model_stops_dj_process_with_the_remedy(tmp_path, private_rollout_cache,
                                                                       float16_overflowing_model):
    """NaN logits in the main process's pass: one readable block, exit 2, no output."""
    import yaml

    recipe = yaml.safe_load((REPO / "recipes" / "endpoint_rewards_tiny.yaml").read_text())
    recipe["process"] = recipe["process"][:1]
    recipe["process"][0]["trajval_endpoint_reward_mapper"].update(model=str(float16_overflowing_model),
                                                                  dtype="float16")
    pool = write_jsonl(tmp_path / "pool.jsonl", arithmetic_rows()[:3])
    out = tmp_path / "o.jsonl"
    result = dj_process(recipe, tmp_path, "--dataset_path", str(pool), "--export_path", str(out))
    assert result.returncode == 2, result.stderr[-3000:]
    assert ("trajval_ops: error: trajval_endpoint_reward_mapper: the generate call of row 0 (id='q0'), "
            "row 1 (id='q1'), row 2 (id='q2'): transformers engine: the next-token logits became non-finite "
            "(NaN or inf) in float16 at new token 1 of a generate call; the model overflows in float16: "
            "set dtype: float32") in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


def test_repeated_rows_are_sampled_once(tmp_path):
    row = arithmetic_rows()[0]
    rows = [dict(row, id=f"copy{i}") for i in range(3)]  # same prompt and ground truth
    op = _op(tmp_path)
    out = op.process_batched(_batch(rows))
    assert op.endpoint.stats["completions"] == 3  # n=3 once, not three times
    assert len(set(out["trajval_acc_early"])) == 1 and out["id"] == ["copy0", "copy1", "copy2"]
    op.release()



def test_bad_truths_within_the_allowed_share_are_counted_not_sampled(tmp_path):
    rows = arithmetic_rows()[:4]
    rows[2]["reward_model"] = {"ground_truth": "\\frac{"}
    op = _op(tmp_path, use_cache=False, max_bad_truth_share=0.5)
    out = op.process_batched(_batch(rows))
    assert out["trajval_acc_early_status"] == ["ok", "ok", "bad_ground_truth", "ok"]
    assert out["trajval_acc_early"][2] == 0.0 and out["trajval_acc_early_n"][2] == 0
    assert op.endpoint.stats["completions"] == 3 * 3  # the bad row is not sampled
    op.release()


def test_a_share_above_the_limit_stops_the_run(tmp_path):
    rows = arithmetic_rows()[:4]
    for row in rows[:2]:
        row["reward_model"] = {"ground_truth": "x+"}
    op = _op(tmp_path, use_cache=False, max_bad_truth_share=0.25)
    statuses = op.process_batched(_batch(rows))["trajval_acc_early_status"]
    op.release()
    with pytest.raises(TrajvalInputError, match=r"2 of 4 rows \(50.0%\) have a ground truth .* the first is row 0"):
        op.endpoint.check_bad_truth_share(statuses)
    _op(tmp_path, max_bad_truth_share=0.5).endpoint.check_bad_truth_share(statuses)


def test_overlong_prompt_is_an_error_or_cut_from_the_left(tmp_path):
    long_row = {"id": "long", "prompt": "add " * 2100 + "1 and 1", "reward_model": {"ground_truth": "2"}}
    rows = [arithmetic_rows()[0], long_row]
    op = _op(tmp_path, use_cache=False)
    with pytest.raises(TrajvalInputError, match=r"row 1 \(id='long'\): field 'prompt': the rendered prompt has \d+ tokens, "
                                                 r"more than the model's context of 2048 minus the 6 new tokens"):
        op.process_batched(_batch(rows))
    op.release()
    op = _op(tmp_path, use_cache=False, overlong_prompt="truncate_left")
    out = op.process_batched(_batch(rows))
    assert out["trajval_acc_early_status"] == ["ok", "truncated_prompt"]
    assert out["trajval_acc_early_n"] == [3, 3]
    op.release()


def test_auto_falling_back_to_transformers_cuts_where_vllm_would(tmp_path, monkeypatch):
    """``auto``'s transformers fallback cut at the model's context, vLLM at ``max_model_len``; the
    rollout cache's key, known before either starts, held vLLM's: a cache vLLM filled answered the
    fallback with prompts cut elsewhere. The fallback now cuts at ``max_model_len`` too."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "vllm" else find_spec(name, *rest))
    rows = [arithmetic_rows()[0], {"id": "long", "prompt": "add 1 " * 30 + "and 1", "reward_model": {"ground_truth": "2"}}]
    statuses = {}
    for engine in ("transformers", "auto"):
        op = _op(tmp_path, use_cache=False, overlong_prompt="truncate_left", engine=engine, max_model_len=48)
        statuses[engine] = op.process_batched(_batch(rows))["trajval_acc_early_status"]
        op.release()
    assert statuses == {"transformers": ["ok", "ok"], "auto": ["ok", "truncated_prompt"]}


def test_duplicate_ids_stop_the_run_naming_both_rows(tmp_path):
    from data_juicer.core.data import NestedDataset
    from datasets import Dataset

    rows = arithmetic_rows()[:3]
    rows[2]["id"] = rows[0]["id"]
    with pytest.raises(TrajvalInputError, match=r"row 2 \(id='q0'\): id field 'id' = 'q0' repeats row 0"):
        _op(tmp_path).run(NestedDataset(Dataset.from_list(rows)))


def test_the_pass_settings_are_declared_once_in_their_groups():
    """Every setting of the pass (decoding, engine, prompt, verifier, cache, budget, sample, reuse)
    is declared once, in its group (issue 34): the operator's flat recipe keys, their defaults,
    docstring lines and checks come from there."""
    import dataclasses
    import inspect

    from trajval_ops import settings
    from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper
    from trajval_ops.rollout.pass_settings import SETTING_GROUPS

    parameters = inspect.signature(TrajvalEndpointRewardMapper.__init__).parameters
    doc = TrajvalEndpointRewardMapper.__init__.__doc__
    for group in SETTING_GROUPS:
        for field in dataclasses.fields(group):
            assert parameters[field.name].default == field.default, field.name
            assert f":param {field.name}: {settings.help_text(field)}" in doc, field.name
    with pytest.raises(ValueError, match=r"trajval_endpoint_reward_mapper: top_p must be in \(0, 1\], got 1.5"):
        TrajvalEndpointRewardMapper(model="tiny-random-llama", top_p=1.5)
    with pytest.raises(ValueError, match=r"sample_fraction must be in \(0, 1\], got 0"):
        TrajvalEndpointRewardMapper(model="tiny-random-llama", sample_fraction=0)
    with pytest.raises(ValueError, match=r"trajval_endpoint_reward_mapper: n must be an integer, got float 16.0"):
        TrajvalEndpointRewardMapper(model="tiny-random-llama", n=16.0)  # the type, strictly, from the declaration


def test_recorded_cost_is_what_the_engine_was_asked_for(tmp_path):
    """Each row's provenance records the completions and tokens generated for it; summed, they
    are the generate calls' own counts. A repeated row and a cached row cost nothing again."""
    rows = arithmetic_rows()[:5]
    rows.append({**rows[1], "id": "repeat-of-1"})  # same prompt and truth: sampled once
    op = _op(tmp_path, prompts_per_generate=2)
    calls = []
    from trajval_ops.rollout.session import EngineSession

    original = EngineSession.generate_counted

    def counting(self, prompts, decoding):
        texts, tokens = original(self, prompts, decoding)
        calls.append((len(prompts) * decoding.n, sum(tokens), sum(len(group) for group in texts)))
        return texts, tokens

    EngineSession.generate_counted = counting
    try:
        out = op.process_batched(_batch(rows))
        cached_op = _op(tmp_path, prompts_per_generate=2)
        again = cached_op.process_batched(_batch(rows))  # all from the cache
        cached_op.release()
    finally:
        EngineSession.generate_counted = original
    costs = [p["cost"] for p in out["trajval_acc_early_provenance"]]
    assert sum(c["completions"] for c in costs) == sum(asked for asked, _, _ in calls) == 5 * 3
    assert sum(c["generated_tokens"] for c in costs) == sum(tokens for _, tokens, _ in calls) > 0
    assert costs[5] == {"completions": 0, "generated_tokens": 0}  # the repeat of row 1
    assert out["trajval_acc_early"][5] == out["trajval_acc_early"][1]
    assert [p["cost"] for p in again["trajval_acc_early_provenance"]] == costs  # the cache keeps each row's cost
    assert len(calls) == 3  # rows 0-4 in calls of 2, none for the cached run
    op.release()


def _reused_rows():
    rows = arithmetic_rows()[:3]
    for row, rate in zip(rows, (0.0, 0.375, 1.0)):
        row.update(base_pass_rate=rate, base_n=8)
    return rows


def test_a_reused_early_pass_reads_the_pool_and_samples_nothing(tmp_path):
    op = _op(tmp_path, window="early", output_key=None, reuse_key="base_pass_rate", reuse_n_key="base_n")
    out = op.process_batched(_batch(_reused_rows()))
    assert out["trajval_r_early"] == [0.0, 0.375, 1.0]
    assert out["trajval_r_early_n"] == [8, 8, 8] and out["trajval_r_early_status"] == ["reused"] * 3
    provenance = out["trajval_r_early_provenance"][0]
    assert provenance["source"] == "pool_field" and provenance["field"] == "base_pass_rate"
    assert provenance["n"] is None and provenance["n_field"] == "base_n"  # each row's n is in trajval_r_early_n
    assert provenance["cost"] == {"completions": 0, "generated_tokens": 0}
    assert op.endpoint._session is None and op.endpoint._cache is None  # no model, no rollout cache
    op.release()
    import pyarrow as pa
    from loguru import logger

    said = []  # the end-of-pass line counts no rollouts for it (it summed the borrowed n)
    sink = logger.add(said.append, level="INFO")
    try:
        op.endpoint.finish(pa.Table.from_pydict(out), elapsed_s=1.0)
    finally:
        logger.remove(sink)
    assert any("done, 3 rows, 0 rollouts in 1.0 s" in str(message) for message in said)


@pytest.mark.parametrize("change, message", [
    (lambda rows: rows[1].update(base_pass_rate=1.5), r"row 1 \(id=.*\): field 'base_pass_rate' \(the reused pass "
                                                       r"rate\) = 1.5 is outside \[0, 1\]"),
    (lambda rows: rows[2].update(base_n=[]), r"row 2 \(id=.*\): field 'base_n' is an empty list"),
    (lambda rows: rows[0].pop("base_n"), r"row 0 \(id=.*\): field 'base_n' \(the rollouts behind 'base_pass_rate'\) "
                                         r"is missing"),
    (lambda rows: rows[0].update(base_n=2.5), r"field 'base_n' = 2.5 must be a positive whole number"),
    (lambda rows: rows[0].update(base_n=float("nan")), r"row 0 \(id=.*\): field 'base_n' = nan must be a positive"),
    (lambda rows: rows[1].update(base_n=float("inf")), r"row 1 \(id=.*\): field 'base_n' = inf must be a positive"),
    (lambda rows: rows[1].update(base_n=2 ** 70), r"row 1 \(id=.*\): field 'base_n' = 1180591620717411303424 is not "
                                                  r"a rollout count"),
])
def test_a_reused_pass_refuses_values_out_of_range_and_a_missing_or_empty_n(tmp_path, change, message):
    rows = _reused_rows()
    change(rows)
    op = _op(tmp_path, window="early", output_key=None, reuse_key="base_pass_rate", reuse_n_key="base_n")
    batch = {key: [row.get(key) for row in rows] for key in dict.fromkeys(k for row in rows for k in row)}
    with pytest.raises(TrajvalInputError, match=message):
        op.process_batched(batch)
    op.release()


def test_a_reused_pass_needs_its_n(tmp_path):
    with pytest.raises(ValueError, match="needs the rollouts behind its pass rates"):
        _op(tmp_path, window="early", output_key=None, reuse_key="base_pass_rate")


def test_a_fixed_n_pass_writes_what_the_mapper_wrote_before_the_pass_moved(tmp_path):
    """Pinned against the endpoint mapper at commit 5c2f345 (before issue 24 moved the pass into
    rollout/pass_rates.py): the same pass rates, counts, statuses, provenance (less the later
    ``cost`` and ``verifier_revision``, and this machine's paths) and completions, repeated row
    included."""
    pinned = json.loads((REPO / "tests" / "data" / "fixed_pass_before_the_move.json").read_text())
    pool = (REPO / "trajval_ops" / "data" / "demo_arith_pool.jsonl").read_text().splitlines()[:10]
    rows = [json.loads(line) for line in pool]
    rows[7] = rows[2]
    op = _op(tmp_path, model="tiny-arith", output_key="acc", n=6, max_new_tokens=8, prompts_per_generate=4, seed=7,
             keep_completions=True, verifier_options={"fallback_last_number": True})
    out = op.process_batched(_batch(rows))
    op.release()
    assert (out["acc"], out["acc_n"], out["acc_status"]) == (pinned["acc"], pinned["acc_n"], pinned["acc_status"])
    later = ("cost", "verifier_revision", "model_path", "completions")
    kept = [{k: v for k, v in p.items() if k not in later} for p in out["acc_provenance"]]
    assert kept == pinned["provenance_without_cost_and_paths"]
    completions = {record["row"]: record["completions"] for log in (tmp_path / "rollouts").rglob("results-*.jsonl")
                   for record in map(json.loads, log.read_text().splitlines())}
    assert completions == pinned["completions_by_prompt_hash"]


# ----------------------------------------------------------------------------- sampled passes


def _family_rows(count=12):
    rows = arithmetic_rows(count)
    for i, row in enumerate(rows):
        row["family"] = "abc"[i % 3]
    return rows


def _sampled_run(tmp_path, rows, **options):
    from trajval_ops.pools.io import table_from_columns

    op = _op(tmp_path, sample_fraction=0.25, sample_seed=3, sample_group_key="family", **options)
    batch = _batch(rows)
    op.check_pool(table_from_columns(dict(batch)))  # as run() does before the first batch
    out = op.process_batched(batch)
    op.release()
    return op, [dict(zip(out, values)) for values in zip(*out.values())]


def test_a_sampled_pass_rolls_out_its_seeded_stratified_sample_and_nothing_else(tmp_path):
    """Per family the ceil(0.25 x 4) = 1 row of smallest seeded hash is rolled out; the others get
    no pass rate, no rollouts, status not_sampled and no cost; the same rows in any pool order."""
    from trajval_ops.priors.sampled import stratified_sample

    rows = _family_rows()
    op, out = _sampled_run(tmp_path, rows)
    chosen = stratified_sample([r["id"] for r in rows], 0.25, 3, [r["family"] for r in rows])
    assert chosen.sum() == 3
    for row, keep in zip(out, chosen):
        assert (row["trajval_acc_early_status"] == "not_sampled") == (not keep)
        assert row["trajval_acc_early_n"] == (3 if keep else 0)
        assert (row["trajval_acc_early"] is None) == (not keep)
        assert row["trajval_acc_early_provenance"]["sample"]["measured_rows"] == 3
        if not keep:
            assert row["trajval_acc_early_provenance"]["cost"] == {"completions": 0, "generated_tokens": 0}
    assert op.endpoint.stats["completions"] == 3 * 3  # what the engine was asked for: the sample's rows only
    assert [r["id"] for r in out] == [r["id"] for r in rows]

    shuffled = list(reversed(rows))
    _, again = _sampled_run(tmp_path / "other", shuffled)
    measured = {r["id"] for r in again if r["trajval_acc_early_status"] != "not_sampled"}
    assert measured == {r["id"] for r, keep in zip(rows, chosen) if keep}


def test_a_sampled_pass_needs_the_whole_pool_and_task_ids(tmp_path):
    from data_juicer.core.data import NestedDataset
    from datasets import Dataset

    rows = _family_rows(6)
    op = _op(tmp_path, sample_fraction=0.5)
    with pytest.raises(RuntimeError, match="draws its sample from the whole pool"):
        op.process_batched(_batch(rows))  # no check_pool: no sample
    for row in rows:
        row.pop("id")
    with pytest.raises(TrajvalInputError, match="names its rows by task id, and the pool has none: set id_key"):
        _op(tmp_path, sample_fraction=0.5).run(NestedDataset(Dataset.from_list(rows)))
    for missing in ("error", "measure"):  # true of both: with measure, the rows lacking the column cost rollouts
        with pytest.raises(ValueError, match=r"a reused pass reads its column on every row \(with reuse_missing: "
                                             r"measure, it samples the rows that lack it, each in full\): it draws no "
                                             r"sample; drop sample_fraction"):
            _op(tmp_path, sample_fraction=0.5, reuse_key="base", reuse_n=4, reuse_missing=missing)
    with pytest.raises(ValueError, match="sample_fraction"):
        _op(tmp_path, sample_fraction=0.0)


def test_a_sampled_pass_refuses_a_group_key_no_row_has_and_counts_rows_without_it(tmp_path, caplog_loguru):
    """A misspelled child of an existing struct is "not found", named, as a misspelled top-level
    field is (issue 36, item 3), not an unstratified sample under the key's name; rows lacking
    the key among rows that have it are counted in a warning."""
    from trajval_ops.pools.io import table_from_columns

    rows = _family_rows(6)
    for i, row in enumerate(rows):
        row["extra_info"] = {"family": "ab"[i % 2], "index": i}
    table = table_from_columns(dict(_batch(rows)))
    for key in ("extra_info.famly", "famly"):
        op = _op(tmp_path, sample_fraction=0.5, sample_group_key=key)
        with pytest.raises(TrajvalInputError, match=f"group_key '{key}' is not found on any row"):
            op.check_pool(table)
    with pytest.raises(TrajvalInputError, match="holds 'family', 'index'"):
        _op(tmp_path, sample_fraction=0.5, sample_group_key="extra_info.famly").check_pool(table)
    rows[4]["extra_info"] = {"index": 4}
    _op(tmp_path, sample_fraction=0.5, sample_group_key="extra_info.family").check_pool(
        table_from_columns(dict(_batch(rows))))
    assert "1 of 6 rows lack group_key 'extra_info.family' (the first: row 4" in caplog_loguru.text


def test_a_killed_sampled_pass_resumes_to_the_same_output(tmp_path):
    rows = _family_rows(12)
    pool = write_jsonl(tmp_path / "pool.jsonl", rows)
    options = dict(model="tiny-random-llama", output_key="acc", engine="transformers", n=2, max_new_tokens=8,
                   prompts_per_generate=1, sample_fraction=0.5, sample_seed=1, sample_group_key="family")
    cache = tmp_path / "rollouts"
    worker = subprocess.run([sys.executable, str(Path(__file__).with_name("resume_worker.py")), str(pool), str(cache),
                             json.dumps(options), "put:2"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    assert worker.returncode == -signal.SIGKILL

    def run(cache_dir):
        from trajval_ops.pools.io import read_table

        op = TrajvalEndpointRewardMapper(**{**options, "cache_dir": str(cache_dir)})
        op.check_pool(read_table(pool))
        out = op.process_batched(_batch(rows))
        completions = op.endpoint.stats["completions"]
        op.release()
        for provenance in out["acc_provenance"]:
            provenance.pop("cost", None)  # what this run generated differs; the results must not
        return out, completions

    resumed, resumed_completions = run(cache)
    uninterrupted, completions = run(tmp_path / "fresh")
    assert json.dumps(resumed, sort_keys=True) == json.dumps(uninterrupted, sort_keys=True)
    assert completions == 2 * 6 and resumed_completions == 2 * (6 - 2)  # two rows came from the cache


def test_a_pass_replacing_the_pools_own_column_says_so(tmp_path, caplog_loguru):
    """A pool's own trajval_acc_early (a fixture's, a pass run before) was replaced without a word."""
    import pyarrow as pa

    rows = [dict(row, trajval_acc_early=0.5) for row in arithmetic_rows()[:2]]
    op = _op(tmp_path)
    op.endpoint.check_pool(pa.Table.from_pylist(rows))
    assert "the pool already has trajval_acc_early: this pass replaces them" in caplog_loguru.text
    caplog_loguru.messages.clear()
    op.endpoint.check_pool(pa.Table.from_pylist(arithmetic_rows()[:2]))
    assert "already has" not in caplog_loguru.text
