"""``trajval validate --trainer verl|trl``: the arms as the user's own runs, read back by the
trainers' own config loaders (verl's ``ppo_trainer`` composed by Hydra; TRL's ``TrlParser``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, write_jsonl
from trajval_ops.experiment.protocol import main
from trajval_ops.experiment.trainer_recipes import VERL_DEFAULTS, read_recipe

POOL_ROWS, HELDOUT_ROWS = 40, 12
WEIGHTS = [0.05 + (i % 3) / 3 for i in range(POOL_ROWS)]
VERL_LAUNCHER = ["python3", "-m", "verl.trainer.main_ppo"]
VERL_RECIPE = """# a DAPO-style recipe, as a user keeps it
PYTHONUNBUFFERED=1 python3 -m verl.trainer.main_ppo \\
    algorithm.adv_estimator=grpo \\
    data.train_files=/elsewhere/train.parquet \\
    data.train_batch_size=8 \\
    data.max_response_length=1024 \\
    actor_rollout_ref.rollout.n=4 \\
    actor_rollout_ref.model.path=/models/Qwen3-1.7B \\
    trainer.total_epochs=3 \\
    trainer.test_freq=4 \\
    trainer.logger=['console','wandb'] \\
    trainer.n_gpus_per_node=8
"""


def _row(i: int, split: str, **extra) -> dict:
    return {"id": f"{split}{i}", "data_source": "math_dapo", "prompt": [{"role": "user", "content": f"{i} + {i} = ?"}],
            "ability": "MATH", "reward_model": {"ground_truth": str(2 * i), "style": "rule"},
            "extra_info": {"index": f"{split}{i}"}, **extra}


@pytest.fixture()
def regime(tmp_path):
    """A user's pool, held-out set, weighted pool (trajval) and validation config."""
    pool = write_jsonl(tmp_path / "pool.jsonl", [_row(i, "p") for i in range(POOL_ROWS)])
    heldout = write_jsonl(tmp_path / "heldout.jsonl", [_row(100 + i, "h") for i in range(HELDOUT_ROWS)])
    weighted = write_jsonl(tmp_path / "weighted.jsonl",
                           [_row(i, "p", trajval_weight=w) for i, w in enumerate(WEIGHTS)])
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "name": "dapo-arms", "model": "tiny-arith", "verifier": "math",
        "data": {"pool": str(pool), "heldout": str(heldout)}, "evaluation": {"min_heldout": HELDOUT_ROWS},
        "training": {"seeds": [0, 1], "arms": ["uniform", "trajval", "variance"]}}))
    verl = tmp_path / "verl_recipe.sh"
    verl.write_text(VERL_RECIPE)
    return {"pool": pool, "heldout": heldout, "weighted": weighted, "config": config, "verl": verl, "tmp": tmp_path}


def _trainer(regime, *extra: str, trainer: str = "verl", recipe: Path | None = None, capsys=None) -> int:
    return main(["--config", str(regime["config"]), "--trainer", trainer, "--recipe", str(recipe or regime["verl"]),
                 "--out", str(regime["tmp"] / "out"), "--pool", f"trajval={regime['weighted']}", *extra])


def _dry_runs(regime, capsys, **kwargs) -> list[dict]:
    assert _trainer(regime, "--dry-run", "--json", **kwargs) == 0
    return json.loads(capsys.readouterr().out)["runs"]


# ----------------------------------------------------------------------------- verl


