"""TrajectoryCallback: dense per-task pass-rate trajectories written during a real GRPO run (the
probe trainer and TrajvalGRPOTrainer on the tiny random Llama, CPU), resume, refusal of another
run's file, determinism."""

from __future__ import annotations

import json
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from trajval_ops.analysis import pool_columns  # noqa: E402
from trajval_ops.pools.io import read_rows  # noqa: E402
from trajval_ops.experiment.trajectory_callback import TrajectoryCallback, read_trajectories  # noqa: E402
from trajval_ops.errors import TrajvalInputError  # noqa: E402

VERIFIER = "tests.test_trajectory_callback:even_length"


def even_length(completion, ground_truth, row):
    """A binary reward that varies between a random model's samples: the completion's text has
    an even number of characters."""
    return float(len(completion) % 2 == 0)


def tasks(count=4):
    return [
        {"id": f"t{i}", "prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
         "reward_model": {"ground_truth": str(2 * i)}}
        for i in range(count)
    ]


def callback(path, rows=None, **overrides):
    options = dict(every_steps=1, n=2, max_new_tokens=4, seed=5, verifier="custom",
                   verifier_options={"function": VERIFIER})
    options.update(overrides)
    return TrajectoryCallback(tasks() if rows is None else rows, path, **options)


def read_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def tiny():
    """The tiny random Llama and its tokenizer (right padding, as a trainer leaves it)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trajval_ops.models import resolve_model

    torch.set_num_threads(1)
    path = resolve_model("tiny-random-llama")
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    tokenizer.padding_side = "right"
    return AutoModelForCausalLM.from_pretrained(path), tokenizer


def train_args(tmp_path):
    from transformers import TrainingArguments

    return TrainingArguments(output_dir=str(tmp_path / "args"), report_to="none", use_cpu=True)


def state_at(step, main=True):
    from transformers import TrainerState

    return TrainerState(global_step=step, is_world_process_zero=main)


def probe_config(**overrides):
    from trajval_ops.probe.config import ProbeConfig

    values = dict(model="tiny-random-llama", epochs=2, prompts_per_batch=2, num_generations=2, micro_batch_size=4,
                  max_completion_length=4, learning_rate=1e-2, weight_decay=0.0, verifier="custom",
                  verifier_options={"function": VERIFIER})
    values.update(overrides)
    return ProbeConfig(**values)


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory):
    """A two-step probe run (2 prompts, 1 step per epoch, 2 epochs) with the callback on 4 tasks."""
    from loguru import logger

    from trajval_ops.probe.run import run_probe

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("trajectory_run")
    path = root / "trajectories.jsonl"
    cb = callback(path)
    messages = []
    handler = logger.add(lambda m: messages.append(m.record["message"]), level="INFO")
    try:
        rows = tasks()[:2]
        manifest = run_probe(rows, [r["id"] for r in rows], probe_config(), root / "probe", show_progress=False,
                             extra_callbacks=[cb])
    finally:
        logger.remove(handler)
    return {"path": path, "manifest": manifest, "messages": messages, "rows": read_lines(path)}


def test_two_step_probe_run_writes_a_dense_trajectory_per_task(probe_run):
    assert probe_run["manifest"]["status"] == "complete"
    rows = probe_run["rows"]
    assert [row["id"] for row in rows] == ["t0", "t1", "t2", "t3"]  # task order
    for row in rows:
        assert row["steps"] == [0, 1, 2]  # the base model, then after each of the 2 steps
        assert len(row["accuracies"]) == 3
        assert set(row["accuracies"]) <= {0.0, 0.5, 1.0}  # n = 2 samples
    assert len({a for row in rows for a in row["accuracies"]}) > 1  # the samples do differ

    ids, acc = pool_columns.trajectory_matrix(list(read_rows(probe_run["path"])))  # what the report reads
    assert ids == ["t0", "t1", "t2", "t3"] and acc.shape == (4, 3)
    ids2, steps, acc2 = read_trajectories(probe_run["path"])
    assert ids2 == ids and steps.tolist() == [0, 1, 2] and (acc2 == acc).all()

    evaluating = [m for m in probe_run["messages"] if "trajectories: step" in m and "evaluating 4 tasks x 2" in m]
    timed = [m for m in probe_run["messages"] if "trajectories: step" in m and "mean pass rate" in m]
    assert len(evaluating) == len(timed) == 3 and all(" s;" in m for m in timed)


def test_resume_keeps_the_evaluations_up_to_the_resumed_step(probe_run, tiny, tmp_path):
    path = tmp_path / "trajectories.jsonl"
    shutil.copy(probe_run["path"], path)
    cb = callback(path)
    # resumed from checkpoint-1: the killed run's evaluation at step 2 is dropped (and step 1 is
    # already there, so nothing is evaluated: no model is needed)
    cb.on_train_begin(train_args(tmp_path), state_at(1), None)
    rows = read_lines(path)
    assert [row["id"] for row in rows] == ["t0", "t1", "t2", "t3"]
    assert all(row["steps"] == [0, 1] for row in rows)
    assert [row["accuracies"] for row in rows] == [old["accuracies"][:2] for old in probe_run["rows"]]

    model, tokenizer = tiny
    cb.on_step_end(train_args(tmp_path), state_at(2), None, model=model, processing_class=tokenizer)
    assert all(row["steps"] == [0, 1, 2] for row in read_lines(path))
    cb.on_train_end(train_args(tmp_path), state_at(2), None, model=model, processing_class=tokenizer)
    assert all(row["steps"] == [0, 1, 2] for row in read_lines(path))  # step 2 was done: not again
    ids, steps, _ = read_trajectories(path)
    assert steps.tolist() == [0, 1, 2]


def test_resume_without_a_file_and_train_end_evaluations(tiny, tmp_path):
    model, tokenizer = tiny
    path = tmp_path / "trajectories.jsonl"
    cb = callback(path, every_steps=2)
    cb.on_train_begin(train_args(tmp_path), state_at(4), None, model=model, processing_class=tokenizer)
    assert all(row["steps"] == [4] for row in read_lines(path))  # the resume point is due: evaluated
    cb.on_step_end(train_args(tmp_path), state_at(5), None, model=model, processing_class=tokenizer)
    assert all(row["steps"] == [4] for row in read_lines(path))  # 5 is not a multiple of 2
    cb.on_train_end(train_args(tmp_path), state_at(5), None, model=model, processing_class=tokenizer)
    assert all(row["steps"] == [4, 5] for row in read_lines(path))  # the last step, evaluated at the end
    # a file of a single evaluation (killed after it) is resumed too
    one = tmp_path / "one.jsonl"
    one.write_text("".join(json.dumps({"id": r["id"], "accuracies": r["accuracies"][:1], "steps": [4]}) + "\n"
                           for r in read_lines(path)))
    again = callback(one, every_steps=2)
    again.on_train_begin(train_args(tmp_path), state_at(4), None)
    assert again.steps == [4]


def test_a_file_of_other_tasks_is_refused(probe_run, tmp_path):
    path = tmp_path / "trajectories.jsonl"
    shutil.copy(probe_run["path"], path)
    other = tasks()
    other[2]["id"] = "x2"
    with pytest.raises(TrajvalInputError, match=r"line 3: id 't2', expected 'x2'.*another output_path"):
        callback(path, rows=other).on_train_begin(train_args(tmp_path), state_at(1), None)
    with pytest.raises(TrajvalInputError, match="holds 4 tasks that are not the 3 tasks"):
        callback(path, rows=tasks(3)).on_train_begin(train_args(tmp_path), state_at(1), None)
    assert read_lines(path) == probe_run["rows"]  # left untouched


def test_evaluation_is_deterministic_and_leaves_the_training_state_alone(tiny, tmp_path):
    model, tokenizer = tiny
    cb = callback(tmp_path / "t.jsonl", rows=tasks(4), n=4, batch_size=3)
    model.train()
    rng = torch.random.get_rng_state()
    first = cb.evaluate(model, tokenizer, step=3)
    assert torch.equal(torch.random.get_rng_state(), rng)  # the training's random stream is untouched
    assert model.training and tokenizer.padding_side == "right"  # restored
    assert cb.evaluate(model, tokenizer, step=3) == first
    assert len(first) == 4 and set(first) <= {0.0, 0.25, 0.5, 0.75, 1.0}
    others = [cb.evaluate(model, tokenizer, step=s) for s in (4, 5, 6)]
    assert any(o != first for o in others)  # the step seeds the samples
    assert not (tmp_path / "t.jsonl").exists()  # evaluate() records nothing


def test_only_the_main_process_evaluates_and_writes(tiny, tmp_path):
    model, tokenizer = tiny
    path = tmp_path / "t.jsonl"
    cb = callback(path)
    for event in (cb.on_train_begin, cb.on_step_end, cb.on_train_end):
        event(train_args(tmp_path), state_at(0, main=False), None, model=model, processing_class=tokenizer)
    assert not path.exists() and cb.steps == []


def test_bad_tasks_fail_before_training(tmp_path):
    rows = tasks()
    rows[1]["reward_model"] = {}
    with pytest.raises(TrajvalInputError, match=r"row 1 \(id='t1'\).*reward_model.ground_truth"):
        callback(tmp_path / "t.jsonl", rows=rows)
    rows = tasks()
    rows[3]["id"] = "t0"
    with pytest.raises(TrajvalInputError, match="rows 0 and 3 share the id 't0'"):
        callback(tmp_path / "t.jsonl", rows=rows)
    rows = tasks()
    del rows[0]["prompt"]
    with pytest.raises(TrajvalInputError, match="row 0.*'prompt'"):
        callback(tmp_path / "t.jsonl", rows=rows)
    with pytest.raises(ValueError, match="every_steps"):
        callback(tmp_path / "t.jsonl", every_steps=0)


def test_id_key_is_written_for_the_reports_id_key(tiny, tmp_path):
    model, tokenizer = tiny
    rows = [{"extra_info": {"index": 10 + i}, **{k: v for k, v in row.items() if k != "id"}}
            for i, row in enumerate(tasks(2))]
    path = tmp_path / "t.jsonl"
    cb = callback(path, rows=rows, id_key="extra_info.index")
    cb.on_train_begin(train_args(tmp_path), state_at(0), None, model=model, processing_class=tokenizer)
    cb.on_step_end(train_args(tmp_path), state_at(1), None, model=model, processing_class=tokenizer)
    written = read_lines(path)
    assert [row["id"] for row in written] == [10, 11]
    ids, acc = pool_columns.trajectory_matrix(written, id_key="extra_info.index")  # report.py --id-key extra_info.index
    assert ids == [10, 11] and acc.shape == (2, 2)


def test_read_trajectories_checks_the_steps(tmp_path):
    good = [{"id": "a", "accuracies": [0.0, 0.5], "steps": [0, 3]},
            {"id": "b", "accuracies": [1.0, 0.5], "steps": [0, 3]}]
    ids, steps, acc = read_trajectories(good)
    assert ids == ["a", "b"] and steps.tolist() == [0, 3] and acc.tolist() == [[0.0, 0.5], [1.0, 0.5]]
    with pytest.raises(TrajvalInputError, match=r"row 1 \(id='b'\).*'steps' is \[0, 4\], the first row has \[0, 3\]"):
        read_trajectories([good[0], {**good[1], "steps": [0, 4]}])
    with pytest.raises(TrajvalInputError, match="'steps' must be a list of 2 step numbers"):
        read_trajectories([good[0], {**good[1], "steps": [0]}])
    with pytest.raises(TrajvalInputError, match="must increase"):
        read_trajectories([{**row, "steps": [3, 3]} for row in good])


def test_killed_probe_run_resumes_its_trajectories(tmp_path):
    """Kill a 3-step probe run right after step 2 (evaluated, checkpoint-1 on disk), resume it:
    the step-2 evaluation of the killed run is dropped, redone identically, and the file ends
    with steps [0, 1, 2, 3]."""
    from transformers import TrainerCallback

    from trajval_ops.probe.run import run_probe

    torch.set_num_threads(1)

    class Crash(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:
                raise KeyboardInterrupt("simulated kill")

    rows = tasks()[:2]
    path = tmp_path / "trajectories.jsonl"
    config = probe_config(epochs=3)
    with pytest.raises(KeyboardInterrupt):
        run_probe(rows, ["t0", "t1"], config, tmp_path / "probe", show_progress=False,
                  extra_callbacks=[callback(path), Crash()])
    killed = read_lines(path)
    assert all(row["steps"] == [0, 1, 2] for row in killed)
    run_probe(rows, ["t0", "t1"], config, tmp_path / "probe", show_progress=False, extra_callbacks=[callback(path)])
    resumed = read_lines(path)
    assert all(row["steps"] == [0, 1, 2, 3] for row in resumed)
    assert [row["accuracies"][:3] for row in resumed] == [row["accuracies"] for row in killed]


def test_with_trajval_grpo_trainer(tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from trajval_ops.models import resolve_model
    from trajval_ops.samplers.trl import TrajvalGRPOTrainer

    torch.set_num_threads(1)
    model_dir = resolve_model("tiny-random-llama")
    rows = tasks()
    dataset = Dataset.from_dict({"prompt": [r["prompt"] for r in rows], "trajval_weight": [1.0, 1.0, 0.1, 0.1]})
    args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, use_vllm=False, report_to="none",
                      num_generations=2, per_device_train_batch_size=4, max_completion_length=4,
                      gradient_checkpointing=False, max_steps=2, logging_steps=1, save_strategy="no", seed=3)
    path = tmp_path / "trajectories.jsonl"
    trainer = TrajvalGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        reward_funcs=lambda prompts, completions, **kw: [even_length(c[0]["content"], None, None) for c in completions],
        args=args, train_dataset=dataset, processing_class=AutoTokenizer.from_pretrained(model_dir),
        callbacks=[callback(path, rows=rows)],
    )
    trainer.train()
    ids, steps, acc = read_trajectories(path)
    assert ids == ["t0", "t1", "t2", "t3"] and steps.tolist() == [0, 1, 2] and acc.shape == (4, 3)
