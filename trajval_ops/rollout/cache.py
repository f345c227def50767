"""On-disk cache of rollout results, written as they finish, so a killed run resumes.

One folder per *run key* (hash of model fingerprint, sampling settings, verifier spec, prompt
settings) under the cache root; inside it, append-only JSON-lines logs, one per writing process
(``results-<host>-<pid>.jsonl``: Ray actors on several nodes may share the folder over a
network file system), one record per row: ``{"row": <row hash>, "rewards": [...], ...}`` (the verifier's reward of each
completion; a cache written by an earlier release names them ``"scores"`` and is read so, so it resumes).
The records of one generate call are written with a single ``write`` and flushed + fsynced; a
line cut short by a kill is ignored when the cache is read back. The row hash covers what
decides the result (the chat messages and the ground truth), not the whole row, so fields added
by other operators do not invalidate it.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from loguru import logger

from trajval_ops.atomic import atomic_open
from trajval_ops.canonical import stable_hash


def model_fingerprint(model_path: Path) -> dict:
    """Identity of a model folder: its path and the size + mtime of every file in it.

    A checkpoint rewritten in place gets a new fingerprint (and fresh rollouts).
    """
    files = sorted((p.name, p.stat()) for p in model_path.iterdir() if p.is_file())
    return {
        "path": str(model_path.resolve()),
        "files": [[name, stat.st_size, stat.st_mtime_ns] for name, stat in files],
    }


#: keys of a model folder's JSON files that name the writing library's release, not the model
_WRITER_KEYS = ("transformers_version",)


def folder_content_digest(folder: Path) -> str:
    """:func:`model_content_digest` computed afresh (no cache): the sha256 of every file's bytes,
    JSON files as canonical JSON without the writer's release."""
    from trajval_ops.canonical import file_sha256

    files = {}
    for path in sorted(p for p in Path(folder).iterdir() if p.is_file()):
        if path.suffix == ".json":
            content = json.loads(path.read_text())
            if isinstance(content, dict):
                content = {k: v for k, v in content.items() if k not in _WRITER_KEYS}
            files[path.name] = stable_hash(content)
        else:
            files[path.name] = file_sha256(path)
    return stable_hash(files)


def model_content_digest(model_path: Path) -> str:
    """Identity of a model folder by what it holds, wherever it is: the sha256 of every file's
    bytes (JSON files as canonical JSON without the writer's release, so one model saved by two
    transformers releases is one model). A rebuilt model with the same weights keeps it, on any
    machine; a model changed in any weight, setting or tokenizer file gets another. Digests are
    kept beside the cache (``model_digests.json``, keyed by path, size and mtime), so a model is
    read once while its files are unchanged."""
    from trajval_ops.atomic import write_json
    from trajval_ops.models import cache_dir

    model_path = Path(model_path).resolve()
    record = cache_dir() / "model_digests.json"
    key = stable_hash(model_fingerprint(model_path))
    try:
        known = json.loads(record.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return known[key]
    digest = folder_content_digest(model_path)
    try:
        write_json(record, known | {key: digest})
    except OSError:  # a read-only cache: the digest is recomputed next time
        pass
    return digest


class RolloutCache:
    """Results of one run key: ``get(row_hash)`` and ``put_many([(row_hash, record), ...])``."""

    def __init__(self, root: str | os.PathLike, run_key: dict):
        self.run_key = run_key
        self.key_hash = stable_hash(run_key)[:24]
        self.directory = Path(root).expanduser() / self.key_hash
        self.directory.mkdir(parents=True, exist_ok=True)
        key_file = self.directory / "run_key.json"
        if not key_file.exists():
            with atomic_open(key_file) as handle:
                handle.write(json.dumps(run_key, indent=2, sort_keys=True, default=str))
        self._records: dict[str, dict] = {}
        self._offsets: dict[str, int] = {}  # log name -> bytes read
        self._read_once = False
        self._handle = None
        self._handle_pid: int | None = None
        self.reload()

    def reload(self) -> None:
        """Read what every process's log gained since the last read (complete lines only):
        another worker or actor sharing the folder may have sampled rows meanwhile."""
        truncated, first_read = 0, not self._read_once
        for log in sorted(self.directory.glob("results-*.jsonl")):
            with open(log, "rb") as handle:
                handle.seek(self._offsets.get(log.name, 0))
                data = handle.read()
            end = data.rfind(b"\n") + 1  # a last line without newline is being written or was cut
            truncated += first_read and end < len(data)
            self._offsets[log.name] = self._offsets.get(log.name, 0) + end
            for line in data[:end].splitlines():
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    truncated += 1  # cut short by a kill and continued by a later process: recompute
                    continue
                if "scores" in record and "rewards" not in record:  # an earlier release's record
                    record["rewards"] = record.pop("scores")
                self._records[record["row"]] = record
        self._read_once = True
        if truncated:
            logger.warning(f"rollout cache {self.directory}: ignored {truncated} incomplete record(s)")

    def __len__(self) -> int:
        return len(self._records)

    def get(self, row_hash: str) -> dict | None:
        return self._records.get(row_hash)

    def put_many(self, items: list[tuple[str, dict]]) -> None:
        """Append the records of one generate call with one write and one fsync (a kill can
        cut the last line only; the lines before it are whole)."""
        if not items:
            return
        records = [{"row": row_hash, **record} for row_hash, record in items]
        handle = self._log_handle()
        handle.write("".join(json.dumps(record, ensure_ascii=False, default=str) + "\n" for record in records))
        handle.flush()
        os.fsync(handle.fileno())
        for record in records:
            self._records[record["row"]] = record

    def _log_handle(self):
        # one log per process: forked Data-Juicer workers never interleave their lines
        if self._handle is None or self._handle_pid != os.getpid():
            path = self.directory / f"results-{socket.gethostname()}-{os.getpid()}.jsonl"
            cut_short = path.is_file() and path.stat().st_size > 0 and not _ends_with_newline(path)
            self._handle = open(path, "a", encoding="utf-8")
            self._handle_pid = os.getpid()
            if cut_short:  # an earlier process with this pid was killed mid-line
                self._handle.write("\n")
        return self._handle

    def close(self) -> None:
        if self._handle is not None and self._handle_pid == os.getpid():
            self._handle.close()
        self._handle = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_handle"] = None
        state["_handle_pid"] = None
        return state


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"
