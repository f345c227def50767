"""``trajval validate --trainer ... --submit ray`` and ``--status``: the written runs as Ray jobs.

Each run of the manifest (:mod:`.trainer_runs`) is submitted with Ray's job submission client
(``ray.job_submission.JobSubmissionClient``) to the cluster at ``RAY_ADDRESS`` (its dashboard
address, e.g. ``http://head:8265``): the run's command is the job's entrypoint, its environment
the job's ``runtime_env`` variables. Ray places the jobs; nothing here schedules them. Each job
id is written to the manifest as soon as Ray gives it, so a second ``--submit`` submits only
the runs without one. ``--status`` asks Ray for each job's state and reads how far each run's
log has come.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from trajval_ops.experiment.trainer_runs import MANIFEST, missing_pools, read_manifest
from trajval_ops.experiment.validation_config import ConfigError

#: Ray's job states that end a job (ray.job_submission.JobStatus)
FINISHED_STATES = ("SUCCEEDED", "FAILED", "STOPPED")
#: ``--status``'s state of a job the cluster does not know (restarted since, or another cluster)
UNKNOWN_STATE = "UNKNOWN"


def ray_address(record: dict | None = None) -> str:
    """``RAY_ADDRESS``, else the address the manifest's jobs were submitted to."""
    address = os.environ.get("RAY_ADDRESS") or (record or {}).get("ray_address")
    if not address:
        raise ConfigError("--submit ray and --status need the cluster: set RAY_ADDRESS to its dashboard address "
                          "(e.g. http://head-node:8265, the address `ray job submit` uses)")
    return address


def _client(address: str):
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise ConfigError(f"no Ray cluster answers at {address}: {error}") from None


def submit(out: Path) -> list[str]:
    """Submit every run of ``out``'s manifest that has no job yet; return the job ids submitted.
    A run whose pool does not exist yet is an error before anything is submitted."""
    from trajval_ops.atomic import write_json

    out = Path(out)
    record = read_manifest(out)
    missing = missing_pools(record)
    if missing:
        listed = "; ".join(f"arm {arm}: {command}" for arm, command in missing.items())
        raise ConfigError(f"the weighted pools of {sorted(missing)} are not written yet; write them first, then submit "
                          f"again ({listed})")
    address = ray_address(record)
    client = _client(address)
    record["ray_address"] = address
    submitted = []
    for run in record["runs"]:
        if run.get("job_id"):
            continue
        try:
            run["job_id"] = client.submit_job(
                entrypoint=shlex.join(run["argv"]), runtime_env={"env_vars": run["env"]},
                metadata={"trajval_run": run["name"], "arm": run["arm"], "seed": str(run["seed"])})
        except RuntimeError as error:  # the job API's refusal (a bad runtime_env, a cluster going away)
            raise ConfigError(f"the Ray cluster at {address} refused the job of run {run['name']}: {error}; the "
                              f"{len(submitted)} job(s) submitted before it are in {out / MANIFEST}, and --submit "
                              "again submits the rest") from None
        run["state"] = "PENDING"
        submitted.append(run["job_id"])
        write_json(out / MANIFEST, record)  # each id kept as soon as it exists
    return submitted


def status(out: Path) -> list[dict]:
    """Each run's job state (Ray's, or ``not submitted``) and the last step its log shows;
    the states are written to the manifest."""
    from trajval_ops.atomic import write_json

    out = Path(out)
    record = read_manifest(out)
    client = _client(ray_address(record)) if any(run.get("job_id") for run in record["runs"]) else None
    rows = []
    for run in record["runs"]:
        note = None
        if run.get("job_id"):
            try:
                run["state"] = str(getattr(state := client.get_job_status(run["job_id"]), "value", state))
            except RuntimeError as error:  # e.g. 404: the cluster restarted since, or RAY_ADDRESS names another
                run["state"], note = UNKNOWN_STATE, f"{run['name']}: {error}"
        rows.append({"name": run["name"], "arm": run["arm"], "seed": run["seed"], "job_id": run.get("job_id"),
                     "state": run.get("state") or "not submitted", "note": note,
                     "last_step": last_logged_step(out / run["log"], run["log_format"])})
    write_json(out / MANIFEST, record)
    return rows


def last_logged_step(log: Path, log_format: str) -> int | None:
    """The last step a run's log holds: the last line of verl's file logger; the highest
    ``global_step`` of a TRL output folder's checkpoints' ``trainer_state.json``."""
    if log_format == "verl":
        if not log.is_file():
            return None
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        for line in reversed(lines):
            try:
                return int(json.loads(line)["step"])
            except (ValueError, KeyError, TypeError):
                continue  # a line being written
        return None
    states = sorted(log.glob("checkpoint-*/trainer_state.json")) + sorted(log.glob("trainer_state.json"))
    steps = []
    for state in states:
        try:
            steps.append(int(json.loads(state.read_text())["global_step"]))
        except (ValueError, KeyError, TypeError, OSError):
            continue
    return max(steps, default=None)


def print_status(rows: list[dict]) -> None:
    print(f"{'run':40} {'job':28} {'state':14} {'last step':>9}")
    for row in rows:
        step = "-" if row["last_step"] is None else row["last_step"]
        print(f"{row['name']:40} {row['job_id'] or '-':28} {row['state']:14} {step:>9}")
    for row in rows:
        if row.get("note"):
            print(f"{UNKNOWN_STATE}: {row['note']}")
    done = sum(row["state"] in FINISHED_STATES for row in rows)
    print(f"{done} of {len(rows)} run(s) finished")
