"""TrajvalVerlDataset (``data.custom_cls``) against the real verl 0.9.1.

The test environment holds verl 0.7.1 (for :mod:`trajval_ops.samplers.verl`); verl 0.9.1 is
installed without dependencies into ``.venv/verl-latest``::

    .venv/bin/python -m pip install --no-deps --target .venv/verl-latest verl==0.9.1

This file runs itself once as a script in a subprocess with that folder first on PYTHONPATH (so
it shadows 0.7.1): the subprocess builds the datasets with verl's own ``create_rl_dataset``,
samples them with verl's ``create_rl_sampler`` through torchdata's ``StatefulDataLoader`` and
verl's ``collate_fn`` (as verl's V1 trainer does), and writes what it saw to a JSON report. The
tests check that report; the expected draws are computed here, in this process, from the pool's
definition and :func:`trajval_ops.core.multinomial_indices`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VERL_LATEST = REPO / ".venv" / "verl-latest"
VERL_VERSION = "0.9.1"
INSTALL_LINE = f"python -m pip install --no-deps --target .venv/verl-latest verl=={VERL_VERSION}"
#: Modules verl 0.9.1 imports on the tested path that come from the test environment (verl 0.7.1's).
NEEDED = ("torch", "torchdata", "omegaconf", "tensordict", "ray", "codetiming", "transformers", "datasets")

WEIGHT_CLASSES = (1.0, 0.4, 0.15)  # kept row i has weight WEIGHT_CLASSES[i % 3]
N_KEPT = 120
LONG_AT = (3, 60, 117)  # file positions of prompts verl's overlong filter drops
EPOCHS, SEED, DATA_SEED, OTHER_SEED = 2, 11, 7, 12
BATCH = 8
N_VAL = 10
HEAD_BATCHES = 7  # batches taken before the dataloader checkpoint
FIELD = "trajval_weight"


def kept_weights() -> list[float]:
    return [WEIGHT_CLASSES[i % len(WEIGHT_CLASSES)] for i in range(N_KEPT)]


def kept_ids() -> list[str]:
    return [f"t{i}" for i in range(N_KEPT)]


# ------------------------------------------------------------------------------------------------
# The subprocess (verl 0.9.1 first on sys.path)
# ------------------------------------------------------------------------------------------------
_NO_WEIGHT = object()


def _row(row_id: str, content: str, weight=_NO_WEIGHT) -> dict:
    row = {
        "data_source": "toy",
        "prompt": [{"role": "user", "content": content}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "0"},
        "extra_info": {"index": row_id, "split": "train"},
    }
    if weight is not _NO_WEIGHT:
        row[FIELD] = weight
    return row


LONG_PROMPT = "1+" * 40  # 80 characters for a character-level tokenizer, max_prompt_length 32


def _write(path: Path, rows: list[dict]) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)  # from_pylist keeps NaN apart from null
    return str(path)


def _train_rows() -> list[dict]:
    kept = [_row(i, f"{k}+{k}", w) for k, (i, w) in enumerate(zip(kept_ids(), kept_weights()))]
    for j, position in enumerate(LONG_AT):
        kept.insert(position, _row(f"long{j}", LONG_PROMPT, 100.0))
    return kept


def _config(work: Path, train, val, **trajval):
    from omegaconf import OmegaConf

    config = OmegaConf.create({
        "train_files": train, "val_files": val, "prompt_key": "prompt", "max_prompt_length": 32,
        "filter_overlong_prompts": True, "filter_overlong_prompts_workers": 1, "return_raw_chat": True,
        "truncation": "error", "shuffle": True, "seed": DATA_SEED, "train_batch_size": BATCH,
        "val_batch_size": None, "dataloader_num_workers": 0, "cache_dir": str(work / "verl_cache"),
        "custom_cls": {"path": "pkg://trajval_ops.samplers.verl_dataset", "name": "TrajvalVerlDataset"},
        "trajval": trajval,
    })
    OmegaConf.set_struct(config, True)  # as hydra hands it over
    return config


def _loader(config, dataset, batch_size=BATCH):
    """The train dataloader as verl 0.9.1's V1 trainer builds it (``_init_dataloader``)."""
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.trainer.ppo.utils import create_rl_sampler
    from verl.utils.dataset.rl_dataset import collate_fn

    return StatefulDataLoader(dataset=dataset, batch_size=batch_size, num_workers=config.dataloader_num_workers,
                              drop_last=True, collate_fn=collate_fn, sampler=create_rl_sampler(config, dataset))


