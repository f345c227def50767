"""Difficulty columns public pools already carry, read as the early pass (issue 35, item 1): each
preset against fixture rows in its pool's own schema (from its card; the hubs are not reachable
here), every form's range named by row and field, and what the reused pass says it came from."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from tests.conftest import REPO, dj_process, read_jsonl
from trajval_ops.errors import TrajvalInputError
from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper


def _prompt(i):
    return [{"role": "user", "content": f"What is {i} + {i}?"}]


def big_math(values):  # SynthLabsAI/Big-Math-RL-Verified
    return [{"problem": f"What is {i} + {i}?", "answer": str(2 * i), "source": "fixture", "domain": ["Algebra"],
             "llama8b_solve_rate": v, "task_id": f"bm-{i}"} for i, v in enumerate(values)]


def polaris(values):  # POLARIS-Project/Polaris-Dataset-53K
    return [{"problem": f"What is {i} + {i}?", "answer": str(2 * i), "difficulty": v, "task_id": f"po-{i}"}
            for i, v in enumerate(values)]


def skywork(values, size="7B"):  # Skywork/Skywork-OR1-RL-Data
    return [{"data_source": "fixture", "prompt": _prompt(i), "reward_model": {"ground_truth": str(2 * i)},
             "extra_info": {"index": i, "model_difficulty": {"DeepSeek-R1-Distill-Qwen-1.5B": 2,
                                                             f"DeepSeek-R1-Distill-Qwen-{size}": v,
                                                             "DeepSeek-R1-Distill-Qwen-32B": 15}}}
            for i, v in enumerate(values)]


def guru(values):  # LLM360/guru-RL-92k
    return [{"data_source": "math", "prompt": _prompt(i), "reward_model": {"ground_truth": str(2 * i)},
             "extra_info": {"index": i}, "qwen2.5_7b_pass_rate": v, "qwen3_30b_pass_rate": min(1.0, v + 0.25)}
            for i, v in enumerate(values)]


def orz(values):  # lime-nlp/orz_math_difficulty (its column name is not published: reuse_key names it)
    return [{"problem": f"What is {i} + {i}?", "answer": str(2 * i), "difficulty": v, "task_id": f"orz-{i}"}
            for i, v in enumerate(values)]


def openr1(pairs):  # open-r1/OpenR1-Math-220k: (correct, generations) per problem
    return [{"problem": f"What is {i} + {i}?", "solution": "", "answer": str(2 * i), "problem_type": "Algebra",
             "question_type": "math-word-problem", "source": "fixture", "uuid": f"r1-{i}",
             "is_reasoning_complete": [True] * total, "generations": [f"... \\boxed{{{2 * i}}}"] * total,
             "correctness_math_verify": [j < correct for j in range(total)], "correctness_llama": None,
             "finish_reasons": ["stop"] * total, "correctness_count": correct,
             "messages": [{"role": "user", "content": f"What is {i} + {i}?"}]} for i, (correct, total) in enumerate(pairs)]


def intellect2(values):  # PrimeIntellect/INTELLECT-2-RL-Dataset
    return [{"problem_id": f"i2-{i}", "task_type": "verifiable_math", "prompt": f"What is {i} + {i}?",
             "verification_info": json.dumps({"ground_truth": str(2 * i)}), "solve_rate_qwen_r1_distill_7b": v}
            for i, v in enumerate(values)]


def intellect3(values, config="math"):  # PrimeIntellect/INTELLECT-3-RL, its math or logic config
    if config == "math":
        return [{"question": f"What is {i} + {i}?", "answer": str(2 * i), "avg@8_qwen3_4b_thinking_2507": v,
                 "avg@8_qwen3_4b_instruct_2507": None if v is None else v / 2} for i, v in enumerate(values)]
    return [{"question": f"Puzzle {i}", "info": json.dumps({"answer": str(i)}), "avg@16_qwen3_4b_instruct_2507": v}
            for i, v in enumerate(values)]


def reused(rows, **settings):
    op = TrajvalEndpointRewardMapper(window="early", **settings)
    op.check_pool(pa.Table.from_pylist(rows))
    batch = {key: [row.get(key) for row in rows] for key in rows[0]}
    out = op.process_batched(batch)
    return out["trajval_r_early"], out["trajval_r_early_n"], out["trajval_r_early_provenance"][0]


@pytest.mark.parametrize("rows, settings, rates, n, model", [
    (big_math([0.0, 0.25, 1.0]), {"reuse_preset": "big_math", "id_key": "task_id"}, [0.0, 0.25, 1.0], 64,
     "meta-llama/Meta-Llama-3.1-8B-Instruct"),
    (polaris(["0/8", "3/8", "7/8"]), {"reuse_preset": "polaris", "id_key": "task_id"}, [0.0, 0.375, 0.875], 8,
     "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"),
    (skywork([1, 8, 15]), {"reuse_preset": "skywork_7b"}, [1 / 16, 0.5, 15 / 16], 16,
     "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"),
    (skywork([4, 16, 0], "1.5B"), {"reuse_preset": "skywork_1_5b"}, [0.25, 1.0, 0.0], 16,
     "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"),
    (guru([0.0, 0.5, 0.75]), {"reuse_preset": "guru_qwen2_5_7b"}, [0.0, 0.5, 0.75], 16, "Qwen/Qwen2.5-7B-Instruct"),
    (guru([0.0, 0.5, 0.75]), {"reuse_preset": "guru_qwen3_30b"}, [0.25, 0.75, 1.0], 16, "Qwen/Qwen3-30B-A3B"),
    (orz([100.0, 62.5, 0.0]), {"reuse_preset": "orz", "reuse_key": "difficulty", "id_key": "task_id"},
     [0.0, 0.375, 1.0], 128, "Qwen/Qwen2.5-Math-7B"),
    (orz([100.0, 62.5, 0.0]), {"reuse_preset": "deepscaler", "reuse_key": "difficulty", "id_key": "task_id"},
     [0.0, 0.375, 1.0], 128, "Qwen/Qwen2.5-Math-7B"),
    (openr1([(1, 2), (3, 4), (2, 2)]), {"reuse_preset": "openr1_math", "id_key": "uuid"}, [0.5, 0.75, 1.0],
     [2, 4, 2], "deepseek-ai/DeepSeek-R1"),  # n per row: len(generations)
    (intellect2([0.0, 0.125, 0.5]), {"reuse_preset": "intellect2", "reuse_n": 8, "id_key": "problem_id"},
     [0.0, 0.125, 0.5], 8, "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"),
    (intellect3([0.25, 1.0]), {"reuse_preset": "intellect3_avg8_qwen3_4b_thinking"}, [0.25, 1.0], 8,
     "Qwen/Qwen3-4B-Thinking-2507"),
    (intellect3([0.25, 1.0]), {"reuse_preset": "intellect3_avg8_qwen3_4b_instruct"}, [0.125, 0.5], 8,
     "Qwen/Qwen3-4B-Instruct-2507"),
    (intellect3([0.0625, 0.5], "logic"), {"reuse_preset": "intellect3_avg16_qwen3_4b_instruct"}, [0.0625, 0.5], 16,
     "Qwen/Qwen3-4B-Instruct-2507"),
    # the forms without a preset
    (orz([50.0, 25.0]), {"reuse_key": "difficulty", "reuse_form": "difficulty_percent", "reuse_n": 4,
                         "id_key": "task_id"}, [0.5, 0.75], 4, None),
    (polaris(["1/4", "2/4"]), {"reuse_key": "difficulty", "reuse_form": "fraction_string", "id_key": "task_id"},
     [0.25, 0.5], 4, None),
])
def test_each_preset_reads_its_pools_column_as_a_pass_rate(rows, settings, rates, n, model):
    got, counts, provenance = reused(rows, **settings)
    assert got == pytest.approx(rates) and counts == (n if isinstance(n, list) else [n] * len(rows))
    assert provenance["model"] == model and provenance["cost"]["completions"] == 0
    assert provenance["n"] == (None if isinstance(n, list) else n)  # a per-row n: <key>_n holds each row's
    assert provenance["preset"] == settings.get("reuse_preset")


@pytest.mark.parametrize("rows, settings, message", [
    (big_math([0.5, 1.5]), {"reuse_preset": "big_math", "id_key": "task_id"},
     r"row 1 \(task_id='bm-1'\): field 'llama8b_solve_rate' \(the reused pass rate\) = 1.5 is outside \[0, 1\]"),
    (big_math([0.5, None]), {"reuse_preset": "big_math", "id_key": "task_id"},
     r"row 1 \(task_id='bm-1'\): field 'llama8b_solve_rate' \(the reused pass rate\) is missing"),
    (polaris(["3/8", "9/8"]), {"reuse_preset": "polaris", "id_key": "task_id"},
     r"row 1 \(task_id='po-1'\): field 'difficulty' = '9/8' is not a 'k/n' string"),
    (polaris(["3/8", "²/8"]), {"reuse_preset": "polaris", "id_key": "task_id"},  # a digit int() cannot read
     r"row 1 \(task_id='po-1'\): field 'difficulty' = '²/8' is not a 'k/n' string"),
    (polaris(["3/8", "3/16"]), {"reuse_preset": "polaris", "id_key": "task_id"},
     r"field 'difficulty' = '3/16' stands on 16 samples, not 8"),
    (skywork([3, 17]), {"reuse_preset": "skywork_7b"},
     r"row 1 \(extra_info.index=1\): field 'extra_info.model_difficulty\[\"DeepSeek-R1-Distill-Qwen-7B\"\]' "
     r"\(correct samples of 16\) = 17"),
    (skywork([3, 2.5]), {"reuse_preset": "skywork_7b"}, r"= 2.5 is not a whole count of correct samples"),
    (orz([50.0, 120.0]), {"reuse_preset": "orz", "reuse_key": "difficulty", "id_key": "task_id"},
     r"field 'difficulty' \(100 \(1 - correct / 128\)\) = 120"),
    (openr1([(1, 2), (3, 2)]), {"reuse_preset": "openr1_math", "id_key": "uuid"},
     r"row 1 \(uuid='r1-1'\): field 'correctness_count' = 3 correct samples is more than the 2 rollouts its field "
     r"'generations' gives"),
    (intellect3([0.5, None]), {"reuse_preset": "intellect3_avg8_qwen3_4b_thinking"},
     r"row 1: field 'avg@8_qwen3_4b_thinking_2507' \(the reused pass rate\) is missing"),
])
def test_a_value_outside_its_forms_range_names_the_row_and_the_field(rows, settings, message):
    with pytest.raises(TrajvalInputError, match=message):
        reused(rows, **settings)


def test_a_preset_without_a_published_column_and_a_form_without_its_n_are_refused():
    with pytest.raises(ValueError, match="reuse_preset 'orz': the column's name is not published; give reuse_key"):
        TrajvalEndpointRewardMapper(window="early", reuse_preset="orz")
    with pytest.raises(ValueError, match="needs the rollouts behind its pass rates"):
        TrajvalEndpointRewardMapper(window="early", reuse_key="difficulty", reuse_form="count")
    with pytest.raises(ValueError, match="reuse_preset 'intellect2': its card does not state the rollouts behind "
                                         "'solve_rate_qwen_r1_distill_7b'; give exactly one of reuse_n"):
        TrajvalEndpointRewardMapper(window="early", reuse_preset="intellect2")
    with pytest.raises(ValueError, match="reuse_missing must be one of"):
        TrajvalEndpointRewardMapper(window="early", reuse_preset="big_math", reuse_missing="skip")
    with pytest.raises(ValueError, match="reuse_preset must be one of"):
        TrajvalEndpointRewardMapper(window="early", reuse_preset="bigmath")


def test_the_reuse_variance_recipe_weights_a_pool_with_no_model_and_says_what_the_pass_came_from(tmp_path, capsys):
    """recipes/reuse_variance.yaml through dj-process: the variance prior from Big-Math's column,
    0 completions, and `trajval cost` (recipe and pool) names the model and n behind the pass."""
    import yaml

    from trajval_ops import core
    from trajval_ops.cli import cost

    recipe = yaml.safe_load((REPO / "recipes" / "reuse_variance.yaml").read_text())
    recipe["export_path"] = str(tmp_path / "weighted.jsonl")
    result = dj_process(recipe, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = read_jsonl(tmp_path / "weighted.jsonl")
    pool = read_jsonl(REPO / recipe["dataset_path"])
    rates = [row["llama8b_solve_rate"] for row in pool]
    assert [row["trajval_weight"] for row in out] == core.variance_weight(core.variance_score(rates)).tolist()
    assert cost.main(["--pool", str(tmp_path / "weighted.jsonl"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["completions"] == 0
    assert report["runs"][0]["reused_passes"]["trajval_r_early"] == {
        "field": "llama8b_solve_rate", "form": "rate", "model": "meta-llama/Meta-Llama-3.1-8B-Instruct", "n": 64,
        "n_field": None, "rows_read": len(out), "rows_measured": 0}
    assert cost.main(["--config", str(REPO / "recipes" / "reuse_variance.yaml"), "--json"]) == 0
    stage = json.loads(capsys.readouterr().out)["stages"][0]
    assert stage["completions"] == 0 and stage["reused_from"]["model"] == "meta-llama/Meta-Llama-3.1-8B-Instruct"
