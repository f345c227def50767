"""The probe on several processes: settings, batch mapping and launch command (fast), then real
2-process runs on CPU (gloo) of the tiny random Llama: complete, resumed after a SIGKILL that
leaves no process behind, resumed across process counts, and a failed launch's error."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

from tests.conftest import REPO, dj_process, read_jsonl, tagged_processes_after, write_jsonl
from tests.test_probe_training import pool, tiny_config
from trajval_ops.probe.checkpoints import list_checkpoints
from trajval_ops.errors import TrajvalInputError
from trajval_ops.probe.config import ProbeConfig, check_autocast, grpo_arguments, strategy_mismatch
from trajval_ops.probe.launch import (
    PARENT_PID_ENV,
    ProbeLaunchError,
    accelerate_flags,
    launch_environment,
    launch_probe,
    read_job,
    write_job,
)
from trajval_ops.probe_manifest import config_hash, load_manifest
from trajval_ops.probe.run import run_probe

#: Checkpoints of the 4-epoch probe below (8 rows, 2 prompts per step: 4 steps per epoch).
FOUR_EPOCHS = [("base", 0), ("epoch-1", 4), ("epoch-4", 16)]


def two_process_config(**overrides) -> ProbeConfig:
    """The tiny probe on 2 processes: the global batch of 2 prompts x 2 rollouts is one
    micro-batch of 2 completions per process."""
    return tiny_config(**{"micro_batch_size": 2, "num_processes": 2, **overrides})


def checkpoint_list(manifest: dict) -> list[tuple[str, int]]:
    return [(c["name"], c["step"]) for c in manifest["checkpoints"]]


def folder_contents(out) -> dict[str, list[str]]:
    return {c.path.name: sorted(p.name for p in c.path.iterdir()) for c in list_checkpoints(out)}


# ---------------------------------------------------------------- settings (fast)
def test_settings_round_trip_and_stay_out_of_the_identity(tmp_path):
    config = two_process_config(distributed_config="fsdp.yaml")
    assert ProbeConfig.from_dict(config.to_dict()) == config
    assert config.to_dict()["num_processes"] == 2 and config.to_dict()["distributed_config"] == "fsdp.yaml"
    # the hash covers what the probe is, not how many processes run it
    single = tiny_config(micro_batch_size=2)
    assert config.identity() == single.identity() and "num_processes" not in config.identity()
    assert config_hash(config.identity()) == config_hash(single.identity())

    rows = pool(3)
    job = read_job(write_job(tmp_path / "job.json", rows, ["t0", "t1", "t2"], config, tmp_path / "out", False))
    assert job == {"rows": rows, "probe_ids": ["t0", "t1", "t2"], "config": config,
                   "output_dir": str(tmp_path / "out"), "show_progress": False}
    assert [p.name for p in tmp_path.iterdir()] == ["job.json"]  # no temporary file left


def test_global_batch_is_split_over_processes():
    # 8 prompts x 4 rollouts = 32 completions per step; 2 processes x 4 per micro-batch: 4 each
    config = ProbeConfig(prompts_per_batch=8, num_generations=4, micro_batch_size=4, num_processes=2)
    args = grpo_arguments(config, "/tmp/x", "cpu")
    assert args["generation_batch_size"] == 32  # global in TRL
    assert args["per_device_train_batch_size"] == 4 and args["gradient_accumulation_steps"] == 4
    assert args["per_device_train_batch_size"] * 2 * args["gradient_accumulation_steps"] == 32
    assert args["ddp_backend"] == "gloo"
    single = grpo_arguments(ProbeConfig(prompts_per_batch=8, num_generations=4, micro_batch_size=4), "/tmp/x", "cpu")
    assert single["gradient_accumulation_steps"] == 8 and "ddp_backend" not in single


@pytest.mark.parametrize("values, message", [
    ({"prompts_per_batch": 2, "num_generations": 2, "micro_batch_size": 4, "num_processes": 2},
     r"micro_batch_size \(4\) x num_processes \(4 x 2; micro_batch_size is per process\) must divide "
     r"prompts_per_batch x num_generations \(2 x 2, the global batch\)"),
    ({"prompts_per_batch": 3, "num_generations": 2, "micro_batch_size": 2, "num_processes": 2},
     r"micro_batch_size \(2\) x num_processes \(2 x 2.*must divide prompts_per_batch x num_generations \(3 x 2"),
    ({"num_processes": 0}, r"num_processes must be in \[1, inf\), got 0"),
    ({"distributed_config": "zero3.yaml"}, r"distributed_config \('zero3.yaml'\) is used only with num_processes > 1"),
])
def test_bad_distributed_settings_name_the_setting(values, message):
    with pytest.raises(ValueError, match=message):
        ProbeConfig(**values)


def test_operator_takes_the_new_settings():
    from trajval_ops.ops.probe_trainer import TrajvalProbeTrainer

    op = TrajvalProbeTrainer(output_dir="x", prompts_per_batch=2, num_generations=2, micro_batch_size=1,
                             num_processes=2, distributed_config="ddp.yaml")
    assert (op.config.num_processes, op.config.distributed_config) == (2, "ddp.yaml")
    with pytest.raises(ValueError, match="x num_processes"):
        TrajvalProbeTrainer(output_dir="x", prompts_per_batch=2, num_generations=2, micro_batch_size=4,
                            num_processes=2)


def test_launch_command_and_environment(tmp_path):
    ddp = accelerate_flags(two_process_config())
    assert ddp == ["--multi_gpu", "--mixed_precision", "no", "--dynamo_backend", "no", "--num_processes", "2",
                   "--num_machines", "1", "--main_process_port", "0"]
    config_file = tmp_path / "fsdp.yaml"
    config_file.write_text("distributed_type: FSDP\n")
    assert accelerate_flags(two_process_config(distributed_config=str(config_file)))[:2] == [
        "--config_file", str(config_file)]
    with pytest.raises(FileNotFoundError, match="distributed_config: no accelerate config file"):
        accelerate_flags(two_process_config(distributed_config=str(tmp_path / "missing.yaml")))

    env = launch_environment({"PATH": "/bin", "PYTHONPATH": "/extra"}, ["", "/a"], "/cwd", 123)
    assert env[PARENT_PID_ENV] == "123" and env["OMP_NUM_THREADS"] == "1"
    assert env["PYTHONPATH"] == os.pathsep.join(["/cwd", "/a", "/extra"])
    assert launch_environment({"OMP_NUM_THREADS": "4"}, [], "/cwd", 1)["OMP_NUM_THREADS"] == "4"


def test_run_probe_refuses_a_process_count_it_does_not_run_in(tmp_path):
    rows = pool(2)
    with pytest.raises(RuntimeError, match=r"num_processes is 2 but the trainer runs in 1 process.*launch_probe"):
        run_probe(rows, ["t0", "t1"], two_process_config(), tmp_path / "probe", show_progress=False)
    assert not (tmp_path / "probe" / "manifest.json").exists()


def test_failed_launch_carries_the_ranks_error(tmp_path):
    config = two_process_config(verifier_options={"function": "tests.test_probe_distributed:no_such_function"})
    rows = pool(2)
    with pytest.raises(ProbeLaunchError, match=r"(?s)failed with exit code 1.*no_such_function"):
        launch_probe(rows, ["t0", "t1"], config, tmp_path / "probe", show_progress=False)


def test_a_ranks_input_error_is_the_failed_launchs_cause(tmp_path):
    """What stops every rank for bad settings (here the bf16 autocast of a distributed_config
    under precision fp32) reaches the operator as the same input error a one-process run raises:
    dj-process then prints it as one block and exits 2 (``user_errors`` follows the cause)."""
    from trajval_ops.ops.dj.error_exit import user_error_of

    config_file = tmp_path / "ddp.yaml"
    config_file.write_text("distributed_type: MULTI_GPU\nmixed_precision: bf16\nnum_machines: 1\n")
    rows = pool(2)
    with pytest.raises(ProbeLaunchError, match="failed with exit code") as failed:
        launch_probe(rows, ["t0", "t1"], two_process_config(precision="fp32", distributed_config=str(config_file)),
                     tmp_path / "probe", show_progress=False)
    cause = user_error_of(failed.value)
    assert isinstance(cause, TrajvalInputError) and cause is failed.value.__cause__
    assert str(cause).startswith(f"precision is fp32, but accelerate would train with mixed_precision bf16, set by "
                                 f"distributed_config ({config_file})")
    assert not (tmp_path / "probe").exists() or not any((tmp_path / "probe").iterdir())


# ---------------------------------------------------------------- real runs (slow)
@pytest.mark.slow
def test_two_processes_under_dj_process_match_a_one_process_run(tmp_path):
    rows = pool(8)
    ids = [r["id"] for r in rows]
    single = run_probe(rows, ids, tiny_config(micro_batch_size=2, keep_epochs=[1]), tmp_path / "one",
                       show_progress=False)

    probe_dir = tmp_path / "two"
    settings = two_process_config(keep_epochs=[1]).to_dict()
    recipe = {
        "project_name": "probe_ddp", "dataset_path": str(write_jsonl(tmp_path / "pool.jsonl", rows)),
        "export_path": str(tmp_path / "out.jsonl"), "np": 1, "text_keys": None, "skip_op_error": False,
        "open_tracer": False, "op_fusion": False,
        "process": [{"trajval_probe_trainer": {**settings, "output_dir": str(probe_dir), "probe_size": 8,
                                               "show_progress": False}}],
    }
    result = dj_process(recipe, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert "launching 2 training processes" in log and "2 processes, MULTI_CPU)" in log  # DDP over gloo

    double = load_manifest(probe_dir)
    assert double["status"] == "complete" and double["config"]["num_processes"] == 2
    assert double["config_hash"] == single["config_hash"]  # the same probe, on 2 processes
    for key in ("steps_per_epoch", "windows", "probe_ids"):
        assert double[key] == single[key], key
    assert checkpoint_list(double) == checkpoint_list(single) == [("base", 0), ("epoch-1", 4), ("epoch-2", 8)]
    assert len(double["train_reward_per_epoch"]) == 2
    # written once, by the main process: one progress line per step, one end line, and the
    # checkpoint folders hold what a 1-process run's hold (no rank's RNG state left)
    # the main rank says its progress once per epoch (show_progress: false), not TRL's per-step dictionaries
    assert len(re.findall(r"probe: epoch \d/2 done \(step \d/8\), mean reward", log)) == 2 and "{'loss'" not in log
    assert log.count("probe: done in") == 1
    assert folder_contents(probe_dir) == folder_contents(tmp_path / "one")
    assert [r["trajval_in_probe"] for r in read_jsonl(tmp_path / "out.jsonl")] == [True] * 8


DRIVER = """
import sys
from tests.test_probe_distributed import pool, two_process_config
from trajval_ops.probe.launch import launch_probe
rows = pool(8)
launch_probe(rows, [r["id"] for r in rows], two_process_config(epochs=4, keep_epochs=[1]), sys.argv[1],
             show_progress=False)
