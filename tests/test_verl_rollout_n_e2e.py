"""``__rollout_n__`` from the prior through verl 0.9.1's own code, as far as it runs on CPU.

Like ``tests/test_samplers_verl_dataset.py`` (whose pool rows, data config and dataloader this
file reuses), the file runs itself as a script in a subprocess with verl 0.9.1
(``.venv/verl-latest``) first on PYTHONPATH. The path driven there, all verl's own code:

1. ``create_rl_dataset`` builds ``TrajvalVerlDataset`` with ``data.trajval.rollout_n_from_prior``
   (``n`` interpolated from ``actor_rollout_ref.rollout.n``, as the docs say to write it);
2. the V1 trainer's dataloader (``StatefulDataLoader``, ``create_rl_sampler``, ``collate_fn``)
   and its ``PPOTrainer._next_train_batch`` / ``_fetch_one_gen_batch`` (uid, ``tu.get_tensordict``,
   ``global_steps``), on a stand-in trainer holding only the config and the dataloader;
3. ``AgentLoopManagerTQ.generate_sequences`` (chunks the batch over two workers) and
   ``AgentLoopWorkerTQ.generate_sequences`` / ``_run_prompt``, which pops ``__rollout_n__`` and
   starts that many agent-loop sessions.

Where it stops: ``AgentLoopWorker._run_agent_loop``, which instantiates the agent loop against an
LLM server (vLLM/SGLang on a GPU); it is replaced by a recorder of the sessions ``_run_prompt``
starts. Ray is not started: the manager's ``ray.get`` over worker handles becomes a direct call of
the real worker method. Three modules verl imports on this path are not installed in the test
environment and are stubbed in the subprocess only: ``transfer_queue`` (the queue service: the
stub records the status tags ``_run_prompt`` writes), and ``cachetools.LRUCache`` and
``fastapi.FastAPI``, imported at module level by verl's LLM-server router and unused here.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _verl_dataset_tests():
    """``tests/test_samplers_verl_dataset.py``, loaded by path: both verl 0.9.1's folder and
    site-packages ship a top-level ``tests`` package that would shadow ours in the subprocess."""
    spec = importlib.util.spec_from_file_location("_verl_dataset_tests",
                                                  Path(__file__).with_name("test_samplers_verl_dataset.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


H = _verl_dataset_tests()

RATES = (0.0, 0.02, 0.1, 0.5, 0.9, 0.98, 1.0, 0.3)  # kept row i has pass rate RATES[i % 8]
WEIGHTS = (1.0, 0.5, 0.25)  # and weight WEIGHTS[i % 3]
N_KEPT, EPOCHS, SEED, BATCH = 48, 2, 3, 8
ROLLOUT_N, MIN_N, MAX_N = 4, 2, 16
RATE = "trajval_r_early"
LONG_AT = 5  # a prompt verl's overlong filter drops; its rate (7.0) would be refused if read


def kept_rates() -> list[float]:
    return [RATES[i % len(RATES)] for i in range(N_KEPT)]


def kept_weights() -> list[float]:
    return [WEIGHTS[i % len(WEIGHTS)] for i in range(N_KEPT)]


# ------------------------------------------------------------------------------------------------
# The subprocess (verl 0.9.1 first on sys.path)
# ------------------------------------------------------------------------------------------------
def _stub_missing_modules() -> list[str]:
    """Stand-ins for the modules named in the module docstring, only where not installed."""
    import types

    stubbed = []
    if importlib.util.find_spec("transfer_queue") is None:
        queue = types.ModuleType("transfer_queue")
        queue.KVBatchMeta = type("KVBatchMeta", (), {})
        queue.tags = []

        async def async_kv_put(key, partition_id, tag=None, **_):
            queue.tags.append((key, partition_id, tag))

        queue.async_kv_put = async_kv_put
        sys.modules["transfer_queue"] = queue
        stubbed.append("transfer_queue")
    for name, attribute in (("cachetools", "LRUCache"), ("fastapi", "FastAPI")):
        if importlib.util.find_spec(name) is None:
            module = types.ModuleType(name)
            setattr(module, attribute, type(attribute, (), {}))
            sys.modules[name] = module
            stubbed.append(name)
    return stubbed


def _rows(rates, long_rate=None) -> list[dict]:
    rows = []
    for i, (rate, weight) in enumerate(zip(rates, kept_weights())):
        row = H._row(f"t{i}", f"{i}+{i}", weight)
        if rate != "drop":
            row[RATE] = rate
        rows.append(row)
    if long_rate is not None:
        long_row = H._row("long", H.LONG_PROMPT, 1.0)
        long_row[RATE] = long_rate
        rows.insert(LONG_AT, long_row)
    return rows


def _root(work: Path, train, val, **trajval):
    """The whole config as hydra hands it to the V1 trainer (the dataset gets ``.data``)."""
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(H._config(work, [train], [val], **trajval))
    data["gen_batch_size"] = None
    root = OmegaConf.create({
        "data": data,
        "actor_rollout_ref": {"rollout": {
            "n": ROLLOUT_N, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "calculate_log_probs": False,
            "val_kwargs": {"n": 1, "top_p": 1.0, "top_k": -1, "temperature": 0.0},
            "agent": {"default_agent_loop": "single_turn_agent"},
        }},
    })
    OmegaConf.set_struct(root, True)
    return root


def _rollouts_option(max_n=MAX_N):
    return {"n": "${actor_rollout_ref.rollout.n}", "max_n": max_n, "min_n": MIN_N, "rate_key": RATE}


class _Rollouts:
    """verl's V1 rollout side on CPU: the real manager and workers, the agent loop recorded."""

    def __init__(self, root):
        import asyncio
        from types import SimpleNamespace

        from verl.trainer.ppo.v1 import agent_loop_tq

        self.sessions: list[dict] = []
        worker_class = agent_loop_tq.AgentLoopWorkerTQ.__ray_metadata__.modified_class.__ray_actor_class__
        handles = []
        for _ in range(2):
            worker = object.__new__(worker_class)  # __init__ would connect to the LLM servers and the queue
            worker.config = root
            worker.background_tasks = set()
            worker._run_agent_loop = self._record

            async def drive(chunk, worker=worker):
                await worker.generate_sequences(chunk)  # fire-and-forget: one task per prompt
                await asyncio.gather(*list(worker.background_tasks))

            handles.append(SimpleNamespace(generate_sequences=SimpleNamespace(
                remote=lambda chunk, drive=drive: asyncio.run(drive(chunk)))))
        self.manager = SimpleNamespace(agent_loop_workers=handles)
        self.module = agent_loop_tq

    async def _record(self, sampling_params, *, trajectory, trace, session_id, **prompt):
        self.sessions.append({"uid": prompt["uid"], "session": session_id, "position": int(prompt["trajval_position"])
                              if "trajval_position" in prompt else None, "keys": sorted(prompt)})

    def generate(self, batch) -> None:
        from types import SimpleNamespace

        real_ray = self.module.ray
        self.module.ray = SimpleNamespace(get=lambda results: results)  # no cluster: handles run in-process
        try:
            self.module.AgentLoopManagerTQ.generate_sequences(self.manager, batch)
        finally:
            self.module.ray = real_ray


