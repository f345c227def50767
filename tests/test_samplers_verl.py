"""verl adapter against verl 0.7.1's real AbstractSampler, RLHFDataset, DataProto and create_rl_sampler."""

import os

import numpy as np
import pytest

pytest.importorskip("verl.experimental.dataset.sampler", reason="needs verl==0.7.1 (see docs/howto/trainers.md)")

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.experimental.dataset.sampler import AbstractCurriculumSampler, AbstractSampler  # noqa: E402

from trajval_ops.samplers.verl import TrajvalVerlCurriculumSampler, TrajvalVerlSampler  # noqa: E402
from trajval_ops.errors import TrajvalInputError  # noqa: E402

N = 12
HEAVY_IDS = {"t0", "t1"}
LONG = {3, 4}  # prompts that verl's overlong filter drops


def _config(class_name="TrajvalVerlSampler", **sampler):
    return OmegaConf.create({
        "prompt_key": "prompt", "max_prompt_length": 40, "filter_overlong_prompts": True,
        "return_raw_chat": True, "shuffle": True, "seed": 5, "train_batch_size": 4,
        "dataloader_num_workers": 0, "cache_dir": None,
        "sampler": {"class_path": "pkg://trajval_ops.samplers.verl", "class_name": class_name, **sampler},
    })


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    os.environ["HF_HUB_OFFLINE"] = "1"
    import pandas as pd
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from trajval_ops.models import resolve_model

    rows = []
    for i in range(N):
        words = " ".join(["long"] * 80) if i in LONG else f"{i} + {i}"
        rows.append({
            "data_source": "toy", "prompt": [{"role": "user", "content": f"What is {words}?"}],
            "reward_model": {"ground_truth": str(2 * i), "style": "rule"},
            "extra_info": {"index": f"t{i}"},
            "trajval_weight": 1.0 if f"t{i}" in HEAVY_IDS else 0.05,
        })
    path = tmp_path_factory.mktemp("verl") / "train.parquet"
    pd.DataFrame(rows).to_parquet(path)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny-random-llama"))
    config = _config()
    config.cache_dir = str(path.parent / "cache")
    ds = RLHFDataset(data_files=[str(path)], tokenizer=tokenizer, config=config)
    assert len(ds) == N - len(LONG)  # the real filter dropped the long prompts
    return ds


def test_reads_weights_after_the_overlong_filter(dataset):
    sampler = TrajvalVerlSampler(dataset, _config())
    assert isinstance(sampler, AbstractSampler)
    ids = [dataset.dataframe[int(i)]["extra_info"]["index"] for _ in range(30) for i in sampler]
    heavy_share = np.mean([i in HEAVY_IDS for i in ids])
    assert heavy_share == pytest.approx(2 / (2 + 8 * 0.05), abs=0.07)


def test_same_seed_same_stream_and_state_resume(dataset):
    a, b = TrajvalVerlSampler(dataset, _config()), TrajvalVerlSampler(dataset, _config())
    assert list(a) == list(b)
    it = iter(a)
    head = [next(it) for _ in range(3)]
    state = a.state_dict()
    tail = list(it)
    c = TrajvalVerlSampler(dataset, _config())
    c.load_state_dict(state)
    assert head and list(c) == tail