def _item_json(item: dict) -> str:
    return json.dumps({k: v for k, v in item.items() if k != "dummy_tensor"}, sort_keys=True, default=str)


def _error(err: BaseException) -> dict:
    from trajval_ops.errors import TrajvalInputError

    return {"type": type(err).__name__, "trajval": isinstance(err, TrajvalInputError), "message": str(err)}


def scenario_env(ctx):
    import verl

    version_file = Path(verl.__file__).parent / "version" / "version"
    return {"version": verl.__version__, "file": verl.__file__,
            "version_file": version_file.read_text().strip() if version_file.exists() else None}


def scenario_train(ctx):
    from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
    from verl.utils.dataset.rl_dataset import RLHFDataset, get_dataset_class

    config = ctx["config"]
    cls = get_dataset_class(config)
    ds = create_rl_dataset(config.train_files, config, ctx["tokenizer"], None, is_train=True)
    n = len(ds.dataframe)
    blocks = [[ds[i]["extra_info"]["index"] for i in range(b * n, (b + 1) * n)] for b in range(EPOCHS)]
    loader = _loader(config, ds)
    served, first = [], None
    for batch in loader:
        first = first or batch
        served.extend(batch["index"].tolist())
    first_ids = first["index"].tolist()
    prompt_of = {row["extra_info"]["index"]: row["prompt"] for row in _train_rows()}
    return {
        "class": f"{cls.__module__}.{cls.__qualname__}", "is_rlhf_dataset": issubclass(cls, RLHFDataset),
        "instance_of": f"{type(ds).__module__}.{type(ds).__qualname__}", "weighted": ds.trajval_weighted,
        "len": len(ds), "kept_rows": n, "dataframe_ids": [r["index"] for r in ds.dataframe["extra_info"]],
        "weights": ds.trajval_weights.tolist(), "blocks": blocks,
        "epoch_rows": [ds.epoch_rows(b).tolist() for b in range(EPOCHS)],
        "sampler": type(create_rl_sampler(config, ds)).__module__ + "." + type(create_rl_sampler(config, ds)).__name__,
        "loader_len": len(loader), "served": served,
        "first_batch": {
            "keys": sorted(first), "size": len(first_ids),
            "dummy_tensor_shape": list(first["dummy_tensor"].shape),
            "raw_prompt_is_chat": all(isinstance(p, list) and p and p[0]["role"] == "user"
                                      for p in first["raw_prompt"]),
            "raw_prompt_matches_pool": all(list(p) == prompt_of[i] for p, i in zip(first["raw_prompt"], first_ids)),
            "index_is_extra_info_index": all(e["index"] == i for e, i in zip(first["extra_info"], first_ids)),
            "weights_ride_along": all(isinstance(w, float) for w in first[FIELD]),
        },
    }


def scenario_seeds(ctx):
    from verl.trainer.ppo.utils import create_rl_dataset

    work, tok, train, val = ctx["work"], ctx["tokenizer"], ctx["train"], ctx["val"]

    def rows(**trajval):
        config = _config(work, [train], [val], **trajval)
        ds = create_rl_dataset(config.train_files, config, tok, None)
        return [ds.epoch_rows(b).tolist() for b in range(trajval.get("epochs", 1))]

    # hydra's data.train_files=x.parquet gives one string, not a list
    config = _config(work, train, val, epochs=EPOCHS, seed=SEED)
    from_string = create_rl_dataset(config.train_files, config, tok, None)
    return {"again": rows(epochs=EPOCHS, seed=SEED), "other": rows(epochs=EPOCHS, seed=OTHER_SEED),
            "data_seed": rows(epochs=EPOCHS),
            "string_files": [from_string.epoch_rows(b).tolist() for b in range(EPOCHS)]}


