"""The miniature regime's task suite: seeded, evenly spread, verifiable, disjoint splits."""

import json
from collections import Counter

import pytest

from trajval_ops.pools.identity import PROMPT_HASH, TASK_ID, prompt_hash
from trajval_ops.regime import tasks
from trajval_ops.regime.tasks import (DATA_SOURCE, FAMILIES, QUESTION_CHARS, VERIFIER, generate_tasks, make_split,
                                      pretraining_pair, question_of, question_part)


@pytest.fixture(scope="module")
def verifier():
    from trajval_ops.rollout.verifiers import build_verifier

    name, options = VERIFIER
    built = build_verifier(name, **options)
    yield built
    built.close()


@pytest.fixture(scope="module")
def sample_rows():
    return generate_tasks(20 * len(FAMILIES), seed=11)


def test_at_least_ten_families_of_short_questions(sample_rows):
    assert len(FAMILIES) >= 10
    assert set(Counter(r["family"] for r in sample_rows)) == set(FAMILIES)
    for row in sample_rows:
        question, answer = question_of(row), row["reward_model"]["ground_truth"]
        assert len(question) <= 20 and 1 <= len(answer) <= 5, row
        assert set(question + answer) <= QUESTION_CHARS, row


def test_same_seed_same_rows_other_seed_other_rows():
    assert generate_tasks(120, seed=3) == generate_tasks(120, seed=3)
    assert generate_tasks(120, seed=3) != generate_tasks(120, seed=4)
    # a family's stream does not depend on which other families are asked for
    alone = [question_of(r) for r in generate_tasks(10, seed=3, families=["add2"])]
    mixed = [question_of(r) for r in generate_tasks(20, seed=3, families=["add2", "max"]) if r["family"] == "add2"]
    assert sorted(alone) == sorted(mixed)


def test_rows_spread_evenly_without_duplicates_and_skip_excluded(sample_rows):
    counts = Counter(r["family"] for r in generate_tasks(245, seed=5))
    assert max(counts.values()) - min(counts.values()) <= 1 and sum(counts.values()) == 245
    questions = [question_of(r) for r in sample_rows]
    assert len(set(questions)) == len(questions)
    excluded = set(questions[:100])
    again = generate_tasks(len(sample_rows), seed=11, exclude=excluded)
    assert not excluded & {question_of(r) for r in again}
    assert len(again) == len(sample_rows)


def test_a_small_family_that_runs_out_gives_its_share_to_the_others():
    # add1 has 900 questions, about half of them in the RL half
    rows = generate_tasks(1000, seed=0, families=["add1", "max"])
    counts = Counter(r["family"] for r in rows)
    assert len(rows) == 1000 and 400 < counts["add1"] < 500
    with pytest.raises(ValueError, match="fewer than"):
        generate_tasks(1000, seed=0, families=["add1"])
    with pytest.raises(ValueError, match="unknown"):
        generate_tasks(10, seed=0, families=["nope"])


def test_row_format(sample_rows):
    for index, row in enumerate(sample_rows):
        assert row["prompt"] == [{"role": "user", "content": question_of(row)}]
        assert row["reward_model"] == {"style": "rule", "ground_truth": row["reward_model"]["ground_truth"]}
        assert isinstance(row["reward_model"]["ground_truth"], str)
        assert row["extra_info"] == {"index": index, "family": row["family"]}
        assert row["id"] == f"{row['family']}-11-{index}" == row[TASK_ID]
        assert row["data_source"] == DATA_SOURCE
        assert row[PROMPT_HASH] == prompt_hash(row["prompt"])
    json.dumps(sample_rows)  # plain JSON


def test_every_ground_truth_verifies_and_a_wrong_answer_fails(sample_rows, verifier):
    for row in sample_rows:
        truth = row["reward_model"]["ground_truth"]
        assert truth == "0" or not truth.startswith("0"), row  # numeric checks see no leading zeros
        assert verifier.truth_problem(truth) is None
        assert verifier(truth, truth, row) == 1.0, row
        wrong = str(int(truth) + 1)
        assert verifier(wrong, truth, row) == 0.0, row
        if len(truth) > 1:  # a digit dropped or two digits swapped (reversal and sorting)
            assert verifier(truth[:-1], truth, row) == 0.0, row
            swapped = truth[1] + truth[0] + truth[2:]
            assert verifier(swapped, truth, row) == float(swapped == truth), row
    assert verifier("", "5") == 0.0


def test_answers_are_right():
    import random

    rng = random.Random(0)
    for _ in range(50):
        q, a = FAMILIES["add3"](rng)
        assert str(eval(q)) == a
        q, a = FAMILIES["mod"](rng)
        assert str(eval(q)) == a
        q, a = FAMILIES["sort_digits"](rng)
        assert a == "".join(sorted(q.split()[1])) and "0" not in a
        q, a = FAMILIES["reverse"](rng)
        assert a == q.split()[1][::-1] and "0" not in a
        q, a = FAMILIES["count_digit"](rng)
        _, digit, _, text = q.split()
        assert a == str(text.count(digit))
        q, a = FAMILIES["sub2"](rng)
        assert int(a) == eval(q) >= 0


def test_splits_are_disjoint_and_from_the_rl_half():
    split = make_split(300, 120, seed=2, tuning_size=60)
    assert {k: len(v) for k, v in split.items()} == {"pool": 300, "heldout": 120, "tuning": 60}
    questions = {name: {question_of(r) for r in rows} for name, rows in split.items()}
    assert not questions["pool"] & questions["heldout"]
    assert not questions["pool"] & questions["tuning"]
    assert not questions["heldout"] & questions["tuning"]
    ids = [r["id"] for rows in split.values() for r in rows]
    assert len(ids) == len(set(ids))
    assert all(question_part(q) == "rl" for qs in questions.values() for q in qs)
    # the held-out set of a seed does not depend on the pool size
    assert make_split(50, 120, seed=2)["heldout"] == split["heldout"]
    assert "tuning" not in make_split(50, 20, seed=2)


def test_pretraining_draws_only_from_the_other_half():
    import random

    rng = random.Random(0)
    for family in FAMILIES:
        for _ in range(20):
            question, _ = pretraining_pair(rng, family)
            assert question_part(question) == "pretrain"
    shares = Counter(question_part(question_of(r)) for r in generate_tasks(600, seed=0, part=None))
    assert 0.4 < shares["rl"] / 600 < 0.6


def test_cli_writes_the_splits(tmp_path, capsys):
    from tests.conftest import read_jsonl

    assert tasks.main(["--pool-size", "48", "--heldout-size", "24", "--tuning-size", "12", "--seed", "1",
                       "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heldout.jsonl", "pool.jsonl", "tuning.jsonl"]
    assert read_jsonl(tmp_path / "pool.jsonl") == make_split(48, 24, 1, 12)["pool"]
    assert "pool\t48" in capsys.readouterr().out


def test_rows_are_accepted_by_the_probe_trainer(sample_rows):
    from trajval_ops.probe.config import ProbeConfig
    from trajval_ops.probe.run import probe_examples

    name, options = VERIFIER
    config = ProbeConfig(model="tiny-arith", verifier=name, verifier_options=options)
    examples = probe_examples(sample_rows[:12], config)
    assert examples[0]["messages"] == sample_rows[0]["prompt"]
