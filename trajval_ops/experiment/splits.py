"""The validation protocol's data splits, checked: every row's task id (the protocol joins on
``id``), held-out and tuning tasks disjoint from the training pool, enough held-out tasks. The
harness's own data unit (:func:`.protocol.prepare_data`) and the runs of a user's trainer
(:mod:`.trainer_runs`) check their splits alike."""

from __future__ import annotations

import json
from typing import Any

from trajval_ops.experiment.validation_config import ConfigError, ValidationConfig

#: the field every working copy of the data carries each row's task id in
ID_KEY = "id"


def ids_from(rows: list[dict], id_key: str, name: str) -> list[dict]:
    """``rows`` with the id at ``id_key`` as their ``id`` (the protocol's working copies; the
    user's files are not touched). A row without it, or whose ``id`` holds another value, is an
    error naming the row."""
    from trajval_ops.rows import get_path

    missing = object()
    out = []
    for position, row in enumerate(rows):
        value = get_path(row, id_key, missing)
        if value is missing or value is None:
            raise ConfigError(f"{name} row {position}: field '{id_key}' (data.id_key) is missing")
        if ID_KEY in row and row[ID_KEY] != value:
            raise ConfigError(f"{name} row {position}: field '{ID_KEY}' is {row[ID_KEY]!r} but data.id_key "
                              f"'{id_key}' is {value!r}: the protocol joins on one id; name the field that holds it")
        out.append({**row, ID_KEY: value})
    return out


def _prompt_text(row: dict) -> str:
    prompt = row.get("prompt")
    return json.dumps(prompt, sort_keys=True) if not isinstance(prompt, str) else prompt


def check_splits(splits: dict[str, list[dict]], config: ValidationConfig) -> None:
    """Ids present and unique per split; held-out and tuning splits disjoint from the training
    contexts (by id and by prompt); enough held-out tasks."""
    for name, rows in splits.items():
        seen: dict[Any, int] = {}
        for position, row in enumerate(rows):
            if ID_KEY not in row:
                raise ConfigError(f"{name} row {position}: field '{ID_KEY}' is missing (the protocol joins on it; "
                                  f"data.id_key names another field that holds the task id)")
            if row[ID_KEY] in seen:
                raise ConfigError(f"{name} row {position}: id {row[ID_KEY]!r} repeats row {seen[row[ID_KEY]]}")
            seen[row[ID_KEY]] = position
    if config.group_key:
        from trajval_ops.rows import get_path

        for position, row in enumerate(splits["context-a"]):
            if get_path(row, config.group_key, None) is None:
                raise ConfigError(f"context-a row {position} (id {row[ID_KEY]!r}): group_key field "
                                  f"'{config.group_key}' is missing (every pool task needs its group)")
    training = splits["context-a"] + splits.get("context-b", [])
    train_ids = {row[ID_KEY] for row in training}
    train_prompts = {_prompt_text(row) for row in training}
    for name in ("heldout", "tuning"):
        for position, row in enumerate(splits.get(name, [])):
            if row[ID_KEY] in train_ids or _prompt_text(row) in train_prompts:
                raise ConfigError(f"{name} row {position} (id {row[ID_KEY]!r}) is also a training task: "
                                  f"held-out and tuning tasks must be disjoint from the pool")
    if len(splits["heldout"]) < config.evaluation.min_heldout:
        raise ConfigError(f"only {len(splits['heldout'])} held-out tasks; evaluation.min_heldout is "
                          f"{config.evaluation.min_heldout}")