def _trainer(root, loader):
    """The V1 trainer's own batch assembly (``_next_train_batch``) on a stand-in holding the config."""
    from types import MethodType, SimpleNamespace

    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    trainer = SimpleNamespace(config=root, train_dataloader=loader, train_dataloader_it=None, global_steps=1)
    trainer._fetch_one_gen_batch = MethodType(PPOTrainer._fetch_one_gen_batch, trainer)
    return lambda: PPOTrainer._next_train_batch(trainer)


def _steps(root, dataset, steps: int) -> dict:
    """``steps`` of the V1 trainer's prompt side: what each prompt carried and what the agent loop ran."""
    import transfer_queue

    next_batch, rollouts = _trainer(root, H._loader(root.data, dataset)), _Rollouts(root)
    out = []
    for _ in range(steps):
        batch = next_batch()
        carried = list(batch["__rollout_n__"]) if "__rollout_n__" in batch else None
        prompts = [{"uid": uid, "position": int(position), "carried": None if carried is None else carried[i]}
                   for i, (uid, position) in enumerate(zip(batch["uid"], batch["trajval_position"]))]
        rollouts.generate(batch)
        out.append(prompts)
    ran = Counter(s["uid"] for s in rollouts.sessions)
    sessions_of = {}
    for s in rollouts.sessions:
        sessions_of.setdefault(s["uid"], []).append(s["session"])
    for prompts in out:
        for p in prompts:
            p["ran"] = ran[p["uid"]]
            p["sessions"] = sorted(sessions_of.get(p["uid"], []))
    status = {}
    for key, _, tag in getattr(transfer_queue, "tags", []):
        status[key] = tag["status"]
    return {"steps": out, "agent_loop_keys": sorted({k for s in rollouts.sessions for k in s["keys"]}),
            "final_status": sorted(set(status.values())), "carried_types": sorted({
                type(p["carried"]).__name__ for prompts in out for p in prompts})}


def scenario_env(ctx):
    import verl

    return {"version": verl.__version__, "file": verl.__file__, "stubbed": ctx["stubbed"]}


