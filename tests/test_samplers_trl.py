"""TRL adapter against the real trl 1.16 GRPOTrainer / RepeatSampler, plus a short GRPO run."""

import collections
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

from trl.trainer.utils import RepeatSampler  # noqa: E402

from trajval_ops.samplers.online import ComposedSampler  # noqa: E402
from trajval_ops.samplers.trl import TrajvalGRPOTrainer, WeightedRepeatSampler  # noqa: E402


def _sampler(weights, seed=3, batch_size=3, mini=2, repeat=2):
    data = list(range(len(weights)))
    return WeightedRepeatSampler(data, ComposedSampler(weights, seed=seed), mini_repeat_count=mini,
                                 batch_size=batch_size, repeat_count=repeat)


def test_is_a_real_repeat_sampler_with_the_same_length():
    sampler = _sampler(np.ones(7))
    reference = RepeatSampler(list(range(7)), mini_repeat_count=2, batch_size=3, repeat_count=2, seed=3)
    assert isinstance(sampler, RepeatSampler)
    assert len(sampler) == len(reference) == len(list(sampler))


def test_keeps_the_repeat_structure():
    mini, batch, repeat = 2, 3, 2
    out = list(_sampler(np.arange(1, 10, dtype=float), mini=mini, batch_size=batch, repeat=repeat))
    block = mini * batch
    for start in range(0, len(out), block * repeat):
        first = out[start:start + block]
        assert all(first[i] == first[i + 1] for i in range(0, block, mini))  # each index x num_generations
        for r in range(1, repeat):  # the chunk repeated repeat_count times
            assert out[start + r * block:start + (r + 1) * block] == first


def test_same_seed_same_stream_on_every_process_and_epoch_dependent():
    a, b = _sampler(np.arange(1, 30, dtype=float)), _sampler(np.arange(1, 30, dtype=float))
    first_a, first_b = list(a), list(b)  # two "processes"
    assert first_a == first_b
    assert list(a) != first_a  # next epoch draws a different stream
    b.set_epoch(0)
    assert list(b) == first_a  # Trainer's set_epoch replays an epoch exactly (resume)


def test_zero_weight_rows_are_never_drawn():
    weights = np.array([0.0, 1.0, 0.0, 2.0, 0.0, 0.0])
    assert set(_sampler(weights, batch_size=2)) <= {1, 3}


N_TASKS = 8
HEAVY = {0, 1}


def _grpo_run(tmp_path, reward, online_scheduler=None, **trainer_options):
    os.environ["HF_HUB_OFFLINE"] = "1"
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from trajval_ops.models import resolve_model

    model_dir = resolve_model("tiny-random-llama")
    dataset = Dataset.from_dict({
        "prompt": [[{"role": "user", "content": f"What is {i} + {i}?"}] for i in range(N_TASKS)],
        "task_id": list(range(N_TASKS)),
        "trajval_weight": [1.0 if i in HEAVY else 0.05 for i in range(N_TASKS)],
    })
    args = GRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, use_vllm=False, report_to="none",
        num_generations=2, per_device_train_batch_size=8, max_completion_length=8,
        gradient_checkpointing=False, max_steps=4, logging_steps=1, save_strategy="no", seed=11,
    )
    trainer = TrajvalGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=reward,
                                 args=args, train_dataset=dataset,
                                 processing_class=AutoTokenizer.from_pretrained(model_dir),
                                 online_scheduler=online_scheduler, **trainer_options)
    trainer.train()
    return trainer


@pytest.mark.slow
def test_grpo_run_draws_heavier_rows_more_often(tmp_path):
    heavy = HEAVY
    seen = []

    def record_reward(prompts, completions, task_id, **kwargs):
        seen.append(list(task_id))
        return [float(len(c[0]["content"]) % 2) for c in completions]

    trainer = _grpo_run(tmp_path, record_reward)
    assert trainer.trajval_source is not None
    ids = [i for call in seen for i in call]
    assert len(ids) == 4 * 8
    for call in seen:  # every prompt appears num_generations times in its generation batch
        assert all(count % 2 == 0 for count in collections.Counter(call).values())
    heavy_share = sum(i in heavy for i in ids) / len(ids)
    # p(heavy) = 2 / (2 + 6 * 0.05) = 0.87; uniform would give 0.25
    assert heavy_share >= 0.6, heavy_share


@pytest.mark.slow
def test_grpo_run_feeds_the_online_scheduler(tmp_path):
    from trajval_ops.samplers.online import GresoScheduler

    seen = []

    def solved_if_heavy(prompts, completions, task_id, **kwargs):
        seen.append(list(task_id))
        return [1.0 if t in HEAVY else float(i % 2) for i, t in enumerate(task_id)]

    greso = GresoScheduler(N_TASKS)
    trainer = _grpo_run(tmp_path, solved_if_heavy, online_scheduler=greso)
    assert trainer.trajval_source.online is greso
    drawn = collections.Counter(i for call in seen for i in set(call))
    # every generation batch reached the scheduler: always-solved heavy tasks carry an easy streak
    for task in HEAVY & set(drawn):
        assert greso.easy_streak[task] >= 1
    assert all(greso.easy_streak[t] == 0 for t in drawn if t not in HEAVY)
    assert greso.online_weights()[sorted(HEAVY & set(drawn))].max() < 1.0