"""


def complete_checkpoint(out) -> bool:
    return any(c.complete for c in list_checkpoints(out))


@pytest.mark.slow
def test_killed_two_process_run_leaves_no_process_and_resumes(tmp_path, capfd):
    out = tmp_path / "probe"
    tag = uuid.uuid4().hex
    log = open(tmp_path / "driver.log", "w")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(out)], cwd=REPO, stdout=log,
                              stderr=subprocess.STDOUT,
                              # TMPDIR: the job file a SIGKILL leaves behind lands in tmp_path
                              env={**os.environ, "TRAJVAL_TEST_TAG": tag, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 300
        while not complete_checkpoint(out):
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint in 300 s"
            time.sleep(0.05)
        os.kill(driver.pid, signal.SIGKILL)  # the operator's process, as a kill -9 would
        driver.wait()
        survivors = tagged_processes_after(tag, 10)
        assert survivors == [], f"launcher or ranks outlived their parent: {survivors}"
    finally:
        if driver.poll() is None:
            driver.kill()
        log.close()
    interrupted = load_manifest(out, require_complete=False)
    assert interrupted["status"] == "running"
    done = max(c.step for c in list_checkpoints(out) if c.complete)
    assert done < 16, "the run finished before it was killed"

    capfd.readouterr()
    rows = pool(8)
    manifest = launch_probe(rows, [r["id"] for r in rows], two_process_config(epochs=4, keep_epochs=[1]), out,
                            show_progress=False)
    log_text = capfd.readouterr().err
    assert manifest["status"] == "complete" and manifest["config_hash"] == interrupted["config_hash"]
    assert manifest["resumed_from"] == [f"checkpoint-{done}"] and f"resuming from checkpoint-{done}" in log_text
    ends = [int(s) for s in re.findall(r"probe: epoch \d/4 done \(step (\d+)/16\)", log_text)]
    assert ends == list(range(done + 4, 17, 4))  # only the missing epochs, each logged once
    assert checkpoint_list(manifest) == FOUR_EPOCHS
    assert manifest["windows"] == {"early": ["base"], "late": ["epoch-4"]}
    assert len(manifest["train_reward_per_epoch"]) == 4


@pytest.mark.slow
def test_one_process_run_resumes_on_two_processes(tmp_path, capfd):
    from transformers import TrainerCallback

    class Crash(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 6:  # in epoch 2, after epoch 1's checkpoint (step 4)
                raise KeyboardInterrupt("simulated kill")

    rows = pool(8)
    ids = [r["id"] for r in rows]
    out = tmp_path / "probe"
    with pytest.raises(KeyboardInterrupt):
        run_probe(rows, ids, tiny_config(micro_batch_size=2, epochs=4, keep_epochs=[1]), out, show_progress=False,
                  extra_callbacks=[Crash()])
    interrupted = load_manifest(out, require_complete=False)

    capfd.readouterr()
    # through an accelerate config file, one asking for FSDP, which accelerate cannot run on CPU
    fsdp = tmp_path / "fsdp.yaml"
    fsdp.write_text("distributed_type: FSDP\nfsdp_config: {fsdp_version: 2, fsdp_state_dict_type: FULL_STATE_DICT}\n"
                    "num_machines: 1\nmixed_precision: 'no'\n")
    manifest = launch_probe(rows, ids, two_process_config(epochs=4, keep_epochs=[1], distributed_config=str(fsdp)),
                            out, show_progress=False)
    assert manifest["config_hash"] == interrupted["config_hash"] and manifest["resumed_from"] == ["checkpoint-4"]
    assert manifest["config"]["num_processes"] == 2  # the manifest records the session that finished it
    assert checkpoint_list(manifest) == FOUR_EPOCHS
    log = capfd.readouterr().err
    # (the 1-process checkpoint has no per-rank RNG files: the trainer goes on without them)
    assert "resuming from checkpoint-4" in log
    assert "2 processes, MULTI_CPU)" in log
    assert f"distributed_config ({fsdp}) asks for distributed_type FSDP, but the ranks run MULTI_CPU" in log


@pytest.mark.parametrize("precision, autocast, refused", [
    ("fp32", "no", False), ("bf16-mixed", "bf16", False), ("bf16", "bf16", False),
    ("fp32", "bf16", True), ("fp32", "fp16", True), ("bf16-mixed", "no", True),
])
def test_the_trainers_autocast_must_be_the_precisions(precision, autocast, refused):
    if not refused:
        check_autocast(precision, autocast, "ddp.yaml")
        return
    with pytest.raises(TrajvalInputError, match=rf"precision is {precision}, but accelerate would train with "
                                                 rf"mixed_precision {autocast}, set by distributed_config \(ddp.yaml\) "
                                                 "or by ACCELERATE_MIXED_PRECISION"):
        check_autocast(precision, autocast, "ddp.yaml")


@pytest.mark.parametrize("asked, running, says", [
    (None, "MULTI_CPU", None),
    ("distributed_type: FSDP", "MULTI_CPU", "asks for distributed_type FSDP, but the ranks run MULTI_CPU"),
    ("distributed_type: DEEPSPEED", "MULTI_GPU", "asks for distributed_type DEEPSPEED, but the ranks run MULTI_GPU"),
    ("distributed_type: FSDP", "FSDP", None),
    ("distributed_type: MULTI_GPU", "MULTI_CPU", None),  # DDP either way
    ("num_machines: 1", "MULTI_CPU", None),  # the file leaves the choice to accelerate
    ("", "MULTI_CPU", None),
])
def test_a_distributed_config_the_ranks_do_not_run_is_named(tmp_path, asked, running, says):
    path = None
    if asked is not None:
        path = tmp_path / "accelerate.yaml"
        path.write_text(asked + "\n")
    found = strategy_mismatch(str(path) if path else None, running)
    assert found == says if says is None else says in found and str(path) in found