def scenario_pass(ctx):
    from verl.trainer.ppo.utils import create_rl_dataset

    root = _root(ctx["work"], ctx["train"], ctx["val"], epochs=EPOCHS, seed=SEED,
                 rollout_n_from_prior=_rollouts_option())
    dataset = create_rl_dataset(root.data.train_files, root.data, ctx["tokenizer"], None, is_train=True)
    val = create_rl_dataset(root.data.val_files, root.data, ctx["tokenizer"], None, is_train=False)
    served = []
    for batch in H._loader(root.data, dataset):  # one pass of the V1 trainer's dataloader
        served.extend(zip((int(p) for p in batch["trajval_position"]), batch["__rollout_n__"]))
    return {
        "len": len(dataset), "kept_ids": [r["index"] for r in dataset.dataframe["extra_info"]],
        "allocation": dataset.trajval_rollout_n.tolist(),
        "epoch_rows": [dataset.epoch_rows(b).tolist() for b in range(EPOCHS)],
        "served": served, "served_types": sorted({type(n).__name__ for _, n in served}),
        "val_keys": sorted(val[0]), "val_weighted": val.trajval_weighted,
        "through_agent_loop": _steps(root, dataset, len(dataset) // BATCH),
    }


def scenario_default(ctx):
    """The same run without the option: no key, so the agent loop runs rollout.n for every prompt."""
    from verl.trainer.ppo.utils import create_rl_dataset

    root = _root(ctx["work"], ctx["train"], ctx["val"], epochs=EPOCHS, seed=SEED)
    dataset = create_rl_dataset(root.data.train_files, root.data, ctx["tokenizer"], None, is_train=True)
    return {"keys": sorted(dataset[0]), "through_agent_loop": _steps(root, dataset, 2)}


BAD_RATES = {
    # name: the kept rows' rates ("drop": no rate field at all)
    "nan": [0.5, 0.5, float("nan"), 0.5],
    "above_one": [0.5, 1.5, 0.5, 0.5],
    "null": [0.5, 0.5, 0.5, None],
    "missing": ["drop"] * 4,
}


def scenario_bad(ctx):
    from verl.trainer.ppo.utils import create_rl_dataset

    work, out = ctx["work"], {}
    for name, rates in BAD_RATES.items():
        path = H._write(work / f"bad_{name}.parquet", _rows(rates, long_rate=7.0))
        root = _root(work, path, ctx["val"], rollout_n_from_prior=_rollouts_option())
        try:
            create_rl_dataset(root.data.train_files, root.data, ctx["tokenizer"], None)
            out[name] = None
        except Exception as err:  # noqa: BLE001 - the report carries it
            out[name] = H._error(err)
    return out


def scenario_resume(ctx):
    """A dataloader checkpoint records the allocation: other rollout bounds refuse to resume on it."""
    from verl.trainer.ppo.utils import create_rl_dataset

    def build(max_n):
        root = _root(ctx["work"], ctx["train"], ctx["val"], epochs=EPOCHS, seed=SEED,
                     rollout_n_from_prior=_rollouts_option(max_n))
        return create_rl_dataset(root.data.train_files, root.data, ctx["tokenizer"], None)

    saved = build(MAX_N).state_dict()
    same, other = build(MAX_N), build(MAX_N - 8)
    same.load_state_dict(saved)
    try:
        other.load_state_dict(saved)
        refused = None
    except Exception as err:  # noqa: BLE001
        refused = H._error(err)
    return {"refused": refused, "other_allocation_differs": other.trajval_rollout_n.tolist()
            != same.trajval_rollout_n.tolist()}


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in dict(globals()).items() if name.startswith("scenario_")}


def worker(work: Path) -> None:
    from transformers import AutoTokenizer

    from trajval_ops.models import resolve_model

    ctx = {"work": work, "stubbed": _stub_missing_modules(),
           "tokenizer": AutoTokenizer.from_pretrained(resolve_model("tiny-arith"))}
    ctx["train"] = H._write(work / "train.parquet", _rows(kept_rates(), long_rate=7.0))
    ctx["val"] = H._write(work / "val.parquet", [H._row(f"v{i}", f"{i}*{i}") for i in range(4)])
    report = {}
    for name, fn in SCENARIOS.items():
        start = time.perf_counter()
        try:
            report[name] = {"ok": True, "result": fn(ctx)}
        except Exception:  # noqa: BLE001 - reported to the test that needs it
            report[name] = {"ok": False, "traceback": traceback.format_exc()}
        report[name]["seconds"] = round(time.perf_counter() - start, 2)
    (work / "report.json").write_text(json.dumps(report))


# ------------------------------------------------------------------------------------------------
# The tests (this process: verl 0.7.1 environment; verl 0.9.1 only in the subprocess)
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return H.run_verl_worker(__file__, tmp_path_factory.mktemp("verl_rollout_n"), timeout=300)


_result = H.scenario_result