def test_verl_runs_compose_in_verls_own_config(regime, capsys):
    """Every run's overrides go through Hydra's compose of verl's ppo_trainer config: the arm's pool,
    the held-out set, the seed, the file logger, the run name and (for a prior) verl 0.9's dataset
    hook with its weight key and the recipe's epochs drawn inside one pass."""
    hydra = pytest.importorskip("hydra")
    verl = pytest.importorskip("verl")
    from hydra import compose, initialize_config_dir

    runs = _dry_runs(regime, capsys)
    assert [(r["arm"], r["seed"]) for r in runs] == [(a, s) for a in ("uniform", "trajval", "variance") for s in (0, 1)]
    assert not (regime["tmp"] / "out").exists()  # a dry run writes nothing
    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        base = compose(config_name="ppo_trainer")
        composed = {r["name"]: compose(config_name="ppo_trainer", overrides=r["argv"][len(VERL_LAUNCHER):])
                    for r in (runs[1], runs[2])}  # uniform seed 1, trajval seed 0
    for key, value in VERL_DEFAULTS.items():  # what the dry run counts with where the recipe is silent
        assert _select(base, key) == value, key
    uniform, prior = composed["dapo-arms-uniform-seed1"], composed["dapo-arms-trajval-seed0"]
    assert uniform.data.train_files == str(regime["pool"]) and prior.data.train_files == str(regime["weighted"])
    for cfg, seed, arm in ((uniform, 1, "uniform"), (prior, 0, "trajval")):
        assert cfg.data.val_files == str(regime["heldout"]) and cfg.data.seed == seed
        assert list(cfg.trainer.logger) == ["console", "wandb", "file"]
        assert cfg.trainer.experiment_name == f"dapo-arms-{arm}-seed{seed}"
        assert cfg.actor_rollout_ref.rollout.n == 4 and cfg.algorithm.adv_estimator == "grpo"  # the recipe's own
    assert uniform.data.custom_cls.path is None and uniform.trainer.total_epochs == 3 and "trajval" not in uniform.data
    assert dict(prior.data.custom_cls) == {"path": "pkg://trajval_ops.samplers.verl_dataset", "name": "TrajvalVerlDataset"}
    assert dict(prior.data.trajval) == {"weight_key": "trajval_weight", "epochs": 3} and prior.trainer.total_epochs == 1
    assert runs[1]["env"] == {"PYTHONUNBUFFERED": "1",
                               "VERL_FILE_LOGGER_PATH": str((regime["tmp"] / "out" / "logs" / "uniform-seed1.jsonl"))}


def _select(cfg, key):
    from omegaconf import OmegaConf

    value = OmegaConf.select(cfg, key)
    return list(value) if OmegaConf.is_list(value) else value


VERL_LATEST = Path(sys.prefix) / "verl-latest"  # tools/install.sh TRAJVAL_WITH_TRAINERS=1 puts verl 0.9.1 there


@pytest.mark.slow  # 20 s here: verl 0.9.1 imported and its config composed in a fresh interpreter
@pytest.mark.skipif(not (VERL_LATEST / "verl").is_dir(), reason=f"no verl 0.9.1 in {VERL_LATEST}")
def test_verl_runs_compose_in_the_newest_verls_config_too(regime, capsys):
    runs = _dry_runs(regime, capsys)
    script = ("import json, sys, verl; from pathlib import Path; from hydra import compose, initialize_config_dir\n"
              "runs = json.loads(sys.stdin.read())\n"
              "with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / 'trainer' / 'config'), "
              "version_base=None):\n"
              "    cfgs = [compose(config_name='ppo_trainer', overrides=r) for r in runs]\n"
              "print(json.dumps([verl.__version__] + [[c.data.train_files, c.data.custom_cls.name, "
              "c.data.get('trajval', {}).get('weight_key'), c.trainer.total_epochs, list(c.trainer.logger)] for c in cfgs]))")
    result = subprocess.run([sys.executable, "-c", script], input=json.dumps([r["argv"][3:] for r in runs[1:3]]),
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                [str(VERL_LATEST), os.environ.get("PYTHONPATH", "")])}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    version, uniform, prior = json.loads(result.stdout.splitlines()[-1])
    assert version == "0.9.1"
    assert uniform == [str(regime["pool"]), None, None, 3, ["console", "wandb", "file"]]
    assert prior == [str(regime["weighted"]), "TrajvalVerlDataset", "trajval_weight", 1, ["console", "wandb", "file"]]


def test_verl_runs_are_counted_as_verl_steps_them(regime, capsys):
    """uniform: 3 epochs x (40 // 8) = 15 steps; a weighted run: (3 x 40) // 8 = 15 in one pass;
    validations at step 0, 4, 8, 12 and the last (15): 5 x 1 sample x 12 held-out tasks."""
    runs = _dry_runs(regime, capsys)
    main(["--config", str(regime["config"]), "--trainer", "verl", "--recipe", str(regime["verl"]), "--out",
          str(regime["tmp"] / "out"), "--pool", f"trajval={regime['weighted']}", "--dry-run", "--json", "--rate", "4",
          "--price", "2.5"])
    priced = json.loads(capsys.readouterr().out)["runs"]
    for run in runs:
        assert run["counts"] == {"steps": 15, "training_completions": 15 * 8 * 4, "evaluations": 5,
                                 "evaluation_completions": 5 * 1 * HELDOUT_ROWS, "max_completion_tokens": 1024,
                                 "gpus": 8}
    cost = priced[0]["cost"]
    completions = 15 * 8 * 4 + 5 * HELDOUT_ROWS
    assert cost["completions"] == completions and cost["max_new_tokens"] == completions * 1024
    # --rate is per GPU in every command: the run's 8 GPUs generate at 8 x 4 a second together
    assert cost["generation_s"] == pytest.approx(completions / (4 * 8))
    assert cost["gpu_hours"] == pytest.approx(completions / 4 / 3600)
    assert cost["price"] == pytest.approx(cost["gpu_hours"] * 2.5)


