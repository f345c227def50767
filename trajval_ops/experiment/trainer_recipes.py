"""A user's own base recipe for ``trajval validate --trainer``: read, turned into one run per arm
and seed, and counted.

- **verl**: a file holding the Hydra overrides (one or more a line, ``#`` comments) or the whole
  command (``python3 -m verl.trainer.main_ppo key=value ...``, lines joined by ``\\``, leading
  ``NAME=value`` environment assignments). A run is that command with the arm's keys set
  (:func:`verl_run_args`).
- **trl**: a file holding the command that runs the user's TRL script (``accelerate launch
  --num_processes 8 train_grpo.py --model_name_or_path ... --max_steps 200 ...``, or
  ``python train_grpo.py ...``); the script parses its arguments with TRL's ``TrlParser`` and
  :class:`trajval_ops.samplers.trl.TrajvalScriptArguments` and builds a ``TrajvalGRPOTrainer``
  (docs/howto/check_a_prior.md). A run is that command with the arm's arguments set
  (:func:`trl_run_args`).

The recipe decides everything a run trains with; a run sets only its pool (and the weighting),
its held-out set, its seed, its log and its name, replacing the recipe's values of those keys.
The completions a run generates are counted from the recipe as the trainer counts them
(:func:`verl_counts`, :func:`trl_counts`), for the dry run's price.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trajval_ops.experiment.validation_config import ConfigError

#: the trainers whose runs ``--trainer`` writes
TRAINERS = ("verl", "trl")
#: the launcher of a verl recipe that gives overrides only
VERL_LAUNCHER = ("python3", "-m", "verl.trainer.main_ppo")
#: verl's own defaults of the keys a run's completions are counted from, as its ``ppo_trainer``
#: config composes them (verl 0.7.1 and 0.9.1; tests/test_trainer_runs.py composes it and compares)
VERL_DEFAULTS: dict[str, Any] = {
    "data.train_batch_size": 1024, "actor_rollout_ref.rollout.n": 1, "trainer.total_epochs": 30,
    "trainer.total_training_steps": None, "trainer.test_freq": -1, "trainer.val_before_train": True,
    "actor_rollout_ref.rollout.val_kwargs.n": 1, "data.max_response_length": 512,
    "trainer.n_gpus_per_node": 8, "trainer.nnodes": 1, "trainer.logger": ["console", "wandb"],
}
#: what a prior arm's verl run sets: verl 0.9's dataset hook (trajval_ops.samplers.verl_dataset)
VERL_DATASET = {"data.custom_cls.path": "pkg://trajval_ops.samplers.verl_dataset",
                "data.custom_cls.name": "TrajvalVerlDataset"}
#: the environment variable verl's file logger writes to (verl/utils/tracking.py, FileLogger)
VERL_LOG_ENV = "VERL_FILE_LOGGER_PATH"
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
#: ``$NAME``, ``${NAME}``, ``$(...)``: the shell's; Hydra's own interpolations (``${a.b}``, ``${oc.env:X}``) pass
_SHELL_EXPANSION = re.compile(r"\$(\(|[A-Za-z_]|\{[A-Za-z_][A-Za-z0-9_]*\})")
_OVERRIDE = re.compile(r"^(\+\+|\+|~)?([A-Za-z_][\w\-@]*(?:\.[\w\-@]+)*)=")


@dataclass
class Recipe:
    """A base recipe: environment assignments, the launcher, and the arguments after it."""

    trainer: str
    source: str
    env: dict[str, str] = field(default_factory=dict)
    launcher: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)


def read_recipe(path: str | Path, trainer: str) -> Recipe:
    """The recipe in ``path`` for ``trainer`` (see the module doc); an unreadable one is a
    :class:`ConfigError` naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark would start the first token
    except OSError as error:
        raise ConfigError(f"--recipe {path}: {error.strerror or error}") from None
    try:
        tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as error:
        raise ConfigError(f"--recipe {path}: not a command line: {error}") from None
    shell = [token for token in tokens if _SHELL_EXPANSION.search(token)]
    if shell:
        raise ConfigError(f"--recipe {path}: {shell[:3]} hold shell variables or commands, which a run written for "
                          "another shell or a Ray job would not expand as your script does: write their values "
                          "(`bash -x` on your script prints the command it runs)")
    env = {}
    while tokens and _ENV_ASSIGNMENT.match(tokens[0]):
        name, value = tokens.pop(0).split("=", 1)
        env[name] = value
    recipe = Recipe(trainer, str(path), env)
    if trainer == "verl":
        at = next((i for i, token in enumerate(tokens) if _OVERRIDE.match(token)), len(tokens))
        recipe.launcher, recipe.args = tokens[:at] or list(VERL_LAUNCHER), tokens[at:]
        strays = [token for token in recipe.args if not _OVERRIDE.match(token)]
        if strays:
            raise ConfigError(f"--recipe {path}: {strays[:3]} among the Hydra overrides (key=value) after the launcher")
    else:
        at = next((i for i, token in enumerate(tokens) if token.endswith(".py")), None)
        if at is None:
            raise ConfigError(f"--recipe {path}: no TRL script (a .py file) in the command: name the script that "
                              "trains, e.g. accelerate launch train_grpo.py --model_name_or_path ...")
        script = Path(tokens[at]).expanduser()
        if not script.is_absolute() and (path.parent / script).is_file():
            tokens[at] = str((path.parent / script).resolve())  # a job runs in another folder
        elif script.is_file():
            tokens[at] = str(script.resolve())
        recipe.launcher, recipe.args = tokens[:at + 1], tokens[at + 1:]
    return recipe


