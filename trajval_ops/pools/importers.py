"""Import RL task pools (verl/DAPO/GURU, OpenRLHF, GSM8K, open-r1) into one canonical JSONL.

Canonical row (every original field is kept; the importer adds or normalises only these):

- ``prompt``: chat list ``[{"role": "user", "content": ...}]`` (a string prompt is wrapped;
  a JSON-string chat list is decoded);
- ``reward_model``: a dict (decoded when it was a JSON string) whose ``ground_truth`` is a
  string (non-string ground truths are written as compact JSON, see
  :func:`~trajval_ops.pools.answers.canonical_ground_truth`);
- ``data_source``: kept, else taken from the format's source field, else ``data_source`` (the
  CLI's ``--data-source``), else left out: verl picks a row's reward by it (``math_dapo``: DAPO's
  "Answer:" reward), so no name is made up for it (a format's name is none: ``open-r1`` for a
  Polaris row would pick no reward verl has); the report counts such rows;
- ``extra_info``: kept as it was (dict or JSON string); added as ``{"index": task_id}`` when
  absent;
- ``task_id``: the row's id (first present id key, as a string), else the prompt hash (or
  ``row-<position>`` with ``id_fallback="position"``);
- ``trajval_prompt_hash``: the prompt-content hash (:mod:`trajval_ops.pools.identity`).

Rows are deduplicated by prompt hash, keeping the first occurrence (the raw DAPO-Math-17k
release repeats each problem about 100 times).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Iterable, Iterator, Optional

from loguru import logger

from trajval_ops.pools.answers import BOXED_MARKER, GSM8K_MARKER, canonical_ground_truth, extract_answer
from trajval_ops.pools.identity import PROMPT_HASH, TASK_ID, prompt_hash, prompt_messages
from trajval_ops.atomic import atomic_open, check_outputs_spare_inputs, write_json
from trajval_ops.pools.io import write_rows
from trajval_ops.pools.io import read_rows
from trajval_ops.errors import TrajvalInputError
from trajval_ops.rows import get_path, row_label

ID_FALLBACKS = ("hash", "position")
ON_CONFLICT = ("error", "keep-first")
ON_DUPLICATE = ("keep-first", "error")


@dataclass(frozen=True)
class PoolFormat:
    """Where a format keeps its fields. Each key list is tried in order; dotted paths allowed."""

    name: str
    prompt_keys: tuple[str, ...]
    answer_keys: tuple[str, ...]
    id_keys: tuple[str, ...]
    answer_extract: str = "none"
    data_source_key: Optional[str] = "data_source"
    #: fields holding a worked solution: under ``answer_extract: auto`` their final answer is cut
    #: out (``####`` or the last ``\\boxed{}``), and one that marks none is an error, not the truth
    worked_solution_keys: tuple[str, ...] = ()


_VERL = PoolFormat("verl", ("prompt",), ("reward_model.ground_truth",),
                   (TASK_ID, "extra_info.index", "extra_info.id"))

FORMATS: dict[str, PoolFormat] = {
    "verl": _VERL,
    "dapo": replace(_VERL, name="dapo"),
    "guru": replace(_VERL, name="guru"),
    "openrlhf": PoolFormat("openrlhf", ("input",), ("label",), (TASK_ID, "id", "index"),
                           data_source_key="datasource"),
    "gsm8k": PoolFormat("gsm8k", ("question",), ("answer",), (TASK_ID, "id", "index"),
                        answer_extract="gsm8k"),
    "open-r1": PoolFormat("open-r1", ("problem",), ("answer", "solution"), (TASK_ID, "uuid", "id"),
                          answer_extract="auto", worked_solution_keys=("solution",)),
}

#: the base under ``--format auto`` when no preset fits the first row and both the prompt and the
#: answer key are given: the row's own fields, named ``custom``
CUSTOM = PoolFormat("custom", (), (), (TASK_ID, "id", "index"), data_source_key=None)


def detect_format(row: dict) -> PoolFormat:
    """Guess the format from the first row's fields."""
    if get_path(row, "reward_model.ground_truth", None) is not None or "reward_model" in row:
        return FORMATS["verl"]
    if "input" in row and "label" in row:
        return FORMATS["openrlhf"]
    if "question" in row and "answer" in row:
        return FORMATS["gsm8k"]
    if "problem" in row:
        return FORMATS["open-r1"]
    raise TrajvalInputError(
        f"cannot tell the pool format from the first row's fields {sorted(row)}; pass --format "
        f"({', '.join(FORMATS)}) or both --prompt-key and --answer-key"
    )