def _expected_allocation() -> list[int]:
    """Each virtual index's rollouts, from the pool's definition and the core functions alone."""
    import numpy as np

    from trajval_ops.samplers.rollout_n import rollout_n_per_prompt
    from trajval_ops.samplers.verl_dataset import virtual_epoch_rows

    rows = virtual_epoch_rows(kept_weights(), EPOCHS, SEED)
    return rollout_n_per_prompt(np.asarray(kept_rates())[rows], ROLLOUT_N, MIN_N, MAX_N).tolist()


def _expected_pairs() -> Counter:
    from trajval_ops.samplers.verl_dataset import virtual_epoch_rows

    return Counter(zip(virtual_epoch_rows(kept_weights(), EPOCHS, SEED).tolist(), _expected_allocation()))


def test_runs_verl_0_9_1_with_only_the_missing_modules_stubbed(report):
    env = _result(report, "env")
    assert env["version"] == H.VERL_VERSION and Path(env["file"]).is_relative_to(H.VERL_LATEST)
    assert set(env["stubbed"]) <= {"transfer_queue", "cachetools", "fastapi"}


def test_each_index_carries_its_allocation_and_the_pass_keeps_the_total(report):
    run = _result(report, "pass")
    assert run["len"] == EPOCHS * N_KEPT
    assert run["kept_ids"] == [f"t{i}" for i in range(N_KEPT)]  # rates read after the overlong filter
    assert run["allocation"] == _expected_allocation()
    assert sum(run["allocation"]) == ROLLOUT_N * run["len"]
    assert min(run["allocation"]) >= MIN_N and max(run["allocation"]) <= MAX_N
    assert len(set(run["allocation"])) > 2  # not the uniform n
    # one pass of verl's dataloader serves every index once: the (row, rollouts) pairs exactly
    assert Counter(map(tuple, run["served"])) == _expected_pairs()
    assert sum(n for _, n in run["served"]) == ROLLOUT_N * run["len"]
    assert run["served_types"] == ["int"]


def test_verls_agent_loop_starts_as_many_sessions_as_each_prompt_carries(report):
    flow = _result(report, "pass")["through_agent_loop"]
    prompts = [p for step in flow["steps"] for p in step]
    assert len(flow["steps"]) == EPOCHS * N_KEPT // BATCH and all(len(step) == BATCH for step in flow["steps"])
    assert flow["carried_types"] == ["int"]
    for p in prompts:
        assert p["ran"] == p["carried"] and p["sessions"] == list(range(p["carried"])), p
    # the pass's prompts ran the allocation: same (row, rollouts) pairs, same total
    assert Counter((p["position"], p["ran"]) for p in prompts) == _expected_pairs()
    assert sum(p["ran"] for p in prompts) == ROLLOUT_N * EPOCHS * N_KEPT
    # the key was consumed by _run_prompt, not handed on to the agent loop; every group finished
    assert "__rollout_n__" not in flow["agent_loop_keys"] and "trajval_position" in flow["agent_loop_keys"]
    assert flow["final_status"] == ["finished"]
    # a step's count is the sum over its prompts: it varies, the pass keeps n per prompt
    per_step = [sum(p["ran"] for p in step) for step in flow["steps"]]
    assert len(set(per_step)) > 1


def test_without_the_option_no_key_and_rollout_n_for_every_prompt(report):
    default = _result(report, "default")
    assert "__rollout_n__" not in default["keys"]
    prompts = [p for step in default["through_agent_loop"]["steps"] for p in step]
    assert prompts and all(p["carried"] is None and p["ran"] == ROLLOUT_N for p in prompts)


def test_validation_items_carry_no_rollout_n(report):
    run = _result(report, "pass")
    assert not run["val_weighted"] and "__rollout_n__" not in run["val_keys"]


@pytest.mark.parametrize("case, row, says", [
    ("nan", "row 2 (extra_info.index='t2')", "is nan"),
    ("above_one", "row 1 (extra_info.index='t1')", "= 1.5 is outside [0, 1]"),
    ("null", "row 3 (extra_info.index='t3')", "is missing (null)"),
    ("missing", "row 0 (extra_info.index='t0')", "is missing"),
])
def test_bad_pass_rates_name_the_row_and_the_field(report, case, row, says):
    error = _result(report, "bad")[case]
    assert error is not None, f"{case}: no error"
    assert error["trajval"], error  # trajval_ops.errors.TrajvalInputError
    assert row in error["message"] and f"field '{RATE}'" in error["message"] and says in error["message"], error
    assert "rollout_n_from_prior" in error["message"]


def test_a_checkpoint_of_another_allocation_is_refused(report):
    resume = _result(report, "resume")
    assert resume["other_allocation_differs"]
    assert resume["refused"] and resume["refused"]["type"] == "ValueError"
    assert "resume with the same" in resume["refused"]["message"]


if __name__ == "__main__":
    worker(Path(sys.argv[1]))