def scenario_val(ctx):
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
    from torchdata.stateful_dataloader import StatefulDataLoader

    work, tok = ctx["work"], ctx["tokenizer"]
    out = {}
    for name, files in (("plain", ctx["val"]), ("with_weights", ctx["val_weighted"])):
        cfg = _config(work, [ctx["train"]], [files], epochs=EPOCHS, seed=SEED)
        ds = create_rl_dataset(cfg.val_files, cfg, tok, None, is_train=False)
        reference = RLHFDataset(data_files=[files], tokenizer=tok, config=cfg)
        # the validation dataloader as the V1 trainer builds it
        loader = StatefulDataLoader(dataset=ds, batch_size=cfg.val_batch_size or len(ds), num_workers=0,
                                    shuffle=False, drop_last=False, collate_fn=collate_fn)
        out[name] = {
            "class": type(ds).__qualname__, "weighted": ds.trajval_weighted, "len": len(ds),
            "same_items": [_item_json(ds[i]) for i in range(len(ds))]
            == [_item_json(reference[i]) for i in range(len(reference))],
            "loader_ids": [i for batch in loader for i in batch["index"].tolist()],
        }
    same = _config(work, [ctx["train"]], [ctx["train"]])
    try:
        create_rl_dataset(same.train_files, same, tok, None)
        out["train_equals_val"] = None
    except Exception as err:  # noqa: BLE001 - the report carries it
        out["train_equals_val"] = _error(err)
    return out


BAD_CASES = {
    # name: (rows as (id, weight); weight None = null, "drop" = no weight field at all)
    "nan_after_a_long_row": [("b0", 1.0), ("long", 1.0), ("b2", 0.5), ("b3", float("nan"))],
    "negative": [("b0", 1.0), ("b1", -0.5), ("b2", 0.5), ("b3", 1.0)],
    "null": [("b0", 1.0), ("b1", 1.0), ("b2", 0.5), ("b3", None)],
    "all_zero": [("b0", 0.0), ("b1", 0.0), ("b2", 0.0), ("b3", 0.0)],
    "missing_column": [("b0", "drop"), ("b1", "drop"), ("b2", "drop"), ("b3", "drop")],
}


def scenario_bad(ctx):
    from verl.trainer.ppo.utils import create_rl_dataset

    work, tok = ctx["work"], ctx["tokenizer"]
    out = {}
    for name, spec in BAD_CASES.items():
        rows = [_row(i, LONG_PROMPT if i == "long" else "1+1", *(() if w == "drop" else (w,))) for i, w in spec]
        path = _write(work / f"bad_{name}.parquet", rows)
        config = _config(work, [path], [ctx["val"]])
        try:
            create_rl_dataset(config.train_files, config, tok, None)
            out[name] = None
        except Exception as err:  # noqa: BLE001
            out[name] = _error(err)
    for name, options in (("epochs_zero", {"epochs": 0}), ("unknown_option", {"epoch": 3})):
        config = _config(work, [ctx["train"]], [ctx["val"]], **options)
        try:
            create_rl_dataset(config.train_files, config, tok, None)
            out[name] = None
        except Exception as err:  # noqa: BLE001
            out[name] = _error(err)
    return out


def scenario_resume(ctx):
    import torch
    from verl.trainer.ppo.utils import create_rl_dataset

    work, tok, config = ctx["work"], ctx["tokenizer"], ctx["config"]

    def build(cfg):
        return _loader(cfg, create_rl_dataset(cfg.train_files, cfg, tok, None))

    loader = build(config)
    it = iter(loader)
    head = [next(it)["index"].tolist() for _ in range(HEAD_BATCHES)]
    torch.save(loader.state_dict(), work / "data.pt")  # as verl's _save_checkpoint does
    tail = [batch["index"].tolist() for batch in it]

    resumed = build(config)
    resumed.load_state_dict(torch.load(work / "data.pt", weights_only=False))
    after = [batch["index"].tolist() for batch in resumed]

    other = build(_config(work, [ctx["train"]], [ctx["val"]], epochs=EPOCHS, seed=OTHER_SEED))
    other.load_state_dict(torch.load(work / "data.pt", weights_only=False))
    try:
        next(iter(other))
        refused = None
    except Exception as err:  # noqa: BLE001
        refused = _error(err)
    return {"head": head, "tail": tail, "resumed": after, "other_weights": refused}


ROLLOUTS = 4  # responses per prompt in the online scenario's steps