# ----------------------------------------------------------------------------- verl


def override_key(token: str) -> str:
    """The config key a Hydra override sets (``+data.trajval.seed=1`` -> ``data.trajval.seed``)."""
    match = _OVERRIDE.match(token)
    return match.group(2) if match else token


def verl_values(recipe: Recipe) -> dict[str, Any]:
    """The recipe's overrides as ``{key: value}``, values read as Hydra reads plain ones (YAML)."""
    values = {}
    for token in recipe.args:
        raw = token.split("=", 1)[1]
        try:
            values[override_key(token)] = yaml.safe_load(raw) if raw else None
        except yaml.YAMLError:
            values[override_key(token)] = raw
    return values


def verl_run_settings(argv: list[str]) -> dict[str, Any]:
    """A written verl run's settings as its command gives them: verl's defaults of the counted
    keys (:data:`VERL_DEFAULTS`) under the command's overrides, ``{dotted key: value}``."""
    return VERL_DEFAULTS | verl_values(Recipe("verl", "", args=[token for token in argv if _OVERRIDE.match(token)]))


def verl_setting(recipe: Recipe, key: str) -> Any:
    """A counted key's value: the recipe's, else verl's default (:data:`VERL_DEFAULTS`)."""
    return verl_values(recipe).get(key, VERL_DEFAULTS[key])


