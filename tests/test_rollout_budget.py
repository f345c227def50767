"""The adaptive rollout budget: its stopping rule by hand, and an adaptive pass of the endpoint
mapper (late rows skipped exactly where the rule says, deterministic, resumable)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO, write_jsonl
from tests.test_rollout_mapper import _batch, _op
from trajval_ops import core
from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper
from trajval_ops.priors import TrajVal
from trajval_ops.rollout.budget import AdaptiveBudget

#: the paper's prior: the weight an adaptive pass bounds unless a recipe says otherwise
TRAJVAL = TrajVal()
#: an endpoint pass with the adaptive budget, told the prior (dj-process tells it from its recipe)
ADAPTIVE = dict(budget="adaptive", budget_prior=TRAJVAL.spec())

LATE = AdaptiveBudget("late", cap=16, round_size=4, prior=TRAJVAL, tolerance=0.05)


@pytest.mark.parametrize("r_early, successes, rollouts, decided", [
    (1.0, 0, 0, True),      # s = 0 whatever the late pass gives: not sampled at all
    (0.75, 0, 4, True),     # decided after one round: 4 more of 12 can reach at most 12/16 = r_early
    (0.5, 0, 8, True),      # at most 8/16 = r_early: s = 0
    (0.5, 0, 4, False),     # up to 12/16: s up to 0.125, w up to 0.54
    (0.0, 12, 12, False),   # all correct so far: w in [0.75 ** 0.3, 1], wider than 0.05
    (0.0, 2, 12, False),    # never decided before the cap
    (0.0, 2, 16, True),     # the cap
])
def test_late_rule_by_hand(r_early, successes, rollouts, decided):
    assert LATE.decided([successes], rollouts, np.array([r_early]))[0] == decided


EARLY = AdaptiveBudget("early", cap=16, round_size=4, prior=TRAJVAL, tolerance=0.05)


@pytest.mark.parametrize("successes, rollouts, decided", [
    (0, 4, False),      # all wrong so far: the late pass may still lift s to 1
    (4, 4, False),      # all correct so far: r_early >= 4/16, s up to (12/16)^2
    (15, 15, False),    # r_early >= 15/16, yet w can reach (1/16)^(2 * 0.3) = 0.19, above 0.05 + 0.05
    (0, 12, False),     # never decided before the cap
    (0, 16, True),      # the cap
])
def test_early_rule_by_hand(successes, rollouts, decided):
    """Under the paper's w = max(s ** 0.3, 0.05) the early rule stops no row before the cap at a
    tolerance of 0.05 (docs/rollouts.md): a single success of the late pass lifts w far off the floor."""
    assert EARLY.decided([successes], rollouts)[0] == decided


def test_the_early_rule_stops_no_row_before_the_cap_at_the_default_tolerance():
    successes = np.array([k for m in range(16) for k in range(m + 1)])
    rollouts = np.array([m for m in range(16) for _ in range(m + 1)])
    assert not EARLY.decided(successes, rollouts).any()
    # w may still reach 1: 0.95 > 0.9; looser: 0.19 - 0.05 <= 0.2
    assert not AdaptiveBudget("early", 16, 4, prior=TRAJVAL, tolerance=0.9).decided([0], 12)[0]
    assert AdaptiveBudget("early", 16, 4, prior=TRAJVAL, tolerance=0.2).decided([15], 15)[0]


def test_the_weight_range_is_the_weights_at_the_two_ends_of_the_pass_rate():
    low, high = LATE.weight_range([12], 12, np.array([0.0]))
    assert low[0] == pytest.approx(core.sampling_weight([0.75])[0]) and high[0] == pytest.approx(1.0)
    early = AdaptiveBudget("early", cap=16, round_size=4, prior=TRAJVAL)
    low, high = early.weight_range([4], 4)  # 4 of 4 correct: r_early at least 4/16
    assert low[0] == 0.05 and high[0] == pytest.approx(core.sampling_weight([(1 - 4 / 16) ** 2])[0])
    assert early.decided([16], 16)[0] and not early.decided([4], 4)[0]
    looser = AdaptiveBudget("late", 16, 4, prior=TRAJVAL, tolerance=0.1)
    assert looser.decided([12], 12, np.array([0.0]))[0]


def test_a_bad_budget_is_refused():
    with pytest.raises(ValueError, match="round_size"):
        AdaptiveBudget("late", cap=16, round_size=32, prior=TRAJVAL)
    with pytest.raises(ValueError, match="early or the late"):
        AdaptiveBudget("middle", cap=16, round_size=4, prior=TRAJVAL)


def _late_rows():
    from tests.conftest import arithmetic_rows

    rows = arithmetic_rows()[:6]
    for row, rate in zip(rows, (1.0, 1.0, 0.9375, 0.5, 0.0, 0.0)):
        row["trajval_r_early"] = rate
    return rows


def test_an_adaptive_late_pass_skips_exactly_the_rows_the_rule_names_and_reproduces(tmp_path):
    options = dict(window="late", output_key=None, n=8, **ADAPTIVE, round_size=2, max_new_tokens=6,
                   verifier="custom", verifier_options={"function": "tests.test_rollout_budget:odd_length"})
    op = _op(tmp_path, **options)
    out = op.process_batched(_batch(_late_rows()))
    op.release()
    statuses, counts = out["trajval_r_late_status"], out["trajval_r_late_n"]
    assert statuses[:2] == ["skipped_early_saturated"] * 2 and counts[:2] == [0, 0]
    assert out["trajval_r_late"][:2] == [1.0, 1.0]  # no change assumed: s = 0 either way
    assert all(status != "skipped_early_saturated" for status in statuses[2:])
    assert all(c % 2 == 0 and 0 < c <= 8 for c in counts[2:])  # whole rounds, the cap at most
    for rate, status, count in zip(out["trajval_r_late"], statuses, counts):
        if status == "stopped_weight_bounded":
            assert count < 8
    costs = [p["cost"]["completions"] for p in out["trajval_r_late_provenance"]]
    assert costs == counts and out["trajval_r_late_provenance"][0]["budget"]["rule"] == "weight_bounded"
    # the end-of-pass rate counts each row's own rollouts (it said rows x n, 9,600 for 7,668)
    import pyarrow as pa
    from loguru import logger

    said = []
    sink = logger.add(said.append, level="INFO")
    try:
        op.endpoint.finish(pa.Table.from_pydict(out), elapsed_s=1.0)
    finally:
        logger.remove(sink)
    assert any(f"done, {len(counts)} rows, {sum(counts)} rollouts in 1.0 s" in str(m) for m in said)
    again = _op(tmp_path / "other", **options).process_batched(_batch(_late_rows()))  # no cache shared
    assert json.dumps(again, sort_keys=True, default=str) == json.dumps(out, sort_keys=True, default=str)


def odd_length(completion, ground_truth, row):
    return float(len(completion) % 2)


def always_right(completion, ground_truth, row):
    return 1.0


def test_copies_of_a_task_with_other_early_rates_are_decided_each_on_its_own(tmp_path):
    """Repeated rows share their rollouts; in an adaptive late pass copies whose early rates differ
    (a reused early pass, merged pools) were one task, so the second copy got the first's decision:
    skipped as saturated and written at its own early rate 0.0 (s = 0, the floor) where measuring it
    gives 1.0 (s = 1)."""
    task = {"prompt": "What is 2+2?", "reward_model": {"ground_truth": "4"}}
    rows = [{"id": "a", **task, "trajval_r_early": 1.0}, {"id": "b", **task, "trajval_r_early": 0.0}]
    options = dict(window="late", output_key=None, n=8, **ADAPTIVE, round_size=2, verifier="custom",
                   verifier_options={"function": "tests.test_rollout_budget:always_right"})
    both = _op(tmp_path / "both", **options)
    out = both.process_batched(_batch(rows))
    both.release()
    alone = _op(tmp_path / "alone", **options)
    b_alone = alone.process_batched(_batch(rows[1:]))
    alone.release()
    assert out["trajval_r_late_status"][0] == "skipped_early_saturated"
    assert b_alone["trajval_r_late"] == [1.0]
    assert [out[key][1] for key in ("trajval_r_late", "trajval_r_late_n", "trajval_r_late_status")] == [
        b_alone[key][0] for key in ("trajval_r_late", "trajval_r_late_n", "trajval_r_late_status")]


def never_right(completion, ground_truth, row):
    return 0.0


def test_a_cut_prompt_is_said_when_its_row_stops_early(tmp_path):
    """An adaptive row whose prompt ``truncate_left`` cut was written ``stopped_weight_bounded``
    when it stopped before the cap, so the pass's count of cut prompts left it out."""
    import shutil

    from trajval_ops.models import resolve_model

    short = tmp_path / "short-context"
    shutil.copytree(resolve_model("tiny-random-llama"), short)
    config = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps(config | {"max_position_embeddings": 60}))
    long = {"id": "long", "prompt": "What is " + " + ".join(["1"] * 40) + "?",
            "reward_model": {"ground_truth": "40"}, "trajval_r_early": 0.9}
    rows = [long, {"id": "short", "prompt": "1+1?", "reward_model": {"ground_truth": "2"}, "trajval_r_early": 0.9}]
    op = _op(tmp_path, model=str(short), overlong_prompt="truncate_left", max_new_tokens=4, window="late",
             output_key=None, n=8, round_size=2, **ADAPTIVE, verifier="custom",
             verifier_options={"function": "tests.test_rollout_budget:never_right"})
    out = op.process_batched(_batch(rows))
    op.release()
    assert out["trajval_r_late_n"] == [2, 2]  # both stop after one round: s = 0 is certain
    assert out["trajval_r_late_status"] == ["truncated_prompt", "stopped_weight_bounded"]