def _step_batch(batch: dict, solved: set[int], with_position: bool = True):
    """A step's batch as verl's legacy trainer holds it at ``on_batch_end``: the drawn prompts
    repeated ``ROLLOUTS`` times (interleaved), each response with its token-level scores (all
    correct for pool rows in ``solved``, all wrong otherwise)."""
    import numpy as np
    import torch
    from verl.protocol import DataProto

    if not with_position:
        batch = {k: v for k, v in batch.items() if k != "trajval_position"}
    proto = DataProto.from_single_dict(batch).repeat(repeat_times=ROLLOUTS, interleave=True)
    rows = proto.non_tensor_batch.get("trajval_position", np.zeros(len(proto), dtype=np.int64))
    scores = torch.zeros(len(proto), 5)
    scores[:, -1] = torch.tensor([1.0 if int(r) in solved else 0.0 for r in rows])
    proto.batch["token_level_scores"] = scores
    return proto


def scenario_online(ctx):
    import numpy as np
    import torch
    from omegaconf import open_dict
    from verl.trainer.ppo.utils import create_rl_dataset

    work, tok = ctx["work"], ctx["tokenizer"]
    config = _config(work, [ctx["train"]], [ctx["val"]], epochs=EPOCHS, seed=SEED, online="greso")
    solved = {r for r in range(N_KEPT) if r % len(WEIGHT_CLASSES) == 0}  # the heaviest class, always solved

    def run(feedback: bool, resume_from=None, stop_after=None):
        ds = create_rl_dataset(config.train_files, config, tok, None)
        loader = _loader(config, ds)
        if resume_from is not None:
            loader.load_state_dict(torch.load(resume_from, weights_only=False))
        batches = []
        for step, batch in enumerate(loader):
            batches.append([int(r) for r in batch["trajval_position"]])
            if feedback:
                ds.on_batch_end(batch=_step_batch(batch, solved))
            if stop_after is not None and step + 1 == stop_after:
                torch.save(loader.state_dict(), work / "online.pt")
                return batches, ds
        return batches, ds

    with_feedback, ds = run(True)
    without, _ = run(False)
    head, _ = run(True, stop_after=HEAD_BATCHES)
    tail, _ = run(True, resume_from=work / "online.pt")
    try:
        ds.on_batch_end(batch=_step_batch({"dummy_tensor": torch.zeros(2, 1), "index": np.array(["a", "b"], dtype=object)},
                                         solved, with_position=False))
        no_position = None
    except Exception as err:  # noqa: BLE001
        no_position = _error(err)
    workers = _config(work, [ctx["train"]], [ctx["val"]], online="greso")
    with open_dict(workers):
        workers.dataloader_num_workers = 2
    try:
        create_rl_dataset(workers.train_files, workers, tok, None)
        refused = None
    except Exception as err:  # noqa: BLE001
        refused = _error(err)
    return {"with_feedback": with_feedback, "without": without, "head": head, "tail": tail,
            "easy_streak_max": int(ds.trajval_source.online.easy_streak.max()),
            "p_easy": ds.trajval_source.online.p_easy, "no_position": no_position, "workers_refused": refused}


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in dict(globals()).items() if name.startswith("scenario_")}


def worker(work: Path) -> None:
    """Run every scenario; each one's result or traceback goes into ``work/report.json``."""
    from transformers import AutoTokenizer

    from trajval_ops.models import resolve_model

    ctx = {"work": work, "tokenizer": AutoTokenizer.from_pretrained(resolve_model("tiny-arith"))}
    ctx["train"] = _write(work / "train.parquet", _train_rows())
    ctx["val"] = _write(work / "val.parquet", [_row(f"v{i}", f"{i}*{i}") for i in range(N_VAL)])
    ctx["val_weighted"] = _write(work / "val_weighted.parquet",
                                 [_row(f"w{i}", f"{i}-{i}", 0.0 if i else 1.0) for i in range(N_VAL)])
    ctx["config"] = _config(work, [ctx["train"]], [ctx["val"]], epochs=EPOCHS, seed=SEED)
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
# The tests (this process: verl 0.7.1 environment, verl not imported)
# ------------------------------------------------------------------------------------------------
def _skip_reason() -> str | None:
    if not (VERL_LATEST / "verl").is_dir():
        return f"verl {VERL_VERSION} is not installed in .venv/verl-latest (install it with: {INSTALL_LINE})"
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        return f"verl {VERL_VERSION} needs {', '.join(missing)} from the test environment (TRAJVAL_WITH_TRAINERS=1)"
    return None