def verl_run_args(recipe: Recipe, sets: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The recipe's overrides with ``sets`` (``{key: value}``; a key whose name starts with ``+``
    adds one verl's schema does not list) in place of the recipe's values of those keys; and the
    keys replaced."""
    keys = {key.lstrip("+") for key in sets}
    kept = [token for token in recipe.args if override_key(token) not in keys]
    replaced = sorted({override_key(token) for token in recipe.args} & keys)
    return kept + [f"{key}={hydra_value(value)}" for key, value in sets.items()], replaced


def hydra_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(hydra_value, value)) + "]"
    return "null" if value is None else str(value)


def verl_logger(recipe: Recipe) -> list[str]:
    """The recipe's loggers with verl's file logger added (the verdict reads its JSONL)."""
    loggers = verl_setting(recipe, "trainer.logger")
    loggers = [loggers] if isinstance(loggers, str) else list(loggers or [])
    return loggers + ["file"] if "file" not in loggers else loggers


def verl_counts(recipe: Recipe, pool_rows: int, heldout_rows: int, weighted: bool) -> dict[str, int]:
    """Steps, completions and GPUs of one verl run, as verl 0.9.1 counts its steps: ``len(train
    dataloader) * total_epochs`` (drop_last) capped by ``total_training_steps``; a weighted run
    serves its epochs inside one pass of :class:`TrajvalVerlDataset` (``trainer.total_epochs=1``);
    a validation before training (``val_before_train``), every ``test_freq`` steps and at the last."""
    get = lambda key: _positive_int(verl_setting(recipe, key), key, recipe.source)  # noqa: E731
    batch, epochs = get("data.train_batch_size"), get("trainer.total_epochs")
    steps = (epochs * pool_rows) // batch if weighted else epochs * (pool_rows // batch)
    cap = verl_setting(recipe, "trainer.total_training_steps")
    if cap is not None:
        steps = min(steps, _positive_int(cap, "trainer.total_training_steps", recipe.source))
    if steps < 1:
        raise ConfigError(f"--recipe {recipe.source}: {pool_rows} pool rows make no batch of data.train_batch_size "
                          f"{batch}")
    every = verl_setting(recipe, "trainer.test_freq")
    if not (isinstance(every, int) and not isinstance(every, bool) and every > 0):
        raise ConfigError(f"--recipe {recipe.source}: trainer.test_freq={every!r}: the runs would evaluate the "
                          "held-out set at no training step (at most before training), so trajval verdict would "
                          "have nothing to compare; set trainer.test_freq to a positive number of steps")
    evaluations = int(bool(verl_setting(recipe, "trainer.val_before_train"))) + steps // every + int(steps % every != 0)
    return {"steps": steps, "training_completions": steps * batch * get("actor_rollout_ref.rollout.n"),
            "evaluation_completions": evaluations * get("actor_rollout_ref.rollout.val_kwargs.n") * heldout_rows,
            "evaluations": evaluations, "max_completion_tokens": get("data.max_response_length"),
            "gpus": get("trainer.n_gpus_per_node") * get("trainer.nnodes")}


def _positive_int(value: Any, key: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"--recipe {source}: {key}={value!r}: the dry run counts completions from it; it must be a "
                          "positive integer")
    return value


# ----------------------------------------------------------------------------- TRL


def flag_name(token: str) -> str | None:
    """``max_steps`` for ``--max_steps``, ``--max-steps`` or ``--max_steps=3``; None for a value."""
    if not token.startswith("--") or len(token) == 2:
        return None
    return token[2:].split("=", 1)[0].replace("-", "_")


def trl_run_args(recipe: Recipe, sets: dict[str, Any], drops: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """The recipe's script arguments with ``sets`` (``{flag: value}``) in place of the recipe's
    values of those flags, and ``drops`` removed; and the flags replaced."""
    names = set(sets) | set(drops)
    kept, replaced, skip_value = [], set(), False
    for token in recipe.args:
        if skip_value:
            skip_value = False
            if flag_name(token) is None:
                continue
        name = flag_name(token)
        if name in names:
            replaced.add(name)
            skip_value = "=" not in token
            continue
        kept.append(token)
    for name, value in sets.items():
        kept += [f"--{name}", str(value)]
    return kept, sorted(replaced)


def trl_processes(recipe: Recipe) -> int:
    """The processes (GPUs) the launcher starts: accelerate's ``--num_processes``, torchrun's
    ``--nproc_per_node``; 1 for a plain ``python``."""
    tokens = recipe.launcher
    for i, token in enumerate(tokens):
        name = flag_name(token)
        if name in ("num_processes", "nproc_per_node"):
            value = token.split("=", 1)[1] if "=" in token else (tokens[i + 1] if i + 1 < len(tokens) else "")
            if not value.isdigit() or int(value) < 1:
                raise ConfigError(f"--recipe {recipe.source}: {token} {value}: a positive number of processes")
            return int(value)
    return 1


def trl_settings(args: list[str], source: str):
    """The run's settings as the script's ``TrlParser`` reads its arguments (its ``--config`` YAML
    first, the command line over it), before ``GRPOConfig`` checks them against this process's world
    size (a run of 8 processes is read here, by one). Arguments of the script's own dataclasses
    are left to it."""
    from trl import GRPOConfig, ModelConfig, ScriptArguments, TrlParser

    from trajval_ops.samplers.trl import TrajvalScriptArguments

    parser = TrlParser((ScriptArguments, GRPOConfig, ModelConfig, TrajvalScriptArguments))
    try:
        config_at = args.index("--config") if "--config" in args else None
        if config_at is not None:
            with open(args[config_at + 1]) as handle:
                parser.set_defaults_with_config(**{k: v for k, v in (yaml.safe_load(handle) or {}).items() if k != "env"})
        namespace, _ = parser.parse_known_args(args)
    except (SystemExit, OSError, IndexError, yaml.YAMLError) as error:
        raise ConfigError(f"--recipe {source}: TRL does not accept the script's arguments: {error}") from None
    return namespace


def trl_counts(recipe: Recipe, run_args: list[str], heldout_rows: int) -> dict[str, int]:
    """Steps, completions and GPUs of one TRL GRPO run: ``max_steps`` optimizer steps, each
    generating ``per_device_train_batch_size x processes x gradient_accumulation_steps /
    num_iterations`` completions; an evaluation of the held-out set (``num_generations_eval`` per
    prompt) every ``eval_steps`` with ``eval_strategy: steps``."""
    config = trl_settings(run_args, recipe.source)
    if config.max_steps is None or config.max_steps < 1:
        raise ConfigError(f"--recipe {recipe.source}: give --max_steps: the arms are compared at equal steps, and the "
                          "dry run counts completions from it (num_train_epochs leaves it to the dataloader)")
    processes, steps = trl_processes(recipe), config.max_steps
    per_step = config.per_device_train_batch_size * processes * config.gradient_accumulation_steps
    evaluations = 0
    if str(getattr(config.eval_strategy, "value", config.eval_strategy)) == "steps":
        every = config.eval_steps or config.logging_steps
        every = int(every * steps) if every < 1 else int(every)  # a fraction of the steps, as Trainer reads it
        evaluations = steps // max(every, 1)
    if evaluations == 0:
        raise ConfigError(f"--recipe {recipe.source}: the runs would evaluate the held-out set at no step "
                          f"(eval_strategy {getattr(config.eval_strategy, 'value', config.eval_strategy)}), so "
                          "trajval verdict would have nothing to compare; give --eval_strategy steps and --eval_steps")
    per_prompt = config.num_generations_eval or config.num_generations
    return {"steps": steps, "training_completions": steps * per_step // config.num_iterations,
            "evaluation_completions": evaluations * per_prompt * heldout_rows, "evaluations": evaluations,
            "max_completion_tokens": config.max_completion_length or 0, "gpus": processes}
