"""Generated reasoning-gym pools: seeded, mixed difficulty, ground truths that verify."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym")

from trajval_ops.pools.generate import (  # noqa: E402
    FAMILIES, PRESETS, bucket_counts, check_row, generate_pool, parse_mix)
from trajval_ops.pools.identity import PROMPT_HASH, TASK_ID, prompt_hash  # noqa: E402
from trajval_ops.pools.io import read_rows  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import make_pool  # noqa: E402

#: The demo pools shipped in trajval_ops/data and the make_pool arguments that produce them
#: (docs/pools.md quotes the same commands).
DEMO_POOLS = {
    "demo_math_pool.jsonl": ["--preset", "math", "--size", "48", "--seed", "0"],
    "demo_logic_pool.jsonl": ["--preset", "logic", "--size", "64", "--seed", "0"],
}
EASY_SINGLE_OPERATION = {("basic_arithmetic", "easy"), ("chain_sum", "easy"), ("products", "easy")}


@pytest.fixture(scope="module")
def math_pool():
    return generate_pool(PRESETS["math"], 60, seed=11)


@pytest.fixture(scope="module")
def logic_pool():
    return generate_pool(PRESETS["logic"], 40, seed=11)


def test_same_seed_same_pool_other_seed_other_pool(math_pool):
    assert generate_pool(PRESETS["math"], 60, seed=11) == math_pool
    other = generate_pool(PRESETS["math"], 60, seed=12)
    assert [r[PROMPT_HASH] for r in other] != [r[PROMPT_HASH] for r in math_pool]


def test_rows_are_verl_format_with_family_difficulty_and_unique_ids(math_pool, logic_pool):
    for pool, domain in ((math_pool, "math"), (logic_pool, "logic")):
        assert len({r[TASK_ID] for r in pool}) == len(pool)
        assert len({r[PROMPT_HASH] for r in pool}) == len(pool)
        for row in pool:
            assert row["ability"] == domain
            assert row["prompt"][0]["role"] == "user" and row["prompt"][0]["content"]
            assert isinstance(row["reward_model"]["ground_truth"], str) and row["reward_model"]["ground_truth"]
            info = row["extra_info"]
            assert info["index"] == row[TASK_ID]
            assert info["family"] in FAMILIES and info["difficulty"] in FAMILIES[info["family"]].tiers
            assert row[PROMPT_HASH] == prompt_hash(row["prompt"])
        assert len({r["extra_info"]["difficulty"] for r in pool}) == 3  # easy, medium and hard


def test_math_preset_is_mostly_easy_single_operation_arithmetic():
    counts = bucket_counts(PRESETS["math"], 128)
    assert sum(counts.values()) == 128
    easy = sum(n for bucket, n in counts.items() if bucket in EASY_SINGLE_OPERATION)
    assert easy / 128 >= 0.35
    assert all(n > 0 for n in counts.values())


def test_easy_arithmetic_really_is_one_operation_on_one_digit_numbers(math_pool):
    import re

    easy = [r for r in math_pool if (r["extra_info"]["family"], r["extra_info"]["difficulty"]) in EASY_SINGLE_OPERATION]
    assert easy
    for row in easy:
        question = row["prompt"][0]["content"].split("\n\n")[0]
        operands = re.findall(r"(?<![\d.])(\d+) [-+*] (\d+)(?!\.?\d)", question)
        assert len(operands) == 1, question  # one operation
        assert all(int(x) <= 10 for x in operands[0]), question  # small numbers
        assert abs(int(row["reward_model"]["ground_truth"])) <= 100


def test_ground_truths_pass_reasoning_gym_score_answer(math_pool, logic_pool):
    assert all(check_row(row) == 1.0 for row in math_pool + logic_pool)
    wrong = json.loads(json.dumps(logic_pool[0]))
    wrong["reward_model"]["ground_truth"] = "certainly not the answer"
    assert check_row(wrong) == 0.0


def test_ground_truths_pass_math_verify(math_pool):
    from math_verify import parse, verify

    for row in math_pool:
        truth = row["reward_model"]["ground_truth"]
        assert verify(parse(f"${truth}$"), parse(f"so \\boxed{{{truth}}}")), row[TASK_ID]


def test_ground_truths_pass_the_project_verifiers(math_pool, logic_pool):
    verifiers = pytest.importorskip("trajval_ops.rollout.verifiers")
    math_verifier = verifiers.build_verifier("math")
    tag_verifier = verifiers.build_verifier("answer_tag")
    for row in math_pool:
        truth = row["reward_model"]["ground_truth"]
        assert math_verifier(f"Step by step... so \\boxed{{{truth}}}", truth, row) == 1.0, row[TASK_ID]
    for row in logic_pool:
        truth = row["reward_model"]["ground_truth"]
        assert tag_verifier(f"I think <answer>{truth}</answer>", truth, row) == 1.0, row[TASK_ID]
    assert math_verifier("\\boxed{123456789}", math_pool[0]["reward_model"]["ground_truth"], math_pool[0]) == 0.0


def test_mix_errors():
    with pytest.raises(ValueError, match="unknown family"):
        generate_pool(parse_mix("no_such/easy=1"), 5, 0)
    with pytest.raises(ValueError, match="no tier"):
        generate_pool(parse_mix("gsm_symbolic/easy=1"), 5, 0)
    with pytest.raises(ValueError, match="different verifiers"):
        generate_pool(parse_mix("chain_sum/easy=1,syllogism/easy=1"), 5, 0)
    with pytest.raises(ValueError, match="unique prompts"):
        generate_pool(parse_mix("products/easy=1"), 101, 0)  # only 100 one-digit products exist


def test_bucket_counts_do_not_depend_on_the_order_the_mix_lists_its_buckets():
    """The same --mix in another order gives the same counts (splits.json records the mix
    sorted): the shares are exact, so equal remainders are not split by float noise."""
    import itertools

    mix = parse_mix("basic_arithmetic/easy=0.4,chain_sum/easy=0.3,products/easy=0.15,chain_sum/two_digit=0.15")
    for size in (4, 16, 30, 64, 128, 256):
        counts = bucket_counts(dict(sorted(mix.items())), size)
        for order in itertools.permutations(mix):
            assert bucket_counts({bucket: mix[bucket] for bucket in order}, size) == counts, (size, order)
    # equal remainders go to the buckets in name order
    assert bucket_counts(parse_mix("products/easy=0.15,chain_sum/two_digit=0.15"), 1) == {
        ("chain_sum", "two_digit"): 1, ("products", "easy"): 0}
    with pytest.raises(ValueError, match="finite number > 0"):
        bucket_counts(parse_mix("chain_sum/easy=inf"), 4)


@pytest.mark.parametrize("name", sorted(DEMO_POOLS))
def test_shipped_demo_pool_is_what_the_documented_command_makes(tmp_path, name):
    out = tmp_path / name
    assert make_pool.main([*DEMO_POOLS[name], "--out", str(out)]) == 0
    shipped = REPO / "trajval_ops" / "data" / name
    assert out.read_bytes() == shipped.read_bytes()


def test_demo_pools_are_small_and_load_as_a_dataset():
    from datasets import Dataset

    paths = [REPO / "trajval_ops" / "data" / name for name in DEMO_POOLS]
    assert sum(p.stat().st_size for p in paths) < 200_000
    for path in paths:
        dataset = Dataset.from_json(str(path))
        assert len(dataset) == len(list(read_rows(path)))
        assert {"prompt", "reward_model", "extra_info", TASK_ID} <= set(dataset.column_names)


def test_cli_check_flags_a_wrong_ground_truth(tmp_path, logic_pool):
    rows = json.loads(json.dumps(logic_pool[:3]))
    rows[2]["reward_model"]["ground_truth"] = "wrong"
    path = tmp_path / "pool.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert make_pool.main(["--check", str(path)]) == 1


def test_cli_check_of_a_pool_it_cannot_check_is_one_message(tmp_path, capsys):
    # a missing file, bad JSON, a pool make-pool did not generate: exit 2 and one line, no traceback
    (tmp_path / "bad.jsonl").write_text('{"id": 1\n')
    (tmp_path / "other.jsonl").write_text(json.dumps({"id": "t1", "prompt": [{"role": "user", "content": "1+1"}],
                                                      "reward_model": {"ground_truth": "2"},
                                                      "extra_info": {"index": "t1"}}) + "\n")
    for name, message in (("missing.jsonl", "pool file not found"), ("bad.jsonl", "not valid JSON"),
                          ("other.jsonl", "row 0 (id='t1') is not a row trajval make-pool generated")):
        assert make_pool.main(["--check", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"make_pool: error: --check {tmp_path / name}: ") and message in err, err


def _with_refused_config(row: dict) -> dict:
    """``row`` with a generator config reasoning-gym refuses by ``assert`` (min_terms > max_terms)."""
    row = json.loads(json.dumps(row))
    generator = json.loads(row["extra_info"]["generator"])
    generator["config"].update(min_terms=5, max_terms=2)
    row["extra_info"]["generator"] = json.dumps(generator)
    return row


def test_a_generator_config_reasoning_gym_refuses_is_a_bad_row_not_a_crash(tmp_path, capsys, math_pool):
    # reasoning-gym validates a config with assert: --check names the row (exit 2), --exclude counts it
    row = _with_refused_config(next(r for r in math_pool if r["extra_info"]["family"] == "basic_arithmetic"))
    path = tmp_path / "refused.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert make_pool.main(["--check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a row trajval make-pool generated" in err
    assert "reasoning-gym refuses its generator config: max_terms must be >= min_terms" in err, err
    out = tmp_path / "out"
    assert make_pool.main(["--mix", "leg_counting/easy=1", "--splits", "a=4", "--out", str(out),
                           "--exclude", str(path)]) == 0
    shared = json.loads((out / "splits.json").read_text())["shared_problems"]
    assert shared["excluded_rows_not_regenerated"] == 1