def test_a_resume_in_an_epochs_last_step_starts_the_next_epoch_as_verls_loop_does(dataset):
    """verl resumes its loop at epoch global_steps // len(dataloader) (drop_last) and never calls
    set_epoch: a checkpoint in an epoch's last step resumed the sampler in that epoch, whose
    remainder (less than a batch) served nothing in the loop's next epoch: an epoch lost."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader", reason="needs torchdata (verl's)")

    def loop(state=None, save_at=None):
        sampler = TrajvalVerlSampler(dataset, _config())
        loader = stateful.StatefulDataLoader(list(range(len(dataset))), batch_size=4, drop_last=True,
                                             sampler=sampler, collate_fn=list)
        steps = 0
        if state is not None:
            loader.load_state_dict(state["loader"])
            steps = state["steps"]
        served, saved = [], None
        for _ in range(steps // len(loader), 3):
            for batch in loader:
                steps += 1
                served.append(batch)
                if steps == save_at:
                    saved = {"loader": loader.state_dict(), "steps": steps}
        return served, saved

    full, _ = loop()
    assert len(full) == 6  # 10 rows, batches of 4: two a epoch
    for step in range(1, len(full)):
        assert loop(loop(save_at=step)[1])[0] == full[step:], step


@pytest.mark.parametrize("change, message", [({"seed": 5.5}, "seed must be an integer, got float 5.5"),
                                             ({"train_batch_size": 4.5}, "data.train_batch_size must be an integer, "
                                                                         "got float 4.5")])
def test_a_seed_or_batch_size_that_is_not_a_whole_number_is_refused(dataset, change, message):
    """int() read them as 5 and 4."""
    config = _config()
    for key, value in change.items():
        config[key] = value
    with pytest.raises(ValueError, match=message):
        TrajvalVerlSampler(dataset, config)


def test_missing_weight_column_is_a_clear_error(dataset):
    with pytest.raises(TrajvalInputError, match="field 'nope' is missing"):
        TrajvalVerlSampler(dataset, _config(weight_key="nope"))


def _batch(dataset, positions, rewards):
    # what verl 0.7.1 keeps in the training batch: extra_info (dict per rollout), scores per token
    extra = np.array([dataset.dataframe[int(p)]["extra_info"] for p in positions], dtype=object)
    scores = torch.zeros(len(positions), 5)
    scores[:, -1] = torch.tensor(rewards, dtype=torch.float32)
    return DataProto.from_dict(tensors={"token_level_scores": scores}, non_tensors={"extra_info": extra})


def test_curriculum_update_from_a_real_dataproto(dataset):
    sampler = TrajvalVerlCurriculumSampler(dataset, _config("TrajvalVerlCurriculumSampler", online="greso"))
    assert isinstance(sampler, AbstractCurriculumSampler)
    solved = 0  # position 0 (t0, heavy) is always solved
    for _ in range(4):
        positions = np.repeat([solved, 5], 4)
        sampler.update(_batch(dataset, positions, [1.0] * 4 + [1.0, -1.0, 1.0, -1.0]))
    keep = sampler.source.online.online_weights()
    assert keep[solved] < 0.1 and keep[5] == 1.0


def test_curriculum_rejects_unknown_task_ids(dataset):
    sampler = TrajvalVerlCurriculumSampler(dataset, _config("TrajvalVerlCurriculumSampler"))
    bad = DataProto.from_dict(tensors={"token_level_scores": torch.zeros(1, 2)},
                              non_tensors={"extra_info": np.array([{"index": "zzz"}], dtype=object)})
    with pytest.raises(TrajvalInputError, match="'zzz'"):
        sampler.update(bad)
    no_ids = DataProto.from_dict(tensors={"token_level_scores": torch.zeros(1, 2)},
                                 non_tensors={"uid": np.array(["u"], dtype=object)})
    with pytest.raises(TrajvalInputError, match="no 'extra_info.index'"):
        sampler.update(no_ids)


def test_curriculum_needs_unique_task_ids(dataset):
    with pytest.raises(TrajvalInputError, match="row 1: task id 'data_source' is duplicate 'toy'"):
        TrajvalVerlCurriculumSampler(dataset, _config("TrajvalVerlCurriculumSampler", id_key="data_source"))


@pytest.mark.slow
def test_verl_create_rl_sampler_builds_it_from_config(dataset):
    from verl.trainer.main_ppo import create_rl_sampler  # imports ray and the trainer (~20 s)

    sampler = create_rl_sampler(_config(), dataset)
    assert isinstance(sampler, TrajvalVerlSampler)
    assert len(list(sampler)) == len(dataset)
