"""Training runs' logged metrics, read from the files trainers write (``trajval verdict``'s input).

Each format is one reader in :data:`READERS` (the one list): ``detects(path)`` says whether a
path is in its format, ``read(path)`` returns a :class:`RunLog`, the run's numeric metrics per
step. Formats:

- ``verl``: verl's file logger (``trainer.logger=[console,file]``; ``verl.utils.tracking.FileLogger``
  writes one JSON object ``{"step": <int>, "data": {<key>: <value>}}`` per ``Tracking.log`` call
  at ``VERL_FILE_LOGGER_PATH``). The Hydra config verl saved in the log's folder
  (``.hydra/config.yaml``), where there is one, gives the run's pool, its planned steps and
  its completions per step (``data.train_batch_size`` x ``actor_rollout_ref.rollout.n``; with
  DAPO's ``algorithm.filter_groups.enable``, ``train/num_gen_batches`` x ``data.gen_batch_size``
  x ``n``).
- ``trl``: a transformers/TRL ``trainer_state.json`` (``log_history``, evaluation keys
  ``eval_*``), or an output folder: its own ``trainer_state.json`` or its last checkpoint's,
  whichever recorded more steps.
- ``tensorboard``: an event file or a folder holding event files, read with TensorBoard's own
  ``EventAccumulator`` (every scalar kept, none sampled away).
- ``table``: CSV or JSON lines with a ``step`` column and one column per metric (an empty cell
  or a missing key: not logged at that step).

A step logged twice (a resumed run logging it again) keeps the later value. Only finite numbers
are metrics. A non-finite value (a step whose grad norm or loss overflowed) is kept aside with
where it was logged (:attr:`RunLog.nonfinite`): a comparison that reads its key refuses it then.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from trajval_ops.errors import TrajvalInputError

#: A per-step count of generated completions, where a log has one under this key.
COMPLETIONS_KEY = "completions"
#: Keys that hold a held-out accuracy, by trainer: verl's core validation metric per data
#: source (``val-core/<source>/acc/mean@<n>``, ``.../reward/mean@<n>``), TRL's evaluation
#: reward per reward function (``eval_rewards/<fn>/mean``; ``eval/`` in TensorBoard) and
#: accuracies named as evaluated (``eval_accuracy``, ``eval/acc``, ``heldout_acc``, ``val_acc``, ...).
HELDOUT_KEY_PATTERNS = (
    re.compile(r"val-core/.+/(acc|reward)/mean@\d+"),
    re.compile(r"eval[_/]rewards/[^/]+/mean"),
    re.compile(r"(eval|val|test|heldout|held_out)[_/](.+[_/])?acc(uracy)?(/mean)?"),
)


@dataclass
class RunLog:
    """One run's logged metrics."""

    path: str
    format: str
    #: metric key -> {step: value}
    metrics: dict[str, dict[int, float]]
    #: the last step the log records anything at
    last_step: int
    #: the steps the run was set to train, where its files say (TRL ``max_steps``, verl's config)
    planned_steps: int | None = None
    #: completions generated at each training step (step -> count), where the files say
    completions: dict[int, float] = field(default_factory=dict)
    #: the trainer's settings, where they were found (a config saved beside the log, or the written run's command)
    config: dict | None = None
    #: where ``config`` was read, in words (a verdict's prior says it)
    config_source: str | None = None
    #: metric key -> {step: (where it was logged, the value)}: its non-finite values, not in ``metrics``
    nonfinite: dict[str, dict[int, tuple[str, float]]] = field(default_factory=dict)

    def logged_keys(self) -> set[str]:
        """Every metric key the run logs a number for, finite or not."""
        return set(self.metrics) | set(self.nonfinite)

    def heldout_keys(self) -> list[str]:
        """The keys that look like a held-out accuracy (:data:`HELDOUT_KEY_PATTERNS`)."""
        return sorted(key for key in self.logged_keys() if any(p.fullmatch(key) for p in HELDOUT_KEY_PATTERNS))

    def check_finite(self, key: str) -> None:
        """Refuse ``key`` where the run logged a non-finite value of it, naming the first place."""
        if self.nonfinite.get(key):
            where, value = self.nonfinite[key][min(self.nonfinite[key])]
            raise TrajvalInputError(f"{where}, key '{key}': value {value} is not finite")