def run_verl_worker(script: str, work: Path, timeout: int) -> dict:
    """Run ``script``'s scenarios in a child process against verl 0.9 (``VERL_LATEST`` first on
    its path) and return the ``report.json`` it writes in ``work``; skips without that verl."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(VERL_LATEST), os.environ.get("PYTHONPATH")])),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_DATASETS_CACHE": str(work / "hf_datasets"),
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, script, str(work)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"worker failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return json.loads((work / "report.json").read_text())


def scenario_result(report, name):
    """One scenario's result from a worker's report (its traceback when it raised)."""
    entry = report[name]
    assert entry["ok"], f"scenario {name} raised in verl {VERL_VERSION}:\n{entry['traceback']}"
    return entry["result"]


_result = scenario_result


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return run_verl_worker(__file__, tmp_path_factory.mktemp("verl_latest"), timeout=240)


def _expected_block(seed: int, block: int) -> list[int]:
    """Rows (kept positions) of a block, from the core draw, independent of the adapter."""
    import numpy as np

    from trajval_ops.core import multinomial_indices

    return multinomial_indices(kept_weights(), N_KEPT, seed=np.random.SeedSequence((seed, block))).tolist()


def test_runs_against_verl_0_9_1_from_the_target_folder(report):
    env = _result(report, "env")
    assert env["version"] == VERL_VERSION and env["version_file"] == VERL_VERSION
    assert Path(env["file"]).is_relative_to(VERL_LATEST)


def test_verl_resolves_our_class_and_the_length_is_epochs_times_kept_rows(report):
    train = _result(report, "train")
    assert train["class"] == train["instance_of"] == "trajval_ops.samplers.verl_dataset.TrajvalVerlDataset"
    assert train["is_rlhf_dataset"] and train["weighted"]
    assert train["sampler"] == "torchdata.stateful_dataloader.sampler.RandomSampler"
    # weights are read after verl's overlong-prompt filter: the long rows are gone, positions align
    assert train["kept_rows"] == N_KEPT and train["dataframe_ids"] == kept_ids()
    assert train["weights"] == kept_weights()
    assert train["len"] == EPOCHS * N_KEPT
    assert train["loader_len"] == EPOCHS * N_KEPT // BATCH  # the V1 trainer's steps_per_epoch


def test_each_epoch_block_is_exactly_the_seeded_weighted_draw(report):
    train = _result(report, "train")
    ids = kept_ids()
    for block in range(EPOCHS):
        expected = _expected_block(SEED, block)
        assert sorted(train["epoch_rows"][block]) == expected
        assert Counter(train["blocks"][block]) == Counter(ids[r] for r in expected)  # through __getitem__
    # one pass of verl's RandomSampler over the whole index space serves every block's multiset
    assert Counter(train["served"]) == Counter(i for block in train["blocks"] for i in block)
    assert not any(i.startswith("long") for i in train["served"])


def test_row_counts_follow_the_weights(report):
    from scipy.stats import chisquare

    train = _result(report, "train")
    weight_of = dict(zip(kept_ids(), kept_weights()))
    prob = [w * (N_KEPT // len(WEIGHT_CLASSES)) / sum(kept_weights()) for w in WEIGHT_CLASSES]
    for block in train["blocks"]:
        counts = Counter(weight_of[i] for i in block)
        observed = [counts[w] for w in WEIGHT_CLASSES]
        assert chisquare(observed, [p * N_KEPT for p in prob]).pvalue > 0.01, observed
        assert chisquare(observed, [N_KEPT / len(WEIGHT_CLASSES)] * 3).pvalue < 1e-6, observed  # not uniform


def test_same_seed_same_draw_other_seed_other_draw(report):
    train, seeds = _result(report, "train"), _result(report, "seeds")
    assert seeds["again"] == seeds["string_files"] == train["epoch_rows"]
    assert seeds["other"] != train["epoch_rows"]
    assert [sorted(b) for b in seeds["other"]] == [_expected_block(OTHER_SEED, b) for b in range(EPOCHS)]
    # no data.trajval.seed: data.seed is the seed
    assert [sorted(b) for b in seeds["data_seed"]] == [_expected_block(DATA_SEED, b) for b in range(EPOCHS)]


def test_items_keep_verls_getitem_contract(report):
    first = _result(report, "train")["first_batch"]
    contract = {"raw_prompt", "index", "extra_info", "dummy_tensor", "tools_kwargs", "interaction_kwargs"}
    assert contract <= set(first["keys"])
    assert first["size"] == BATCH and first["dummy_tensor_shape"] == [BATCH, 1]
    assert first["raw_prompt_is_chat"] and first["raw_prompt_matches_pool"] and first["index_is_extra_info_index"]
    assert first["weights_ride_along"]


def test_validation_files_are_served_unchanged(report):
    val = _result(report, "val")
    for name in ("plain", "with_weights"):  # with a weight column too: only data.train_files are weighted
        assert val[name]["class"] == "TrajvalVerlDataset" and not val[name]["weighted"]
        assert val[name]["len"] == N_VAL and val[name]["same_items"]
    assert val["plain"]["loader_ids"] == [f"v{i}" for i in range(N_VAL)]
    assert val["with_weights"]["loader_ids"] == [f"w{i}" for i in range(N_VAL)]
    refused = val["train_equals_val"]
    assert refused and refused["type"] == "ValueError"
    assert "data.train_files equals data.val_files" in refused["message"]


@pytest.mark.parametrize("case, row, says", [
    ("nan_after_a_long_row", "row 2 (extra_info.index='b3')", "is nan"),
    ("negative", "row 1 (extra_info.index='b1')", "is not a finite number >= 0"),
    ("null", "row 3 (extra_info.index='b3')", "is missing (null)"),
    ("all_zero", "rows 0 to 3", "every weight is zero"),
    ("missing_column", "row 0", "is missing from the dataset"),
])
def test_bad_weights_name_the_row_and_the_field(report, case, row, says):
    error = _result(report, "bad")[case]
    assert error is not None, f"{case}: no error"
    assert error["trajval"], error  # trajval_ops.errors.TrajvalInputError
    assert row in error["message"] and f"'{FIELD}'" in error["message"] and says in error["message"], error


def test_bad_options_are_refused(report):
    bad = _result(report, "bad")
    assert bad["epochs_zero"]["type"] == "ValueError"
    assert "epochs must be an integer >= 1" in bad["epochs_zero"]["message"]
    assert bad["unknown_option"]["type"] == "ValueError" and "['epoch']" in bad["unknown_option"]["message"]


def test_dataloader_checkpoint_resumes_mid_epoch_on_the_same_rows(report):
    resume = _result(report, "resume")
    assert len(resume["head"]) == HEAD_BATCHES and len(resume["tail"]) == EPOCHS * N_KEPT // BATCH - HEAD_BATCHES
    assert resume["resumed"] == resume["tail"]
    refused = resume["other_weights"]
    assert refused and refused["type"] == "ValueError" and "resume with the same" in refused["message"]


def test_online_feedback_moves_later_draws_and_resumes(report):
    online = _result(report, "online")
    steps = EPOCHS * N_KEPT // BATCH
    assert len(online["with_feedback"]) == len(online["without"]) == steps
    # until the first feedback the two runs draw the same stream; after it they part
    assert online["with_feedback"][0] == online["without"][0]
    assert online["with_feedback"] != online["without"]
    # the always-solved heaviest class builds easy streaks and is drawn less than without feedback
    heavy = lambda batches: sum(r % len(WEIGHT_CLASSES) == 0 for b in batches[steps // 2:] for r in b)  # noqa: E731
    assert online["easy_streak_max"] >= 2
    assert heavy(online["with_feedback"]) < 0.8 * heavy(online["without"]), (heavy(online["with_feedback"]),
                                                                              heavy(online["without"]))
    assert online["p_easy"] != 0.5  # GRESO adapted p in the second epoch
    # a dataloader checkpoint carries the stream and the scheduler
    assert online["head"] == online["with_feedback"][:HEAD_BATCHES]
    assert online["tail"] == online["with_feedback"][HEAD_BATCHES:]


def test_online_refuses_workers_and_foreign_batches(report):
    online = _result(report, "online")
    assert online["workers_refused"]["type"] == "ValueError"
    assert "dataloader_num_workers=0" in online["workers_refused"]["message"]
    assert online["no_position"]["type"] == "ValueError"
    assert "trajval_position" in online["no_position"]["message"]


if __name__ == "__main__":
    worker(Path(sys.argv[1]))