def resolve_format(first_row: dict, name: str = "auto", *, prompt_key: Optional[str] = None,
                   answer_key: Optional[str] = None, id_keys: Optional[Iterable[str]] = None,
                   answer_extract: Optional[str] = None) -> PoolFormat:
    """A named (or detected) format with the user's key overrides applied.

    Under ``auto`` with both keys given, rows no preset detects (``{"meta": {...}}``) are read on
    the ``custom`` base; a detected preset keeps its answer extraction, ids and ``data_source``.
    """
    if name == "auto":
        try:
            fmt = detect_format(first_row)
        except TrajvalInputError:
            if not (prompt_key and answer_key):
                raise
            fmt = CUSTOM
    elif name in FORMATS:
        fmt = FORMATS[name]
    else:
        raise TrajvalInputError(f"unknown pool format {name!r}; choose auto or one of {sorted(FORMATS)}")
    changes: dict[str, Any] = {}
    if prompt_key:
        changes["prompt_keys"] = (prompt_key,)
    if answer_key:
        changes["answer_keys"] = (answer_key,)
    if id_keys is not None:
        changes["id_keys"] = tuple(id_keys)
    if answer_extract:
        changes["answer_extract"] = answer_extract
    return replace(fmt, **changes)


@dataclass
class ImportReport:
    """Figures of one import, logged and written beside the output."""

    input: str
    output: str
    format: dict
    rows_read: int = 0
    rows_written: int = 0
    duplicates_removed: int = 0
    max_copies_of_one_prompt: int = 0
    duplicate_ground_truth_conflicts: int = 0
    ids_from_field: int = 0
    ids_from_fallback: int = 0
    id_fallback: str = "hash"
    #: duplicates whose own id differs from the kept row's (each listed in ``duplicates_file``)
    ids_collapsed: int = 0
    duplicates_file: Optional[str] = None
    #: rows written without a data_source (none of their own, no --data-source)
    rows_without_data_source: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def canonical_rows(rows: Iterable[dict], fmt: PoolFormat, report: ImportReport, *,
                   id_fallback: str = "hash", on_conflict: str = "error", on_duplicate: str = "keep-first",
                   data_source: Optional[str] = None,
                   on_collapse: Optional[Callable[[dict], None]] = None) -> Iterator[dict]:
    """Canonicalise and deduplicate rows (lazily, so huge pools stream).

    A copy of an earlier prompt is dropped (``on_duplicate="keep-first"``); when its own id
    differs from the kept row's, ``on_collapse`` receives ``{dropped_row, dropped_id, kept_row,
    kept_id, prompt_hash}``. ``on_duplicate="error"`` refuses such a copy instead, naming both rows.

    :raises TrajvalInputError: naming the row and field for a missing/empty prompt or ground
        truth, an answer without its marker, two different prompts with one id, or (with
        ``on_conflict="error"``) copies of one prompt with different ground truths.
    """
    if id_fallback not in ID_FALLBACKS:
        raise TrajvalInputError(f"id_fallback must be one of {ID_FALLBACKS}, got {id_fallback!r}")
    if on_conflict not in ON_CONFLICT:
        raise TrajvalInputError(f"on_conflict must be one of {ON_CONFLICT}, got {on_conflict!r}")
    if on_duplicate not in ON_DUPLICATE:
        raise TrajvalInputError(f"on_duplicate must be one of {ON_DUPLICATE}, got {on_duplicate!r}")
    first_seen: dict[str, tuple[int, str, str]] = {}  # prompt hash -> (position, ground truth, id)
    copies: Counter = Counter()
    id_owner: dict[str, tuple[int, str]] = {}  # task id -> (position, prompt hash) of the row that first had it
    for position, row in enumerate(rows):
        report.rows_read += 1
        prompt_key, prompt = _first_present(row, fmt.prompt_keys)
        if prompt_key is None:
            raise TrajvalInputError(f"{row_label(row, position)}: prompt field "
                                    f"{_names(fmt.prompt_keys)} is missing")
        try:
            messages = prompt_messages(prompt)
            digest = prompt_hash(prompt)
        except ValueError as err:
            raise TrajvalInputError(f"{row_label(row, position)}: field '{prompt_key}': {err}") from None
        ground_truth = _ground_truth(row, position, fmt)
        copies[digest] += 1
        if digest in first_seen:
            kept_position, kept_truth, kept_id = first_seen[digest]
            dropped_id = _own_id(row, position, fmt, digest, id_fallback)
            _claim_id(id_owner, dropped_id, digest, row, position)
            if dropped_id != kept_id:
                if on_duplicate == "error":
                    raise TrajvalInputError(
                        f"{row_label(row, position)}: same prompt as row {kept_position} (task id {kept_id!r}) "
                        f"under another id {dropped_id!r}; deduplicate the pool first, or pass "
                        f"--on-duplicate keep-first to keep the first and list the others in a side file"
                    )
                report.ids_collapsed += 1
                if on_collapse is not None:
                    on_collapse({"dropped_row": position, "dropped_id": dropped_id, "kept_row": kept_position,
                                 "kept_id": kept_id, "prompt_hash": digest})
            if kept_truth != ground_truth:
                report.duplicate_ground_truth_conflicts += 1
                if on_conflict == "error":
                    raise TrajvalInputError(
                        f"{row_label(row, position)}: same prompt as row {kept_position} but ground truth "
                        f"{ground_truth!r} != {kept_truth!r} (field {_names(fmt.answer_keys)}); fix the "
                        f"pool or pass --on-conflict keep-first"
                    )
            continue
        task_id = _task_id(row, position, fmt, digest, id_fallback, report)
        first_seen[digest] = (position, ground_truth, task_id)
        _claim_id(id_owner, task_id, digest, row, position)
        canonical = _canonical_row(row, fmt, prompt_key, messages, ground_truth, task_id, digest, data_source)
        report.rows_without_data_source += canonical.get("data_source") is None
        yield canonical
    report.duplicates_removed = report.rows_read - len(first_seen)
    report.max_copies_of_one_prompt = max(copies.values(), default=0)