@pytest.mark.slow
def test_dynamic_sampling_keeps_zero_variance_groups_out_of_the_loss_and_counts_every_completion(tmp_path):
    """Even tasks are always solved (their groups carry no gradient), odd ones half the time:
    DAPO's rule refills the batch with informative groups and logs what that cost."""
    generated, losses = [], []

    def even_solved(prompts, completions, task_id, **kwargs):
        generated.append(len(completions))
        return [1.0 if t % 2 == 0 else float(i % 2) for i, t in enumerate(task_id)]

    original = TrajvalGRPOTrainer.compute_loss

    def spying(self, model, inputs, *args, **kwargs):
        losses.append(inputs["advantages"].detach().clone())
        return original(self, model, inputs, *args, **kwargs)

    TrajvalGRPOTrainer.compute_loss = spying
    try:
        trainer = _grpo_run(tmp_path, even_solved, dynamic_sampling=True)
    finally:
        TrajvalGRPOTrainer.compute_loss = original
    assert losses and all(bool((advantages != 0).all()) for advantages in losses)  # only informative groups
    logged = [entry for entry in trainer.state.log_history if "dynamic_sampling/completions" in entry]
    assert len(logged) == 4  # one entry per step (logging_steps 1)
    assert sum(entry["dynamic_sampling/completions"] for entry in logged) == sum(generated) > 4 * 8
    assert all(entry["dynamic_sampling/rounds"] >= 2 for entry in logged)  # half the groups dropped: a refill


def test_dynamic_sampling_selects_and_merges_groups_of_different_lengths():
    from trajval_ops.samplers.trl import concat_outputs, informative_groups, select_groups

    advantages = torch.tensor([0.0, 0.0, 0.5, -0.5, 0.0, 0.0])
    keep = informative_groups(advantages, 2)
    assert keep.tolist() == [False, True, False]
    first = {"prompt_ids": torch.tensor([[0, 7], [0, 7], [5, 6], [5, 6], [0, 8], [0, 8]]),
             "completion_ids": torch.tensor([[1, 2]] * 6), "advantages": advantages, "num_items_in_batch": 12}
    second = {"prompt_ids": torch.tensor([[9], [9]]), "completion_ids": torch.tensor([[3, 4, 5]] * 2),
              "advantages": torch.tensor([1.0, -1.0]), "num_items_in_batch": 6}
    merged = concat_outputs([select_groups(first, keep, 2), second], pad_token_id=0)
    assert merged["prompt_ids"].tolist() == [[5, 6], [5, 6], [0, 9], [0, 9]]  # prompts padded on the left
    assert merged["completion_ids"].tolist() == [[1, 2, 0], [1, 2, 0], [3, 4, 5], [3, 4, 5]]
    assert merged["advantages"].tolist() == [0.5, -0.5, 1.0, -1.0]


def _weighted_pool(weights):
    from datasets import Dataset

    return Dataset.from_dict({
        "prompt": [[{"role": "user", "content": f"What is {i} + {i}?"}] for i in range(len(weights))],
        "task_id": list(range(len(weights))),
        "trajval_weight": list(weights),
    })


def test_weighted_iterable_streams_rows_by_weight():
    from datasets import IterableDataset
    from scipy.stats import chisquare

    from trajval_ops.samplers.trl import weighted_iterable_dataset

    weights = [0.0, 1.0, 3.0, 0.5]
    pool = _weighted_pool(weights)
    stream = weighted_iterable_dataset(pool, seed=5, draws_per_epoch=4000, epochs=1)
    assert isinstance(stream, IterableDataset)
    rows = list(stream)
    assert len(rows) == 4000 and rows[0].keys() == pool[0].keys()
    counts = np.bincount([row["task_id"] for row in rows], minlength=4)
    assert counts[0] == 0  # weight 0: never drawn
    expected = 4000 * np.array(weights[1:]) / sum(weights)
    assert chisquare(counts[1:], expected).pvalue > 1e-3
    again = [row["task_id"] for row in weighted_iterable_dataset(pool, seed=5, draws_per_epoch=4000, epochs=1)]
    assert again == [row["task_id"] for row in rows]  # every process streams the same rows
    other = [row["task_id"] for row in weighted_iterable_dataset(pool, seed=6, draws_per_epoch=4000, epochs=1)]
    assert other != again
    two = [row["task_id"] for row in weighted_iterable_dataset(pool, seed=5, draws_per_epoch=100, epochs=2)]
    assert len(two) == 200 and two[:100] != two[100:]  # each epoch its own draw


def test_weighted_iterable_refuses_bad_weights_naming_the_row():
    from trajval_ops.samplers.trl import weighted_iterable_dataset
    from trajval_ops.errors import TrajvalInputError

    with pytest.raises(TrajvalInputError, match=r"row 1.*trajval_weight"):
        weighted_iterable_dataset(_weighted_pool([1.0, float("nan")]))


def test_weighted_iterable_through_grpo_trainers_iterable_path(tmp_path):
    """TRL's GRPOTrainer takes the stream as it is (no sampler): its dataloader rebuilds the
    num_generations groups on the weighted draws."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from trajval_ops.models import resolve_model
    from trajval_ops.samplers.trl import weighted_iterable_dataset

    model_dir = resolve_model("tiny-random-llama")
    weights = [1.0 if i in HEAVY else 0.0 for i in range(N_TASKS)]
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, use_vllm=False, report_to="none",
                      num_generations=2, per_device_train_batch_size=8, max_completion_length=8,
                      gradient_checkpointing=False, max_steps=4, save_strategy="no", seed=11,
                      shuffle_dataset=False)
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir),
                          reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=args,
                          train_dataset=weighted_iterable_dataset(_weighted_pool(weights), seed=3),
                          processing_class=AutoTokenizer.from_pretrained(model_dir))
    batches = iter(trainer.get_train_dataloader())
    for _ in range(3):
        ids = [example["task_id"] for example in next(batches)]
        assert ids and set(ids) <= HEAVY  # only rows with weight are drawn
        assert all(ids[i] == ids[i + 1] for i in range(0, len(ids), 2))  # groups of num_generations
