"""Benchmark: the endpoint pass as a Ray actor pool, 1 actor against 2, in the same run.

Each configuration runs ``dj-process`` on the Ray executor (a local Ray started for the job),
one after the other, on the same rows with a fresh rollout cache: the endpoint-reward mapper
with ``num_proc`` actors, ``num_cpus: 1`` and one torch thread each. Figures per run:

- ``pass_s``: from Ray starting the dataset's execution to the export of the last row (the
  pass itself: actor start-up and model loads included, Ray's own start-up not);
- ``wall_s``: the whole ``dj-process`` command;
- ``completions_per_s``: completions / ``pass_s``;
- ``busiest_actor_operator_s``: the largest time one actor spent in the operator (sampling,
  verifying, caching; its start-up and model load excluded), from the actors' logs.
- ``cpu_share_while_sampling``: once every actor has finished a batch, the share of a core each
  actor got over ``--cpu-window`` seconds, and the sum over the driver and Ray's own processes.

The baseline, measured in each round of the same run: a bare ``model.generate`` loop (no Ray, no
Data-Juicer, no verification) over the same rows in one process, then split over two processes
running at once, one torch thread each: what this machine's cores give two processes at all
(with the share of a core each of the two got).

Two ratios against 1 actor: ``speedup_pass`` (``pass_s``) and ``speedup_operator``
(``busiest_actor_operator_s``): the first includes each actor's fixed start-up (about 10 s on
2 cores: a fresh interpreter importing torch, transformers and Data-Juicer), the second is the
sampling throughput the pool scales.

``--repeats`` rounds (default 5) each run every configuration (in reverse order in odd rounds)
and the baseline once; the figures are per round and medians over the rounds.

    python tools/bench/bench_ray_actors.py                     # demo pool, 600 rows x n 128
    python tools/bench/bench_ray_actors.py --actors 1 2 --n 16 --rows 300
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parents[2]
DEFAULT_POOL = REPO / "trajval_ops" / "data" / "demo_arith_pool.jsonl"

# Ray's and loguru's timestamps at the start of a log line
_TIMESTAMP = r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[.,]\d{3})"
# an actor's line after each batch (the endpoint mapper's log), naming its pid
_WORKER_LINE = r"so far in worker (\d+)"


def cpu_shares(root: int, window_s: float, is_worker) -> dict | None:
    """Share of one core each process under ``root`` (itself included) used over ``window_s``:
    the workers (``is_worker(command line)``) one by one, everything else summed (for an actor
    pool: the ``dj-process`` driver, its process guardian and Ray's own processes). None if the
    workers ended first."""
    import psutil

    def sample() -> dict:
        times = {}
        try:
            tree = psutil.Process(root)
            processes = [tree, *tree.children(recursive=True)]
        except psutil.NoSuchProcess:
            return times
        for process in processes:
            try:
                cpu = process.cpu_times()
                times[process.pid] = (" ".join(process.cmdline()), cpu.user + cpu.system)
            except psutil.Error:
                pass
        return times

    before = sample()
    time.sleep(window_s)
    after = sample()
    used = {pid: (cmd, seconds - before.get(pid, (cmd, 0.0))[1]) for pid, (cmd, seconds) in after.items()}
    if not any(is_worker(cmd) for cmd, _ in used.values()):
        return None
    return {"window_s": window_s,
            "workers": sorted((round(s / window_s, 3) for cmd, s in used.values() if is_worker(cmd)), reverse=True),
            "others": round(sum(s for cmd, s in used.values() if not is_worker(cmd)) / window_s, 3)}


def _time_of(pattern: str, log: str) -> float:
    match = re.search(_TIMESTAMP + r"[^\n]*" + pattern, log)
    if match is None:
        raise SystemExit(f"no line matching {pattern!r} in dj-process's log:\n{log[-3000:]}")
    return datetime.strptime(match.group(1).replace(",", "."), "%Y-%m-%d %H:%M:%S.%f").timestamp()


def measure(args, pool: Path, workdir: Path, actors: int) -> dict:
    import yaml

    run = workdir / f"actors{actors}"
    run.mkdir(parents=True)
    recipe = {
        "project_name": "bench_ray_actors", "dataset_path": str(pool),
        "export_path": str(run / "scored.jsonl"), "executor_type": "ray", "ray_address": "local",
        "np": 1, "text_keys": None, "skip_op_error": False, "open_tracer": False, "op_fusion": False,
        "process": [{"trajval_endpoint_reward_mapper": {
            "model": args.model, "output_key": "acc", "engine": "transformers", "n": args.n,
            "max_new_tokens": args.max_new_tokens, "prompts_per_generate": args.prompts_per_generate,
            "batch_size": args.batch_size, "verifier_options": {"fallback_last_number": True},
            "cache_dir": str(run / "rollouts"), "num_proc": actors, "num_cpus": 1, "torch_threads": 1,
        }}],
    }
    path = run / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    log_path = run / "dj-process.log"
    start = time.perf_counter()
    with open(log_path, "w") as log_file:
        process = subprocess.Popen([str(Path(sys.executable).with_name("dj-process")), "--config", str(path)],
                                   stdout=log_file, stderr=subprocess.STDOUT, cwd=REPO,
                                   env={**os.environ, "RAY_DEDUP_LOGS": "0"})
        shares = None
        # once every actor has finished a batch, all of them are sampling: who gets the cores then
        while process.poll() is None and shares is None:
            if len(set(re.findall(_WORKER_LINE, log_path.read_text()))) >= actors:
                shares = cpu_shares(process.pid, args.cpu_window, lambda cmd: "MapWorker(" in cmd)
            time.sleep(0.5)
        process.wait()
    wall = time.perf_counter() - start
    log = log_path.read_text()
    if process.returncode != 0:
        raise SystemExit(f"dj-process failed:\n{log[-3000:]}")
    pass_s = _time_of(r"trajval_ops: wrote \d+ rows", log) - _time_of("Execution plan of Dataset", log)
    # each actor's last batch line: seconds in the operator, engine start excluded
    operator_s: dict[str, float] = {}
    for worker, seconds in re.findall(_WORKER_LINE + r" \d+ completions, [\d.]+ s in generate, "
                                      r"([\d.]+) s in the operator", log):
        operator_s[worker] = float(seconds)
    completions = args.rows * args.n
    busiest = max(operator_s.values())  # actors work side by side: the busiest bounds the pass
    return {"actors": actors, "workers_seen": len(operator_s), "pass_s": round(pass_s, 2), "wall_s": round(wall, 1),
            "completions_per_s": round(completions / pass_s, 1), "busiest_actor_operator_s": round(busiest, 2),
            "operator_completions_per_s": round(completions / busiest, 1), "cpu_share_while_sampling": shares}


def bare_generate(args, pool: Path, rows: int, first: int = 0) -> subprocess.Popen:
    """A bare ``model.generate`` loop over ``rows`` rows of the pool starting at ``first``, one
    torch thread, in its own process (``bench_endpoint_rewards.py --measure bare``)."""
    part = pool.with_name(f"bare-{first}-{rows}.jsonl")
    part.write_text("".join(pool.read_text().splitlines(keepends=True)[first:first + rows]))
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("bench_endpoint_rewards.py")), "--model", args.model,
         "--pool", str(part), "--rows", str(rows), "--n", str(args.n), "--max-new-tokens", str(args.max_new_tokens),
         "--prompts-per-generate", str(args.prompts_per_generate), "--measure", "bare", "--threads", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def bare_result(process: subprocess.Popen) -> dict:
    out, err = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"bare generate failed:\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def machine_scaling(args, pool: Path) -> dict:
    """The baseline: what running two single-thread generate loops at once gains over one on
    this machine (the ceiling an actor pool of 2 can reach), same rows in total."""
    one = bare_result(bare_generate(args, pool, args.rows))
    half = args.rows // 2
    pair = [bare_generate(args, pool, half), bare_generate(args, pool, args.rows - half, first=half)]
    two = [bare_result(p) for p in pair]
    together_s = max(r["generate_s"] for r in two)  # both run side by side; the slower bounds them
    return {"one_process_generate_s": one["generate_s"], "two_processes_generate_s": together_s,
            "speedup": round(one["generate_s"] / together_s, 2),
            "cpu_share_while_generating": sorted((r["cpu_share"] for r in two), reverse=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny-arith")
    parser.add_argument("--pool", default=str(DEFAULT_POOL))
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--prompts-per-generate", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=16,
                        help="rows per Ray block (the unit an actor takes); one generate call each by default, "
                             "so an actor that finishes first idles at most one call's time")
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=5, help="rounds of every measurement; medians reported")
    parser.add_argument("--cpu-window", type=float, default=5.0,
                        help="seconds over which the share of the cores each process gets is sampled, once all "
                             "actors are sampling")
    parser.add_argument("--no-baseline", action="store_true", help="skip the bare generate loops (1 vs 2 processes)")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="bench_ray_actors_"))
    lines = Path(args.pool).read_text().splitlines()[:args.rows]
    if len(lines) < args.rows:
        raise SystemExit(f"{args.pool} has {len(lines)} rows, fewer than --rows {args.rows}")
    pool = workdir / "pool.jsonl"
    pool.write_text("\n".join(lines) + "\n")
    figures = {"model": args.model, "rows": args.rows, "n": args.n, "completions": args.rows * args.n,
               "max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size,
               "cpus": os.cpu_count(), "repeats": args.repeats, "rounds": []}
    # every measurement once per round, rounds one after the other: single runs moved by up to 40%
    for round_index in range(args.repeats):
        # odd rounds run the configurations in reverse order, so a drift of the machine's speed
        # over the run does not always favour the same one
        order = args.actors if round_index % 2 == 0 else args.actors[::-1]
        runs = {actors: measure(args, pool, workdir / f"round{round_index}", actors) for actors in order}
        done = {"runs": [runs[actors] for actors in args.actors]}
        if not args.no_baseline:
            done["bare_generate_1_vs_2_processes"] = machine_scaling(args, pool)
        base = next((r for r in done["runs"] if r["actors"] == 1), None)
        if base:
            for run in done["runs"]:
                run["speedup_pass"] = round(base["pass_s"] / run["pass_s"], 2)
                run["speedup_operator"] = round(base["busiest_actor_operator_s"] / run["busiest_actor_operator_s"], 2)
        figures["rounds"].append(done)
    figures["median"] = {}
    for actors in args.actors:
        runs = [run for done in figures["rounds"] for run in done["runs"] if run["actors"] == actors]
        speedups = [key for key in ("speedup_pass", "speedup_operator") if key in runs[0]]  # with a 1-actor run
        summary = {key: median([run[key] for run in runs])
                   for key in ("pass_s", "busiest_actor_operator_s", *speedups)}
        shares = [run["cpu_share_while_sampling"] for run in runs if run["cpu_share_while_sampling"]]
        if shares:
            summary["cpu_share_each_actor"] = round(median([sum(s["workers"]) / len(s["workers"]) for s in shares]), 3)
            summary["cpu_share_driver_and_ray"] = round(median([s["others"] for s in shares]), 3)
        for key in speedups:
            summary[f"{key}_range"] = [min(run[key] for run in runs), max(run[key] for run in runs)]
        figures["median"][f"actors_{actors}"] = summary
    if not args.no_baseline:
        pairs = [done["bare_generate_1_vs_2_processes"] for done in figures["rounds"]]
        figures["median"]["bare_generate_speedup_2_processes"] = median([pair["speedup"] for pair in pairs])
        figures["median"]["bare_generate_speedup_2_processes_range"] = [min(pair["speedup"] for pair in pairs),
                                                                        max(pair["speedup"] for pair in pairs)]
        figures["median"]["bare_generate_cpu_share_each_process"] = round(median(
            [sum(pair["cpu_share_while_generating"]) / 2 for pair in pairs]), 3)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