def import_pool(input_path: str, output_path: str, *, format_name: str = "auto",
                prompt_key: Optional[str] = None, answer_key: Optional[str] = None,
                id_keys: Optional[Iterable[str]] = None, answer_extract: Optional[str] = None,
                id_fallback: str = "hash", on_conflict: str = "error", on_duplicate: str = "keep-first",
                data_source: Optional[str] = None, report_path: Optional[str] = None,
                duplicates_path: Optional[str] = None, progress: bool = True) -> ImportReport:
    """Read a JSONL/parquet pool, canonicalise and deduplicate it, write JSONL atomically.

    Writes a JSON report to ``report_path`` (default ``<output>.report.json``) and, for every
    dropped copy whose id differs from the kept row's, a line to ``duplicates_path`` (default
    ``<output>.duplicates.jsonl``: which id collapsed into which); returns the report.
    """
    report_path = report_path or f"{output_path}.report.json"
    duplicates_path = duplicates_path or f"{output_path}.duplicates.jsonl"
    check_outputs_spare_inputs({"output": output_path, "report": report_path, "duplicates file": duplicates_path},
                               {"input pool": input_path})
    rows = read_rows(input_path)
    try:
        first = next(rows)
    except StopIteration:
        raise TrajvalInputError(f"{input_path}: the pool is empty") from None
    fmt = resolve_format(first, format_name, prompt_key=prompt_key, answer_key=answer_key,
                         id_keys=id_keys, answer_extract=answer_extract)
    report = ImportReport(input=str(input_path), output=str(output_path), format=asdict(fmt),
                          id_fallback=id_fallback)
    logger.info(f"importing {input_path} as {fmt.name}: prompt {_names(fmt.prompt_keys)}, "
                f"ground truth {_names(fmt.answer_keys)} ({fmt.answer_extract}), ids {_names(fmt.id_keys)}")
    stream = _chain_first(first, rows)
    if progress:
        from tqdm import tqdm

        stream = tqdm(stream, desc="import", unit=" rows", mininterval=2.0)
    report.duplicates_file = str(duplicates_path)
    with atomic_open(report.duplicates_file) as collapsed:
        def on_collapse(record: dict) -> None:
            collapsed.write(json.dumps(record, ensure_ascii=False) + "\n")

        write_rows(output_path, canonical_rows(stream, fmt, report, id_fallback=id_fallback,
                                                on_conflict=on_conflict, on_duplicate=on_duplicate,
                                                data_source=data_source, on_collapse=on_collapse))
    report.rows_written = report.rows_read - report.duplicates_removed
    logger.info(f"read {report.rows_read} rows, wrote {report.rows_written} unique tasks to {output_path} "
                f"({report.duplicates_removed} duplicates removed, at most {report.max_copies_of_one_prompt} "
                f"copies of one prompt, {report.duplicate_ground_truth_conflicts} ground-truth conflicts; "
                f"ids: {report.ids_from_field} from fields, {report.ids_from_fallback} by {id_fallback})")
    if report.rows_without_data_source:
        logger.warning(f"{report.rows_without_data_source} rows have no data_source, which verl chooses a row's "
                       "reward by: pass --data-source (e.g. math_dapo for verl's DAPO reward, the 'Answer:' line) "
                       "to set it")
    if report.ids_collapsed:
        logger.warning(f"{report.ids_collapsed} dropped copies had an id of their own; which id collapsed into "
                       f"which: {report.duplicates_file}")
    write_json(report_path, report.as_dict())
    return report