def _number(value: Any) -> float | None:
    """A metric value (NaN and infinity included); None for what is not a number (text, lists, booleans)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _step(value: Any, where: str) -> int:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value != int(value) or value < 0):  # int() of NaN or infinity is no answer but its own error
        raise TrajvalInputError(f"{where}: step {value!r} is not a whole number >= 0")
    return int(value)


def _collect(records: Iterable[tuple[str, int, Mapping[str, Any]]], path: str, format: str) -> RunLog:
    """A RunLog from (where, step, {key: value}) records; the later value of a repeated step wins
    (finite or not)."""
    metrics: dict[str, dict[int, float]] = {}
    nonfinite: dict[str, dict[int, tuple[str, float]]] = {}
    last = -1
    for where, step, values in records:
        last = max(last, step)
        for key, value in values.items():
            number = _number(value)
            if number is None:
                continue
            finite, other = (metrics, nonfinite) if math.isfinite(number) else (nonfinite, metrics)
            finite.setdefault(key, {})[step] = number if finite is metrics else (where, number)
            other.get(key, {}).pop(step, None)
    if last < 0:
        raise TrajvalInputError(f"{path}: no step logged (not a {format} log?)")
    completions = metrics.pop(COMPLETIONS_KEY, {})
    return RunLog(path=path, format=format, metrics={k: v for k, v in metrics.items() if v}, last_step=last,
                  completions=completions, nonfinite={k: v for k, v in nonfinite.items() if v})


def _json_lines(path: Path) -> Iterable[tuple[int, Any]]:
    with open(path, encoding="utf-8-sig") as handle:  # -sig: a byte-order mark (a Windows tool's) is read past
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as err:
                    raise TrajvalInputError(f"{path}, line {number}: not JSON ({err.msg})") from None


def _first_json_line(path: Path) -> Any:
    try:
        return next(iter(_json_lines(path)), (0, None))[1]
    except (TrajvalInputError, UnicodeDecodeError):
        return None


# ----------------------------------------------------------------------------- verl


def config_value(config: Mapping | None, dotted: str) -> Any:
    """A dotted setting of a saved config; None where it or the config is absent."""
    from trajval_ops.rows import get_path

    return get_path(config, dotted, None) if isinstance(config, Mapping) else None


def verl_saved_config(log: Path) -> dict | None:
    """The Hydra config saved in a verl log's folder (``.hydra/config.yaml``), if any."""
    import yaml

    saved = log.parent / ".hydra" / "config.yaml"
    if not saved.is_file():
        return None
    config = yaml.safe_load(saved.read_text(encoding="utf-8"))
    return config if isinstance(config, dict) else None


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def verl_completions_per_step(config: Mapping | None, data_by_step: Mapping[int, float] | None) -> Callable | None:
    """A function step -> completions generated at that step, from verl's saved config: the
    batch times ``rollout.n``; with DAPO's group filter, the generation batches the step logged
    (``train/num_gen_batches``) times ``data.gen_batch_size`` times ``n``. None where the config
    does not give them."""
    n = _whole(config_value(config, "actor_rollout_ref.rollout.n"))
    if n is None:
        return None
    if config_value(config, "algorithm.filter_groups.enable") is True:
        gen_batch = _whole(config_value(config, "data.gen_batch_size"))
        if gen_batch is None or not data_by_step:
            return None
        return lambda step: data_by_step[step] * gen_batch * n if step in data_by_step else None
    batch = _whole(config_value(config, "data.train_batch_size"))
    return None if batch is None else (lambda step: float(batch * n))