def test_the_written_folder_holds_a_script_per_run_and_the_manifest(regime, capsys):
    out = regime["tmp"] / "out"
    assert _trainer(regime) == 0
    record = json.loads((out / "runs.json").read_text())
    assert {k: record[k] for k in ("kind", "version", "trainer", "name", "baseline")} == {
        "kind": "trajval.trainer_runs", "version": 1, "trainer": "verl", "name": "dapo-arms", "baseline": "uniform"}
    assert record["pools"]["uniform"] == {"path": str(regime["pool"]), "weight_key": None, "written_by": None}
    assert record["pools"]["trajval"]["path"] == str(regime["weighted"])
    assert "recipes/dapo_variance.yaml" in record["pools"]["variance"]["written_by"]  # not written yet
    assert record["verdict_command"] == (
        "trajval verdict --run 'uniform=logs/uniform-seed*.jsonl' --run 'trajval=logs/trajval-seed*.jsonl' "
        f"--run 'variance=logs/variance-seed*.jsonl' --baseline uniform --format verl --pool trajval={regime['weighted']} "
        f"--pool variance={out / 'pools' / 'variance.jsonl'} --out verdict")
    run = record["runs"][0]
    assert (run["log"], run["log_format"], run["job_id"], run["pool"]) == (
        "logs/uniform-seed0.jsonl", "verl", None, str(regime["pool"]))
    script = (out / run["script"]).read_text()
    assert os.access(out / run["script"], os.X_OK) and run["command"] in script
    assert (out / "logs").is_dir()  # verl's file logger opens its file, not its folder
    run_all = (out / "run_all.sh").read_text()
    assert run_all.index("dapo_variance.yaml") < run_all.index("bash runs/uniform-seed0.sh")
    # a script refuses to start before its pool is written, naming what writes it
    variance = next(r for r in record["runs"] if r["arm"] == "variance")
    result = subprocess.run(["bash", str(out / variance["script"])], capture_output=True, text=True)
    assert result.returncode == 2 and "dapo_variance.yaml" in result.stderr
    # the same runs again keep what the folder recorded (job ids); other runs are refused
    record["runs"][0]["job_id"] = "raysubmit_kept"
    (out / "runs.json").write_text(json.dumps(record))
    assert _trainer(regime) == 0
    assert json.loads((out / "runs.json").read_text())["runs"][0]["job_id"] == "raysubmit_kept"
    capsys.readouterr()
    assert main(["--config", str(regime["config"]), "--trainer", "verl", "--recipe", str(regime["verl"]), "--seed",
                 "5", "--out", str(out), "--pool", f"trajval={regime['weighted']}"]) == 2
    assert "holds other runs" in capsys.readouterr().err