def test_a_resumed_adaptive_pass_writes_the_uninterrupted_bytes(tmp_path):
    options = dict(window="late", output_key=None, n=8, **ADAPTIVE, round_size=2, max_new_tokens=6,
                   prompts_per_generate=2, verifier="custom",
                   verifier_options={"function": "tests.test_rollout_budget:odd_length"})
    full = _op(tmp_path, **options)
    uninterrupted = full.process_batched(_batch(_late_rows()))
    full.release()
    [log] = list((tmp_path / "rollouts").rglob("results-*.jsonl"))
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:1]) + lines[1][:30])  # killed while writing the second record
    resumed_op = _op(tmp_path, **options)
    resumed = resumed_op.process_batched(_batch(_late_rows()))
    resumed_op.release()
    assert json.dumps(resumed, sort_keys=True, default=str) == json.dumps(uninterrupted, sort_keys=True, default=str)


def test_an_adaptive_pass_killed_mid_round_resumes_to_the_uninterrupted_bytes(tmp_path):
    """Two batches of the pool: the first finishes (its rounds cached), a kill -9 strikes in the
    second batch's second round; a rerun on the same cache writes the bytes of a run never killed
    (the adaptive pass caches a batch once its rounds end, so the cut batch is sampled again)."""
    options = dict(model="tiny-random-llama", engine="transformers", window="late", output_key=None, n=8,
                   **ADAPTIVE, round_size=2, max_new_tokens=6, prompts_per_generate=2, seed=3,
                   verifier="custom", verifier_options={"function": "tests.test_rollout_budget:odd_length"})
    rows = _late_rows()[2:] + _late_rows()[2:]  # rows 1-2 (early rate 1) are skipped by the rule
    for i, row in enumerate(rows):
        row["id"] = f"adaptive-{i}"
        row["prompt"] = f"{row['prompt']} (copy {i})"

    def run(op, batches):
        outputs = [op.process_batched(_batch(batch)) for batch in batches]
        op.release()
        return {key: [v for out in outputs for v in out[key]] for key in outputs[0]}

    batches = [rows[:4], rows[4:]]
    uninterrupted = run(TrajvalEndpointRewardMapper(**options, cache_dir=str(tmp_path / "uninterrupted")), batches)
    assert max(uninterrupted["trajval_r_late_n"]) > 2  # some rows went past the first round

    pool, cache = write_jsonl(tmp_path / "pool.jsonl", rows), tmp_path / "killed"
    # generate calls of a batch: per round, its rows still active (n > 2 k) two at a time
    calls = [[-(-sum(1 for n in got if n > 2 * k) // 2) for k in range(4)]
             for got in (uninterrupted["trajval_r_late_n"][:4], uninterrupted["trajval_r_late_n"][4:])]
    assert calls[1][1] > 0  # the second batch has a second round to cut
    kill_at = f"round_call:{sum(calls[0]) + calls[1][0] + 1}"  # the second batch, its second round's first call
    worker = subprocess.run([sys.executable, str(Path(__file__).with_name("resume_worker.py")), str(pool), str(cache),
                             json.dumps(options), kill_at, "4"], cwd=REPO, capture_output=True, text=True,
                            timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})  # the verifier lives in tests/
    assert worker.returncode == -signal.SIGKILL, worker.stderr[-2000:]
    records = [line for log in cache.rglob("results-*.jsonl") for line in log.read_text().splitlines()]
    assert len(records) == 4  # the first batch cached, nothing of the cut one

    resumed_op = TrajvalEndpointRewardMapper(**options, cache_dir=str(cache))
    resumed = run(resumed_op, batches)
    assert json.dumps(resumed, sort_keys=True, default=str) == json.dumps(uninterrupted, sort_keys=True, default=str)
    assert resumed_op.endpoint.stats["completions"] == sum(uninterrupted["trajval_r_late_n"][4:])  # only the cut batch again


def test_adaptive_budget_needs_a_window_and_sampling(tmp_path):
    with pytest.raises(ValueError, match="set window"):
        _op(tmp_path, budget="adaptive")
    with pytest.raises(ValueError, match="greedy decoding .temperature 0. gives every round the same completion"):
        _op(tmp_path, window="late", output_key=None, **ADAPTIVE, temperature=0)  # refused when built


def test_adaptive_budget_is_refused_for_one_checkpoint_of_a_window(tmp_path):
    """A window's mean decides the weight: one checkpoint's pass cannot bound it (a checkpoint at
    0 of 8 stopped, its unsampled rollouts still moving the mean; measured off by up to 0.44)."""
    with pytest.raises(ValueError, match="checkpoint 1 of a late window, whose mean decides the weight"):
        _op(tmp_path, window="late", window_index=1, output_key=None, **ADAPTIVE)


def test_a_changed_early_pass_gets_the_fresh_runs_late_pass_from_a_shared_cache(tmp_path):
    """The cache key of an adaptive late pass holds the early pass rates its stopping rule read
    (issue 36, item 1): a rerun on the same cache after the early pass changed writes what a run
    on a fresh cache writes, and a skipped row's pass rate is its current early rate, not the one
    cached with it."""
    options = dict(window="late", output_key=None, n=8, **ADAPTIVE, round_size=2, max_new_tokens=6,
                   prompts_per_generate=2, verifier="custom",
                   verifier_options={"function": "tests.test_rollout_budget:odd_length"})
    first_rows, changed_rows = _late_rows(), _late_rows()
    for row, rate in zip(changed_rows, (0.75, 1.0, 0.5, 0.625, 1.0, 0.0)):  # another early pass
        row["trajval_r_early"] = rate

    def late_pass(cache, rows):
        op = _op(cache, **options)
        out = op.process_batched(_batch(rows))
        op.release()
        return json.dumps(out, sort_keys=True, default=str)

    late_pass(tmp_path / "shared", first_rows)
    on_shared_cache = late_pass(tmp_path / "shared", changed_rows)
    fresh = late_pass(tmp_path / "fresh", changed_rows)
    assert on_shared_cache == fresh
    out = json.loads(fresh)
    assert out["trajval_r_late_status"][4] == "skipped_early_saturated" and out["trajval_r_late"][4] == 1.0
    assert out["trajval_r_late_status"][0] != "skipped_early_saturated"  # early 0.75 now: sampled
    records = [json.loads(line) for log in (tmp_path / "shared").rglob("results-*.jsonl")
               for line in log.read_text().splitlines()]
    assert records and not any("pass_rate" in record for record in records)  # no input stored as an output


def test_an_early_pass_whose_tolerance_decides_every_row_samples_one_round_and_ends(tmp_path):
    """Issue 36, item 7: a tolerance as wide as the weight's range (>= 1 - eps) decided every row
    of an early pass before its first round and then crashed; each row now takes one round and
    stops there, its pass rate k / round_size, status stopped_weight_bounded."""
    assert not AdaptiveBudget("early", 16, 4, prior=TRAJVAL, tolerance=0.96).decided([0], 0)[0]
    assert AdaptiveBudget("early", 16, 4, prior=TRAJVAL, tolerance=0.96).decided([0], 4)[0]
    saturated = np.array([1.0])  # s = 0 for sure
    assert AdaptiveBudget("late", 16, 4, prior=TRAJVAL, tolerance=0.96).decided([0], 0, saturated)[0]
    assert not AdaptiveBudget("late", 16, 4, prior=TRAJVAL, tolerance=0.96).decided([0], 0, np.array([0.9375]))[0]
    op = _op(tmp_path, window="early", output_key=None, n=8, **ADAPTIVE, round_size=2, max_new_tokens=6,
             weight_tolerance=0.96, verifier="custom",
             verifier_options={"function": "tests.test_rollout_budget:odd_length"})
    out = op.process_batched(_batch(_late_rows()))
    op.release()
    assert out["trajval_r_early_n"] == [2] * 6 and set(out["trajval_r_early_status"]) == {"stopped_weight_bounded"}
    assert all(rate in (0.0, 0.5, 1.0) for rate in out["trajval_r_early"])


def _budget_recipe(tmp_path, rows, early: dict, late: dict | None, learnability: dict) -> dict:
    endpoint = dict(model="tiny-arith", engine="transformers", temperature=1.0, max_new_tokens=8,
                    prompts_per_generate=64, verifier="math", verifier_options={"fallback_last_number": True},
                    cache_dir=str(tmp_path / "rollouts"))
    process = [{"trajval_endpoint_reward_mapper": endpoint | {"window": "early", "seed": 0} | early}]
    if late is not None:
        process.append({"trajval_endpoint_reward_mapper": endpoint | {"window": "late", "seed": 1} | late})
    process.append({"trajval_learnability_mapper": learnability})
    return {"dataset_path": str(write_jsonl(tmp_path / "pool.jsonl", rows)), "export_path": str(tmp_path / "out.jsonl"),
            "np": 1, "text_keys": None, "skip_op_error": False, "open_tracer": False, "op_fusion": False,
            "process": process}


def _stopped_rows_are_pinned(out: list[dict], key: str, cap: int, tolerance: float, prior, r_early=None) -> int:
    """Each stopped row's written weight, whatever its rollouts left would have given, moves by at
    most the tolerance; returns how many rows stopped before the cap."""
    stopped = 0
    for i, row in enumerate(out):
        got = row[f"{key}_n"]
        if row[f"{key}_status"] != "stopped_weight_bounded":
            continue
        stopped += 1
        k = round(row[key] * got)
        interval = (np.array([k / cap]), np.array([(k + cap - got) / cap]))
        if r_early is None:
            low, high = prior.weight_range(interval)
        else:
            early = np.array([r_early[i]])
            low, high = prior.weight_range((early, early), interval)
        assert high[0] - low[0] <= tolerance + 1e-12, (row["id"], k, got, low, high)
    return stopped


def test_the_budget_bounds_the_weight_the_recipe_writes(tmp_path):
    """Issue 34: the adaptive budget bounded TrajVal's paper weight (alpha 0.3, eps 0.05) whatever
    the recipe wrote. Through dj-process it now bounds the recipe's own prior: with ``prior:
    variance`` an adaptive early pass stops only rows whose variance weight is pinned, and with
    ``alpha: 0.5`` an adaptive late pass only rows whose alpha-0.5 weight is pinned; the pass's
    provenance names the prior."""
    from tests.conftest import dj_process, read_jsonl
    from trajval_ops.priors import TrajVal, Variance

    pool = [json.loads(line) for line in (REPO / "trajval_ops" / "data" / "demo_arith_pool.jsonl").read_text()
            .splitlines()[:96]]
    adaptive = {"n": 16, "budget": "adaptive", "round_size": 4, "weight_tolerance": 0.3}
    recipe = _budget_recipe(tmp_path, pool, adaptive, None, {"prior": "variance"})
    result = dj_process(recipe, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = read_jsonl(tmp_path / "out.jsonl")
    assert out[0]["trajval_r_early_provenance"]["budget"]["weight_prior"] == {"prior": "variance", "eps": 0.05}
    assert _stopped_rows_are_pinned(out, "trajval_r_early", 16, 0.3, Variance()) > 0

    rates = [0.0, 0.125, 0.25, 0.5, 0.75]
    for i, row in enumerate(pool):
        row["base_rate"] = rates[i % len(rates)]
    (tmp_path / "out.jsonl").unlink()
    recipe = _budget_recipe(tmp_path, pool, {"reuse_key": "base_rate", "reuse_n": 16},
                            {"n": 16, "budget": "adaptive", "round_size": 4, "weight_tolerance": 0.1},
                            {"alpha": 0.5, "eps": 0.05})
    result = dj_process(recipe, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = read_jsonl(tmp_path / "out.jsonl")
    budget = out[0]["trajval_r_late_provenance"]["budget"]
    assert (budget["alpha"], budget["eps"]) == (0.5, 0.05)  # TrajVal's paper weight: its alpha and eps
    assert _stopped_rows_are_pinned(out, "trajval_r_late", 16, 0.1, TrajVal(alpha=0.5),
                                    [row["base_rate"] for row in pool]) > 0


def test_a_pass_not_told_its_prior_or_told_another_is_refused(tmp_path):
    """An adaptive pass outside a recipe with a learnability mapper must be told the prior; one
    told another prior than the recipe writes, or a late pass under a one-pass prior, is refused."""
    from tests.conftest import dj_process

    with pytest.raises(ValueError, match="not told which prior that is"):
        _op(tmp_path, window="late", output_key=None, budget="adaptive")
    with pytest.raises(ValueError, match="the variance prior reads no late pass"):
        _op(tmp_path, window="late", output_key=None, budget="adaptive", budget_prior={"prior": "variance"})
    with pytest.raises(ValueError, match="make a row's weight depend on the whole pool's"):
        _op(tmp_path, window="late", output_key=None, budget="adaptive",
            budget_prior={"prior": "trajval", "estimator": "posterior"})
    pool = [json.loads(line) for line in (REPO / "trajval_ops" / "data" / "demo_arith_pool.jsonl").read_text()
            .splitlines()[:8]]
    recipe = _budget_recipe(tmp_path, pool, {"n": 4, "budget": "adaptive", "budget_prior": {"prior": "trajval"}}, None,
                            {"prior": "variance"})
    result = dj_process(recipe, tmp_path)
    assert result.returncode == 2 and "is not the prior the recipe's trajval_learnability_mapper (process[1]) " \
                                      "writes" in result.stderr


def test_a_pool_whose_adaptive_pass_bounded_another_priors_weight_is_refused_where_it_is_scored(tmp_path):
    """Issue 57: an early pass told ``budget_prior: variance``, its pool then scored with ``prior:
    trajval`` by another recipe, was not compared (exit 0, no warning; 6 of 48 stopped rows' TrajVal
    weights could still move by 0.51-0.66, beyond the tolerance 0.5). The learnability mapper reads
    the budget every row's pass provenance records (a pool concatenated from a fixed pass's rows and
    an adaptive pass's) and refuses a prior, or settings, other than the one it writes, naming both;
    the prior the budget bounded scores the pool."""
    import pyarrow as pa

    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.ops.learnability_mapper import TrajvalLearnabilityMapper
    from trajval_ops.priors import Variance
    from trajval_ops.rollout.budget import recorded_prior_spec

    rows = _late_rows()
    fixed = _op(tmp_path, window="early", output_key=None, n=4, temperature=1.0)
    adaptive = _op(tmp_path, window="early", output_key=None, n=8, budget="adaptive", round_size=2,
                   weight_tolerance=0.5, budget_prior={"prior": "variance"}, temperature=1.0)
    scored = []
    for op, part in ((fixed, rows[:3]), (adaptive, rows[3:])):  # the fixed pass's rows first
        out = op.process_batched(_batch([{k: v for k, v in row.items() if k != "trajval_r_early"} for row in part]))
        op.release()
        scored += [dict(zip(out, values)) | {"trajval_r_late": 0.5} for values in zip(*out.values())]
    table = pa.Table.from_pylist(scored)
    assert scored[0]["trajval_r_early_provenance"].get("budget") is None
    with pytest.raises(TrajvalInputError, match=r"trajval_learnability_mapper: the adaptive pass behind trajval_r_early "
                                                r"stopped rows on the weight of \{'prior': 'variance', 'eps': 0.05\}, "
                                                r"as its provenance records it, and this mapper writes the weight of "
                                                r"\{'prior': 'trajval', "):
        TrajvalLearnabilityMapper(prior="trajval").score_pool(table)
    assert TrajvalLearnabilityMapper(prior="variance").score_pool(table).num_rows == 6
    # the budget's record names the prior it bounded, TrajVal's paper weight by its alpha and eps
    for prior in (TRAJVAL, TrajVal(alpha=0.5), Variance(eps=0.1)):
        assert recorded_prior_spec(AdaptiveBudget("early", 8, 2, prior=prior).as_dict()) == prior.spec()
    assert recorded_prior_spec({"budget": "fixed"}) is None and recorded_prior_spec(None) is None


def test_a_recipe_whose_mappers_read_an_adaptive_pass_by_two_priors_is_refused_before_it_runs():
    """Issue 57: the pass was told the prior of the first learnability mapper after it, whichever
    field that mapper read; a later mapper scoring the same pass by another prior (``overwrite:
    true``) was not compared. Every mapper that reads the pass is now; one that reads other fields
    tells it nothing."""
    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.recipe import budget_priors

    early = ("trajval_endpoint_reward_mapper", {"window": "early", "budget": "adaptive"})
    late = ("trajval_endpoint_reward_mapper", {"window": "late"})
    variance, trajval = {"prior": "variance"}, {"prior": "trajval", "overwrite": True}
    with pytest.raises(TrajvalInputError, match=r"trajval_r_early \(process\[0\]\): the recipe's "
                                                r"trajval_learnability_mapper entries process\[2\] and process\[3\] read "
                                                r"this adaptive pass and write different priors, \{'prior': "
                                                r"'variance', 'eps': 0.05\} and \{'prior': 'trajval', "):
        budget_priors([early, late, ("trajval_learnability_mapper", variance), ("trajval_learnability_mapper", trajval)])
    other_fields = {"prior": "variance", "r_early_key": "other_rate"}
    assert budget_priors([early, late, ("trajval_learnability_mapper", other_fields),
                          ("trajval_learnability_mapper", trajval)]) == {0: TRAJVAL.spec()}
    assert budget_priors([early, ("trajval_learnability_mapper", variance)]) == {0: {"prior": "variance", "eps": 0.05}}