def _chain_first(first: dict, rest: Iterator[dict]) -> Iterator[dict]:
    yield first
    yield from rest


def _names(keys: tuple[str, ...]) -> str:
    return "/".join(f"'{key}'" for key in keys) if keys else "(none)"


def _first_present(row: dict, keys: tuple[str, ...]) -> tuple[Optional[str], Any]:
    for key in keys:
        value = get_path(row, key, None)
        if value is not None:
            return key, value
    return None, None


def _ground_truth(row: dict, position: int, fmt: PoolFormat) -> str:
    key, value = _first_present(row, fmt.answer_keys)
    if key is None:
        raise TrajvalInputError(f"{row_label(row, position)}: ground-truth field {_names(fmt.answer_keys)} is missing")
    truth = canonical_ground_truth(value)
    how = fmt.answer_extract
    if how == "auto" and key in fmt.worked_solution_keys and GSM8K_MARKER not in truth and BOXED_MARKER not in truth:
        # taken whole, the verifier would read some number of the working as the answer
        raise TrajvalInputError(f"{row_label(row, position)}: ground-truth field '{key}' is a worked solution that "
                                f"marks no final answer ('{GSM8K_MARKER}' or \\boxed{{}}); give the row its short "
                                "answer in 'answer', or leave it out of the pool")
    try:
        # With "auto", a field named "answer" is taken as it is (open-r1 keeps the short answer
        # there); other fields (a worked "solution") yield their "####" or boxed answer.
        how = "none" if how == "auto" and key == "answer" else how
        truth = extract_answer(truth, how).strip()
    except ValueError as err:
        raise TrajvalInputError(f"{row_label(row, position)}: ground-truth field '{key}': {err}") from None
    if not truth:
        raise TrajvalInputError(f"{row_label(row, position)}: ground-truth field '{key}' is empty")
    return truth


def _claim_id(id_owner: dict[str, tuple[int, str]], task_id: str, digest: str, row: dict, position: int) -> None:
    """Record that ``task_id`` names the prompt ``digest`` (a kept row's or a dropped copy's own
    id alike); refuse an id an earlier row gave to a different prompt."""
    owner = id_owner.setdefault(task_id, (position, digest))
    if owner[1] != digest:
        raise TrajvalInputError(
            f"{row_label(row, position)}: task id {task_id!r} already belongs to the different prompt "
            f"of row {owner[0]}; ids must be unique (pass --id-key none to use content hashes)"
        )


def _task_id(row: dict, position: int, fmt: PoolFormat, digest: str, id_fallback: str,
             report: ImportReport) -> str:
    _, value = _first_present(row, fmt.id_keys)
    if value is not None and str(value).strip():
        report.ids_from_field += 1
    else:
        report.ids_from_fallback += 1
    return _own_id(row, position, fmt, digest, id_fallback)


def _own_id(row: dict, position: int, fmt: PoolFormat, digest: str, id_fallback: str) -> str:
    _, value = _first_present(row, fmt.id_keys)
    if value is not None and str(value).strip():
        return str(value)
    return digest if id_fallback == "hash" else f"row-{position}"


def _canonical_row(row: dict, fmt: PoolFormat, prompt_key: str, messages: list[list[str]],
                   ground_truth: str, task_id: str, digest: str, data_source: Optional[str]) -> dict:
    out = dict(row)
    prompt = get_path(row, prompt_key)
    if prompt_key != "prompt" or not isinstance(prompt, list):
        out["prompt"] = [{"role": role, "content": content} for role, content in messages]
    reward_model = row.get("reward_model")
    if isinstance(reward_model, str):
        try:
            reward_model = json.loads(reward_model)
        except ValueError:
            reward_model = None
    reward_model = dict(reward_model) if isinstance(reward_model, dict) else {"style": "rule"}
    reward_model["ground_truth"] = ground_truth
    out["reward_model"] = reward_model
    if out.get("data_source") is None:
        source = get_path(row, fmt.data_source_key, None) if fmt.data_source_key else None
        source = source if source is not None else data_source
        if source is not None:
            out["data_source"] = str(source)
    if out.get("extra_info") is None:
        out["extra_info"] = {"index": task_id}
    out[TASK_ID] = task_id
    out[PROMPT_HASH] = digest
    return out