def test_status_of_runs_written_for_another_launcher(regime, capsys):
    out = regime["tmp"] / "out"
    assert _trainer(regime) == 0
    write_jsonl(out / "logs" / "uniform-seed0.jsonl", [{"step": s, "data": {"val-core/math_dapo/acc/mean@1": 0.1}}
                                                       for s in (0, 4, 8)])
    capsys.readouterr()
    assert main(["--status", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["dapo-arms-uniform-seed0", "-", "not", "submitted", "8"]
    assert lines[-1] == "0 of 6 run(s) finished"


# ----------------------------------------------------------------------------- TRL


TRL_RECIPE = """accelerate launch --num_processes 1 {script} \\
  --model_name_or_path /models/Qwen3-1.7B --learning_rate 1e-6 --max_steps 20 \\
  --per_device_train_batch_size 4 --gradient_accumulation_steps 2 --num_generations 4 \\
  --eval_strategy steps --eval_steps 5 --per_device_eval_batch_size 4 --max_completion_length 256 \\
  --output_dir=elsewhere --seed 3 --trajval_weight_column stale --report_to none --use_cpu
"""  # --use_cpu: GRPOConfig refuses its default bf16 on a machine without a GPU


def test_trl_runs_parse_with_trls_own_parser(regime, capsys):
    """Each run's script arguments, parsed by the TrlParser a script builds (TRL's GRPOConfig
    checks them), carry the run's output folder, seed, name, pool, held-out set and weight column."""
    pytest.importorskip("trl")
    from trl import GRPOConfig, ModelConfig, ScriptArguments, TrlParser

    from trajval_ops.samplers.trl import TrajvalScriptArguments

    script = REPO / "recipes" / "trl_scripts" / "grpo_trajval.py"
    recipe = regime["tmp"] / "trl_recipe.sh"
    recipe.write_text(TRL_RECIPE.format(script=script))
    assert _trainer(regime, "--dry-run", "--json", trainer="trl", recipe=recipe) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    parser = TrlParser((ScriptArguments, GRPOConfig, ModelConfig, TrajvalScriptArguments))
    for run in runs:
        launcher = run["argv"][:run["argv"].index(str(script)) + 1]
        assert launcher == ["accelerate", "launch", "--num_processes", "1", str(script)]
        _, training, model, trajval = parser.parse_args_and_config(args=run["argv"][len(launcher):])
        assert training.output_dir == str(regime["tmp"] / "out" / "runs" / f"{run['arm']}-seed{run['seed']}")
        assert (training.seed, training.run_name) == (run["seed"], run["name"])
        assert training.learning_rate == 1e-6 and model.model_name_or_path == "/models/Qwen3-1.7B"
        assert trajval.trajval_eval_file == str(regime["heldout"])
        expected = {"uniform": (str(regime["pool"]), None), "trajval": (str(regime["weighted"]), "trajval_weight"),
                    "variance": (str(regime["tmp"] / "out" / "pools" / "variance.jsonl"), "trajval_weight")}
        assert (trajval.trajval_train_file, trajval.trajval_weight_column) == expected[run["arm"]]
        # 20 steps x 4 x 1 process x 2 accumulation; 4 evaluations x 4 generations x 12 held-out tasks
        assert run["counts"] == {"steps": 20, "training_completions": 160, "evaluations": 4,
                                 "evaluation_completions": 4 * 4 * HELDOUT_ROWS, "max_completion_tokens": 256,
                                 "gpus": 1}
        assert run["log"] == f"runs/{run['arm']}-seed{run['seed']}" and run["log_format"] == "trl"


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("change, args, message", [
    ({"training": {"arms": ["uniform", "greso"]}}, (), "schedule prompts online"),
    ({"training": {"arms": ["uniform", "trajval"], "sampling": ["dynamic"]}}, (), "training.sampling"),
    ({}, ("--pool", "bots=x.jsonl"), "the config does not train"),
    ({}, ("--pool", "uniform=x.jsonl"), "trains on data.pool as it is"),
    ({}, ("--pool", "variance=missing.jsonl"), "file not found"),
    ({}, ("--weight-key", "trajval=trajval_score"), "no 'trajval_score' column"),
    ({}, ("--pool", "variance"), "expected ARM=VALUE"),
    ({}, ("--gpus", "4", "--dry-run"), "--gpus 4, but the recipe runs on 8 GPU(s)"),
    ({}, ("--price", "3", "--dry-run"), "--price prices GPU-hours: give --rate"),
    ({}, ("--rate", "nan", "--dry-run"), "--rate nan must be a positive number of completions per second per GPU"),
    ({}, ("--rate", "4", "--price", "inf", "--dry-run"), "--price inf must be a positive number per GPU-hour"),
])
def test_bad_input_is_one_error_before_anything_is_written(regime, capsys, change, args, message):
    raw = yaml.safe_load(regime["config"].read_text())
    for key, value in change.items():
        raw[key] |= value
    regime["config"].write_text(yaml.safe_dump(raw))
    assert _trainer(regime, *args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (regime["tmp"] / "out").exists()


def test_bad_recipes_and_pools_are_errors_naming_them(regime, capsys):
    short = write_jsonl(regime["tmp"] / "short.jsonl", [_row(i, "p", trajval_weight=1.0) for i in range(10)])
    assert main(["--config", str(regime["config"]), "--trainer", "verl", "--recipe", str(regime["verl"]), "--out",
                 str(regime["tmp"] / "out"), "--pool", f"trajval={short}"]) == 2
    assert "holds 10 rows and data.pool" in capsys.readouterr().err
    stray = regime["tmp"] / "stray.sh"
    stray.write_text("python3 -m verl.trainer.main_ppo data.train_batch_size=8 oops\n")
    assert _trainer(regime, recipe=stray) == 2
    assert "['oops'] among the Hydra overrides" in capsys.readouterr().err
    variables = regime["tmp"] / "variables.sh"
    variables.write_text("python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=$MODEL "
                         "'trainer.default_local_dir=${trainer.project_name}/x'\n")
    assert _trainer(regime, recipe=variables) == 2
    assert "['actor_rollout_ref.model.path=$MODEL'] hold shell variables" in capsys.readouterr().err
    no_script = regime["tmp"] / "no_script.sh"
    no_script.write_text("accelerate launch --max_steps 3\n")
    assert _trainer(regime, trainer="trl", recipe=no_script) == 2
    assert "no TRL script" in capsys.readouterr().err
    generated = regime["tmp"] / "generated.yaml"
    generated.write_text(yaml.safe_dump({"name": "g", "tasks": {"pool_size": 64, "shared_size": 8, "heldout_size": 64},
                                         "evaluation": {"min_heldout": 64}, "training": {"arms": ["uniform", "trajval"]}}))
    assert main(["--config", str(generated), "--trainer", "verl", "--recipe", str(regime["verl"]), "--out",
                 str(regime["tmp"] / "out")]) == 2
    assert "not generated 'tasks'" in capsys.readouterr().err
    # runs that never evaluate during training give the verdict nothing to compare
    silent = regime["tmp"] / "no_test_freq.sh"
    silent.write_text(VERL_RECIPE.replace("trainer.test_freq=4", "trainer.val_before_train=true"))
    assert _trainer(regime, recipe=silent) == 2
    assert "trainer.test_freq=-1: the runs would evaluate the held-out set at no training step" in \
        capsys.readouterr().err
    pytest.importorskip("trl")
    no_eval = regime["tmp"] / "no_eval.sh"
    no_eval.write_text(TRL_RECIPE.format(script=REPO / "recipes" / "trl_scripts" / "grpo_trajval.py").replace(
        "--eval_strategy steps --eval_steps 5 ", ""))
    assert _trainer(regime, trainer="trl", recipe=no_eval) == 2
    assert "evaluate the held-out set at no step (eval_strategy no)" in capsys.readouterr().err
    assert not (regime["tmp"] / "out").exists()


def test_the_configs_relative_data_paths_are_read_from_its_folder(regime, capsys, monkeypatch, tmp_path_factory):
    """As the harness reads them (issue 54, item 5): a config with data: {pool: pool.jsonl} runs the
    same from any working directory."""
    raw = yaml.safe_load(regime["config"].read_text())
    raw["data"] = {"pool": "pool.jsonl", "heldout": "heldout.jsonl"}
    regime["config"].write_text(yaml.safe_dump(raw))
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    runs = _dry_runs(regime, capsys)
    uniform = next(run for run in runs if run["arm"] == "uniform")
    assert f"data.train_files={regime['pool']}" in uniform["argv"]
    assert f"data.val_files={regime['heldout']}" in uniform["argv"]


def test_a_recipe_of_overrides_alone_gets_verls_launcher(tmp_path):
    recipe = tmp_path / "overrides.txt"
    recipe.write_text("# one or more a line\ndata.train_batch_size=8 actor_rollout_ref.rollout.n=4\n+data.x=1\n")
    read = read_recipe(recipe, "verl")
    assert (read.env, read.launcher) == ({}, VERL_LAUNCHER)
    assert read.args == ["data.train_batch_size=8", "actor_rollout_ref.rollout.n=4", "+data.x=1"]


def test_a_recipe_beginning_with_a_byte_order_mark_reads_as_without(tmp_path):
    """A recipe saved by a Windows editor begins with UTF-8's byte-order mark: it was the start of
    the first token, so the first override became verl's launcher ('\\ufeffdata.train_batch_size=8'),
    or a first comment line a launcher of its own ('\\ufeff'), in every run written."""
    text = "# the base run\ndata.train_batch_size=8 actor_rollout_ref.rollout.n=4\n"
    for body in (text, text.partition("\n")[2]):
        plain, marked = tmp_path / "plain.txt", tmp_path / "marked.txt"
        plain.write_text(body)
        marked.write_bytes(b"\xef\xbb\xbf" + body.encode())
        read = read_recipe(marked, "verl")
        assert (read.launcher, read.args) == (VERL_LAUNCHER, ["data.train_batch_size=8", "actor_rollout_ref.rollout.n=4"])
        expected = read_recipe(plain, "verl")
        assert (read.env, read.launcher, read.args) == (expected.env, expected.launcher, expected.args)


def test_a_heldout_task_in_the_pool_is_an_error(regime, capsys):
    write_jsonl(regime["heldout"], [_row(100 + i, "h") for i in range(HELDOUT_ROWS - 1)] + [_row(3, "p")])
    assert _trainer(regime) == 2
    assert "heldout row 11 (id 'p3') is also a training task" in capsys.readouterr().err


@pytest.mark.slow  # two short TRL runs on the tiny model: ~60 s here
def test_the_written_trl_runs_train_with_the_shipped_script(tmp_path, capsys, tiny_model_path):
    """The runs of both arms, as their scripts run them (recipes/trl_scripts/grpo_trajval.py, TRL's own
    GRPO on CPU), leave their held-out evaluations where the manifest says the verdict reads them."""
    from tests.conftest import arithmetic_rows

    rows = arithmetic_rows(24)
    pool = write_jsonl(tmp_path / "pool.jsonl", rows[:16])
    weighted = write_jsonl(tmp_path / "weighted.jsonl",
                           [row | {"trajval_weight": 1.0 if i < 4 else 0.05} for i, row in enumerate(rows[:16])])
    heldout = write_jsonl(tmp_path / "heldout.jsonl", rows[16:])
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"name": "tiny", "verifier": "math",
                                      "data": {"pool": str(pool), "heldout": str(heldout)},
                                      "evaluation": {"min_heldout": 8},
                                      "training": {"seeds": [0], "arms": ["uniform", "trajval"]}}))
    recipe = tmp_path / "recipe.sh"
    recipe.write_text(f"OMP_NUM_THREADS=1 {sys.executable} {REPO / 'recipes' / 'trl_scripts' / 'grpo_trajval.py'} "
                      f"--model_name_or_path {tiny_model_path} --max_steps 2 --per_device_train_batch_size 4 "
                      "--num_generations 2 --max_completion_length 8 --eval_strategy steps --eval_steps 2 "
                      "--per_device_eval_batch_size 4 --save_steps 2 --logging_steps 1 --report_to none --use_cpu\n")
    out = tmp_path / "out"
    assert main(["--config", str(config), "--trainer", "trl", "--recipe", str(recipe), "--out", str(out),
                 "--pool", f"trajval={weighted}"]) == 0
    record = json.loads((out / "runs.json").read_text())
    for run in record["runs"]:
        result = subprocess.run(["bash", str(out / run["script"])], capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
        state = json.loads((out / run["log"] / "trainer_state.json").read_text())
        evaluations = [entry for entry in state["log_history"] if "eval_reward" in entry]
        assert [entry["step"] for entry in evaluations] == [2]
        assert (out / run["log"] / "checkpoint-2" / "trainer_state.json").is_file()


# ----------------------------------------------------------------------------- the verdict of the folder


def test_the_verdict_reads_the_folder_the_runs_were_written_to(regime, capsys):
    """``trajval verdict <folder>`` needs no other argument: its runs.json names every run's arm,
    log and format, the baseline and the pools; its figures are those of the same logs given by
    --run, and a run without its log yet is named, with where to see the runs."""
    from trajval_ops.cli import verdict

    out = regime["tmp"] / "out"
    variance = write_jsonl(regime["tmp"] / "variance.jsonl", [_row(i, "p", trajval_weight=1.0)
                                                              for i in range(POOL_ROWS)])
    assert _trainer(regime, "--pool", f"variance={variance}") == 0
    record = json.loads((out / "runs.json").read_text())
    lift = {"uniform": 0.0, "trajval": 0.02, "variance": 0.01}
    for run in record["runs"][:-1]:
        write_jsonl(out / run["log"], [{"step": s, "data": {"val-core/math_dapo/acc/mean@1": round(
            0.2 + (0.01 + lift[run["arm"]]) * s + 0.003 * run["seed"], 6)}} for s in (0, 4, 8, 12)])
    capsys.readouterr()
    assert verdict.main([str(out)]) == 2
    error = capsys.readouterr().err
    assert f"1 of {len(record['runs'])} runs have no log yet ({record['runs'][-1]['name']})" in error
    assert f"--status --out {out}" in error and not (out / "verdict").exists()
    last = record["runs"][-1]
    write_jsonl(out / last["log"], [{"step": s, "data": {"val-core/math_dapo/acc/mean@1": round(
        0.2 + (0.01 + lift[last["arm"]]) * s + 0.003 * last["seed"], 6)}} for s in (0, 4, 8, 12)])
    assert verdict.main([str(out)]) == 0
    assert "80 pass rows record no cost" in capsys.readouterr().out  # its pool is read (its passes unpriced)
    from_folder = json.loads((out / "verdict" / "results.json").read_text())["training"]
    arms = [f"{arm}={out}/logs/{arm}-seed*.jsonl" for arm in ("uniform", "trajval", "variance")]
    assert verdict.main([w for arm in arms for w in ("--run", arm)] + ["--out", str(regime["tmp"] / "by_hand")]) == 0
    by_hand = json.loads((regime["tmp"] / "by_hand" / "results.json").read_text())["training"]
    # the logs hold no completions and verl saved no config beside them: the written runs' own settings
    # give them (train_batch_size 8 x rollout.n 4 a step) and the planned steps (3 epochs of 40 // 8)
    result = json.loads((out / "verdict" / "results.json").read_text())
    assert result["training"]["uniform"]["completions"] == 12 * 8 * 4
    # and the baseline's prior says what it was read from: those commands, no saved config
    assert result["priors"]["uniform"] == {"name": "none", "completions": 0, "source": (
        f"from the runs' written commands in {out / 'runs.json'} (their overrides over verl's defaults): "
        "no weighted pool")}
    assert result["training"]["trajval"]["auc_completions_minus_uniform"] is not None and "cost" in result
    assert result["runs"]["uniform"][0]["planned_steps"] == 15 and len(result["stopped_early"]) == 6
    for arm in ("uniform", "trajval", "variance"):
        by_hand[arm].pop("completions"), from_folder[arm].pop("completions")
        for key in [key for key in from_folder[arm] if key.startswith("auc_completions")]:
            by_hand[arm].pop(key), from_folder[arm].pop(key)
    assert from_folder == by_hand and len(from_folder["trajval"]["seeds"]) == 2
    assert verdict.main([str(out), "--run", f"uniform={out}/logs/uniform-seed0.jsonl"]) == 2
    assert "leave out --run" in capsys.readouterr().err


def test_the_verdict_of_a_trl_folder_counts_each_steps_completions_as_the_dry_run(regime, capsys):
    """TRL's trainer_state.json records no completions: the folder's verdict reads each step's from the
    written run's count (per_device_train_batch_size 4 x 1 process x gradient_accumulation_steps 2)."""
    pytest.importorskip("trl")
    from trajval_ops.cli import verdict

    recipe = regime["tmp"] / "trl_recipe.sh"
    recipe.write_text(TRL_RECIPE.format(script=REPO / "recipes" / "trl_scripts" / "grpo_trajval.py"))
    variance = write_jsonl(regime["tmp"] / "variance.jsonl", [_row(i, "p", trajval_weight=1.0) for i in range(POOL_ROWS)])
    assert _trainer(regime, "--pool", f"variance={variance}", trainer="trl", recipe=recipe) == 0
    out = regime["tmp"] / "out"
    for run in json.loads((out / "runs.json").read_text())["runs"]:
        history = [{"eval_rewards/accuracy_reward/mean": 0.2 + 0.01 * step * (run["arm"] != "uniform") + 0.001 * run["seed"]
                    + 0.005 * step, "step": step} for step in (5, 10, 15, 20)]
        (out / run["log"]).mkdir(parents=True)
        (out / run["log"] / "trainer_state.json").write_text(json.dumps(
            {"global_step": 20, "max_steps": 20, "log_history": history}))
    capsys.readouterr()
    assert verdict.main([str(out)]) == 0, capsys.readouterr().err
    result = json.loads((out / "verdict" / "results.json").read_text())
    assert result["training"]["uniform"]["completions"] == 20 * 8 and "cost" in result