class VerlFileLog:
    name = "verl"

    @staticmethod
    def detects(path: Path) -> bool:
        first = _first_json_line(path) if path.is_file() else None
        return isinstance(first, dict) and set(first) >= {"step", "data"} and isinstance(first["data"], dict)

    @staticmethod
    def read(path: Path) -> RunLog:
        def records():
            for number, record in _json_lines(path):
                where = f"{path}, line {number}"
                if not isinstance(record, dict) or not isinstance(record.get("data"), dict) or "step" not in record:
                    raise TrajvalInputError(f"{where}: not a verl file-logger record "
                                            '{"step": .., "data": {..}}')
                yield where, _step(record["step"], where), record["data"]

        run = _collect(records(), str(path), VerlFileLog.name)
        run.config = verl_saved_config(path)
        run.config_source = "the verl config saved beside the runs (.hydra/config.yaml)" if run.config else None
        run.planned_steps = _whole(config_value(run.config, "trainer.total_training_steps"))
        fill_verl_completions(run)
        return run


def fill_verl_completions(run: RunLog) -> None:
    """A verl run's completions at each step from its config (:func:`verl_completions_per_step`),
    where its log logs none."""
    if run.completions:
        return
    per_step = verl_completions_per_step(run.config, run.metrics.get("train/num_gen_batches"))
    if per_step is not None:
        counts = {step: per_step(step) for step in range(1, run.last_step + 1)}
        run.completions = {step: count for step, count in counts.items() if count is not None}


# ----------------------------------------------------------------------------- TRL


def trl_state_file(path: Path) -> Path | None:
    """A TRL output's ``trainer_state.json``: the file itself, or in a folder its own or its last
    checkpoint's (``checkpoint-<step>``), whichever recorded more steps (the folder's own on a tie)."""
    if path.is_file():
        return path if path.name == "trainer_state.json" else None
    candidates = [path / "trainer_state.json"] + sorted(
        path.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(re.sub(r"\D", "", p.parent.name) or 0))[-1:]
    candidates = [p for p in candidates if p.is_file()]
    if not candidates:
        return None

    def steps(state: Path) -> int:
        try:
            return int(json.loads(state.read_text(encoding="utf-8")).get("global_step") or 0)
        except (ValueError, AttributeError):
            return -1

    return max(candidates, key=lambda p: (steps(p), p.parent == path))


class TrlTrainerState:
    name = "trl"

    @staticmethod
    def detects(path: Path) -> bool:
        if path.is_dir():
            return trl_state_file(path) is not None
        if path.name == "trainer_state.json":
            return True
        if path.suffix == ".json":
            try:
                return "log_history" in json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, TypeError, UnicodeDecodeError):
                return False
        return False

    @staticmethod
    def read(path: Path) -> RunLog:
        state_file = trl_state_file(path) if path.is_dir() else path
        if state_file is None:
            raise TrajvalInputError(f"{path}: no trainer_state.json in it or in a checkpoint-* folder")
        try:
            state = json.loads(state_file.read_text(encoding="utf-8"))
        except ValueError as err:
            raise TrajvalInputError(f"{state_file}: not JSON ({err})") from None
        history = state.get("log_history") if isinstance(state, dict) else None
        if not isinstance(history, list):
            raise TrajvalInputError(f"{state_file}: no log_history list (not a trainer_state.json?)")

        def records():
            for index, entry in enumerate(history):
                where = f"{state_file}, log_history[{index}]"
                if not isinstance(entry, dict) or "step" not in entry:
                    raise TrajvalInputError(f"{where}: an entry without a step")
                yield where, _step(entry["step"], where), {k: v for k, v in entry.items() if k != "step"}

        run = _collect(records(), str(state_file), TrlTrainerState.name)
        run.last_step = max(run.last_step, int(state.get("global_step") or 0))
        run.planned_steps = _whole(state.get("max_steps"))
        return run


# ----------------------------------------------------------------------------- TensorBoard


def _event_files(path: Path) -> list[Path]:
    return sorted(path.glob("events.out.tfevents.*")) if path.is_dir() else [path]


class TensorBoardEvents:
    name = "tensorboard"

    @staticmethod
    def detects(path: Path) -> bool:
        return bool(_event_files(path)) and all(p.name.startswith("events.out.tfevents.") for p in _event_files(path))

    @staticmethod
    def read(path: Path) -> RunLog:
        try:
            from tensorboard.backend.event_processing import event_accumulator
        except ImportError:
            raise TrajvalInputError(f"{path}: reading TensorBoard events needs the tensorboard package "
                                    "(pip install 'trajval_ops[runs]')") from None

        def records():
            for events in _event_files(path):
                # size_guidance 0 keeps every scalar: the default samples 10,000 per tag
                accumulator = event_accumulator.EventAccumulator(
                    str(events), size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
                accumulator.Reload()
                for tag in accumulator.Tags()["scalars"]:
                    for event in accumulator.Scalars(tag):
                        yield f"{events}, tag '{tag}'", _step(event.step, f"{events}, tag '{tag}'"), {tag: event.value}
                for tag in accumulator.Tags()["tensors"]:  # TF2-style scalars (tf.summary.scalar)
                    for event in accumulator.Tensors(tag):
                        value = _tensor_scalar(event.tensor_proto)
                        if value is not None:
                            yield f"{events}, tag '{tag}'", _step(event.step, f"{events}, tag '{tag}'"), {tag: value}

        return _collect(records(), str(path), TensorBoardEvents.name)


def _tensor_scalar(proto) -> float | None:
    from tensorboard.util import tensor_util

    array = tensor_util.make_ndarray(proto)
    return float(array) if array.shape == () and array.dtype.kind in "fiu" else None


# ----------------------------------------------------------------------------- CSV / JSON lines


class PlainTable:
    name = "table"

    @staticmethod
    def detects(path: Path) -> bool:
        if not path.is_file():
            return False
        if path.suffix.lower() == ".csv":
            return True
        first = _first_json_line(path)
        return isinstance(first, dict) and "step" in first and "data" not in first

    @staticmethod
    def read(path: Path) -> RunLog:
        if path.suffix.lower() == ".csv":
            with open(path, encoding="utf-8-sig", newline="") as handle:  # Excel's CSV begins with a byte-order mark
                rows = [(f"{path}, row {number}", row) for number, row in enumerate(csv.DictReader(handle), 2)]
            if rows and "step" not in rows[0][1]:
                raise TrajvalInputError(f"{path}: no 'step' column (columns: {', '.join(rows[0][1])})")
            rows = [(where, {key: _cell(value, f"{where}, column '{key}'") for key, value in row.items()})
                    for where, row in rows]
        else:
            rows = [(f"{path}, line {number}", row) for number, row in _json_lines(path)]

        def records():
            for where, row in rows:
                if not isinstance(row, dict) or row.get("step") is None:
                    raise TrajvalInputError(f"{where}: no 'step'")
                yield where, _step(row["step"], where), {k: v for k, v in row.items() if k != "step"}

        return _collect(records(), str(path), PlainTable.name)


def _cell(text: str | None, where: str) -> float | None:
    """A CSV cell as a number; empty: not logged."""
    if text is None or not text.strip():
        return None
    try:
        return float(text)
    except ValueError:
        raise TrajvalInputError(f"{where}: {text!r} is not a number") from None


#: The formats, in the order they are tried on a path.
READERS = (VerlFileLog, TrlTrainerState, TensorBoardEvents, PlainTable)
FORMATS = tuple(reader.name for reader in READERS)


def read_run(path: str | Path, format: str | None = None) -> RunLog:
    """One run's log, in ``format`` (one of :data:`FORMATS`) or the first format that detects it."""
    path = Path(path)
    if not path.exists():
        raise TrajvalInputError(f"{path}: no such file or folder")
    if format is not None:
        by_name = {reader.name: reader for reader in READERS}
        if format not in by_name:
            raise TrajvalInputError(f"format {format!r} is not one of {', '.join(FORMATS)}")
        return by_name[format].read(path)
    for reader in READERS:
        if reader.detects(path):
            return reader.read(path)
    raise TrajvalInputError(f"{path}: not a run log this tool reads ({', '.join(FORMATS)}); name the format "
                            "with --format if it is one of them")
