"""TRL adapter against the real trl 1.16 GRPOTrainer / RepeatSampler, plus a short GRPO run."""

import collections
import os
import re

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


def _grpo_run(tmp_path, reward, online_scheduler=None, weights=None, config=None, resume=None, train=True,
              **trainer_options):
    os.environ["HF_HUB_OFFLINE"] = "1"
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from trajval_ops.models import resolve_model

    model_dir = resolve_model("tiny-random-llama")
    dataset = Dataset.from_dict({
        "prompt": [[{"role": "user", "content": f"What is {i} + {i}?"}] for i in range(N_TASKS)],
        "task_id": list(range(N_TASKS)),
        "trajval_weight": weights or [1.0 if i in HEAVY else 0.05 for i in range(N_TASKS)],
    })
    args = GRPOConfig(**{
        "output_dir": str(tmp_path), "use_cpu": True, "bf16": False, "use_vllm": False, "report_to": "none",
        "num_generations": 2, "per_device_train_batch_size": 8, "max_completion_length": 8,
        "gradient_checkpointing": False, "max_steps": 4, "logging_steps": 1, "save_strategy": "no", "seed": 11,
        **(config or {})})
    trainer = TrajvalGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=reward,
                                 args=args, train_dataset=dataset,
                                 processing_class=AutoTokenizer.from_pretrained(model_dir),
                                 online_scheduler=online_scheduler, **trainer_options)
    if train:
        trainer.train(resume_from_checkpoint=resume)
    return trainer


def test_without_a_weight_column_the_trainer_samples_as_trl_does(tmp_path):
    """``trajval validate --trainer trl``'s uniform arm: ``weight_column=None`` leaves TRL's own
    ``RepeatSampler`` (its shuffle, its seed), and no weighted sampler state is kept."""
    trainer = _grpo_run(tmp_path, lambda completions, **_: [0.0] * len(completions), train=False, weight_column=None)
    sampler = trainer._get_train_sampler()
    assert type(sampler) is RepeatSampler and trainer.trajval_sampler is None
    reference = RepeatSampler(trainer.train_dataset, mini_repeat_count=2, batch_size=8 // 2, repeat_count=1,
                              shuffle=True, seed=11)
    assert list(sampler) == list(reference)


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


def test_a_resumed_online_run_serves_the_uninterrupted_runs_prompts(tmp_path):
    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.samplers.online import BotsScheduler
    from trajval_ops.samplers.trl import SAMPLER_STATE_FILE

    def run(folder, resume=None):
        served = []

        def solved_below_4(prompts, completions, task_id, **kwargs):
            served.append(list(task_id))
            return [1.0 if t < 4 else 0.0 for t in task_id]

        bots = BotsScheduler(N_TASKS, m=2)  # a Thompson sample per feedback: the stream moves with it
        # 2 prompts a step: 4 steps an epoch; checkpoint-4 ends epoch 0, checkpoint-6 is inside epoch 1
        config = {"per_device_train_batch_size": 4, "max_completion_length": 2, "max_steps": 10,
                  "save_strategy": "steps", "save_steps": 2, "disable_tqdm": True}
        _grpo_run(tmp_path / folder, solved_below_4, online_scheduler=bots, weights=[1.0] * N_TASKS,
                  config=config, resume=resume)
        return served, bots

    full, bots = run("full")
    for step in (4, 6):
        resumed, resumed_bots = run(f"from_{step}", resume=str(tmp_path / "full" / f"checkpoint-{step}"))
        assert resumed == full[step:], step
        assert resumed_bots.pseudo_successes.tolist() == bots.pseudo_successes.tolist()
    (tmp_path / "full" / "checkpoint-6" / SAMPLER_STATE_FILE).unlink()  # as an earlier release saved it
    with pytest.raises(TrajvalInputError, match=f"checkpoint .*checkpoint-6 has no {SAMPLER_STATE_FILE}"):
        run("from_old", resume=str(tmp_path / "full" / "checkpoint-6"))


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
    stream = weighted_iterable_dataset(pool, seed=5, draws_per_epoch=4000)
    assert isinstance(stream, IterableDataset)
    rows = list(stream.take(4000))
    assert len(rows) == 4000 and rows[0].keys() == pool[0].keys()
    counts = np.bincount([row["task_id"] for row in rows], minlength=4)
    assert counts[0] == 0  # weight 0: never drawn
    expected = 4000 * np.array(weights[1:]) / sum(weights)
    assert chisquare(counts[1:], expected).pvalue > 1e-3
    again = [row["task_id"] for row in weighted_iterable_dataset(pool, seed=5, draws_per_epoch=4000).take(4000)]
    assert again == [row["task_id"] for row in rows]  # every process streams the same rows
    other = [row["task_id"] for row in weighted_iterable_dataset(pool, seed=6, draws_per_epoch=4000).take(4000)]
    assert other != again
    two = [row["task_id"] for row in weighted_iterable_dataset(pool, seed=5, draws_per_epoch=100).take(200)]
    assert len(two) == 200 and two[:100] != two[100:]  # each epoch its own draw


def test_weighted_iterable_refuses_a_finite_stream_a_trainer_would_replay():
    from trajval_ops.samplers.trl import weighted_iterable_dataset

    with pytest.raises(ValueError, match=r"epochs=1 is refused.*same rows.*max_steps"):
        weighted_iterable_dataset(_weighted_pool([1.0, 2.0]), epochs=1)


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


# ----------------------------------------------------------------------------- RLOO
def _rloo_trainer(tmp_path, weights, reward=None, **options):
    """TRL's real RLOOTrainer with the mixin, on the tiny random Llama (built, not trained)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import RLOOConfig

    from trajval_ops.models import resolve_model
    from trajval_ops.samplers.trl import TrajvalRLOOTrainer

    config = {"beta": 0.0, "max_steps": 4, **options.pop("config", {})}
    model_dir = resolve_model("tiny-random-llama")
    args = RLOOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, use_vllm=False, report_to="none",
                      num_generations=2, per_device_train_batch_size=8, max_completion_length=8,
                      gradient_checkpointing=False, logging_steps=1, save_strategy="no", seed=11, **config)
    return TrajvalRLOOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir),
                              reward_funcs=reward or (lambda completions, **kw: [0.0] * len(completions)),
                              args=args, train_dataset=_weighted_pool(weights),
                              processing_class=AutoTokenizer.from_pretrained(model_dir), **options)


def test_rloo_trainer_draws_its_prompts_by_the_weight_column(tmp_path):
    """RLOOTrainer._get_train_sampler has GRPO's shape: the mixin's sampler keeps RLOO's repeat
    structure, and the dataloader RLOO builds serves its weighted stream."""
    from scipy.stats import chisquare

    weights = np.array([0.0, 1.0, 3.0, 0.5] * 10)
    trainer = _rloo_trainer(tmp_path, weights)
    sampler = trainer._get_train_sampler()
    assert isinstance(sampler, WeightedRepeatSampler)
    args = trainer.args
    assert (sampler.mini_repeat_count, sampler.batch_size, sampler.repeat_count) == (
        args.num_generations, args.generation_batch_size // args.num_generations,
        trainer.num_iterations * args.steps_per_generation)
    served = [example["task_id"] for batch in trainer.get_train_dataloader() for example in batch]
    sampler.set_epoch(0)
    assert served == list(sampler)  # RLOO's dataloader runs the weighted stream, epoch 0
    assert all(served[i] == served[i + 1] for i in range(0, len(served), 2))  # groups of num_generations
    draws = []
    for epoch in range(60):
        sampler.set_epoch(epoch)
        draws += list(sampler)[::2]
    counts = np.bincount(np.asarray(draws) % 4, minlength=4)  # rows share a weight by position mod 4
    assert counts[0] == 0  # weight 0: never drawn
    assert chisquare(counts[1:], len(draws) * np.array([1.0, 3.0, 0.5]) / 4.5).pvalue > 1e-3


def test_rloo_dynamic_sampling_with_a_kl_shaped_reward_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"beta=0\.05.*set RLOOConfig\(beta=0\.0\)"):
        _rloo_trainer(tmp_path, [1.0] * 8, dynamic_sampling=True, config={"beta": 0.05})


@pytest.mark.slow
def test_rloo_run_feeds_the_online_scheduler_and_keeps_only_informative_groups(tmp_path):
    """A 4-step RLOO run (beta 0): even tasks always solved, odd ones half the time. GRESO gets
    every generation batch's rewards; DAPO's rule keeps the zero-variance groups out of the loss."""
    from trajval_ops.samplers.online import GresoScheduler
    from trajval_ops.samplers.trl import TrajvalRLOOTrainer

    seen, losses = [], []

    def even_solved(prompts, completions, task_id, **kwargs):
        seen.append(list(task_id))
        return [1.0 if t % 2 == 0 else float(i % 2) for i, t in enumerate(task_id)]

    original = TrajvalRLOOTrainer.compute_loss

    def spying(self, model, inputs, *args, **kwargs):
        losses.append(inputs["advantages"].detach().clone())
        return original(self, model, inputs, *args, **kwargs)

    greso = GresoScheduler(N_TASKS)
    TrajvalRLOOTrainer.compute_loss = spying
    try:
        trainer = _rloo_trainer(tmp_path, [1.0] * N_TASKS, reward=even_solved, online_scheduler=greso,
                                dynamic_sampling=True)
        trainer.train()
    finally:
        TrajvalRLOOTrainer.compute_loss = original
    assert trainer.trajval_source.online is greso
    drawn = {t for call in seen for t in call}
    assert all(greso.easy_streak[t] >= 1 for t in drawn if t % 2 == 0)  # fed: always-solved tasks are easy
    assert losses and all(bool((advantages != 0).all()) for advantages in losses)
    logged = [entry for entry in trainer.state.log_history if "dynamic_sampling/completions" in entry]
    assert len(logged) == 4 and sum(entry["dynamic_sampling/completions"] for entry in logged) > 4 * 8


@pytest.mark.parametrize("rounds, says", [(2.7, "must be an integer, got float 2.7"),  # was read as 2
                                          (float("nan"), "must be an integer, got float nan"),  # was int()'s error
                                          (0, "must be in [1, inf), got 0")])
def test_max_generation_rounds_must_be_a_whole_number_of_rounds(rounds, says):
    with pytest.raises(ValueError, match=re.escape(f"max_generation_rounds {says}")):
        TrajvalGRPOTrainer(model="unused", reward_funcs=[], max_generation_rounds=rounds)


# ----------------------------------------------------------------------------- async GRPO
def test_the_mixin_refuses_async_grpo_naming_the_resampled_pool_route():
    """trl 1.16's AsyncGRPOTrainer asks no sampler for prompts: the mixin refuses it, before any
    vLLM server is needed, with the route that works."""
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    from trl.experimental.async_grpo import AsyncGRPOTrainer

    from trajval_ops.samplers.trl import TrajvalSamplerMixin

    class WeightedAsyncGRPO(TrajvalSamplerMixin, AsyncGRPOTrainer):
        pass

    with pytest.raises(TypeError, match=r"reads the training set in order.*recipes/resample_pool\.yaml.*shuffle: true"):
        WeightedAsyncGRPO(model="unused", reward_funcs=[], train_dataset=_weighted_pool([1.0, 2.0]))


def test_async_grpo_worker_serves_a_resampled_pool_by_weight_and_resumes_in_it():
    """The resampled-pool route through TRL's real async rollout loop: it reads the resampled rows
    in order (each num_generations times), so the prompts follow the weights, and a resume at a
    row position continues in the same resample."""
    import itertools

    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    from datasets import Dataset
    from scipy.stats import chisquare
    from transformers import AutoTokenizer
    from trl.chat_template_utils import llama3_template
    from trl.experimental.async_grpo.async_rollout_worker import _AsyncRolloutLoop

    from trajval_ops.models import resolve_model
    from trajval_ops.ops.weighted_resampler import TrajvalWeightedResampler

    weights = [0.0, 1.0, 3.0, 0.5]
    pool = _weighted_pool(weights)
    resampler = TrajvalWeightedResampler(mode="multinomial", num_samples=2000, seed=0, shuffle=True)
    resampled = Dataset.from_list(resampler.resample_table(pool.data.table).to_pylist())
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny-random-llama"))
    tokenizer.response_template = llama3_template  # the tiny model's template is not one TRL knows

    def served(start, count):
        loop = _AsyncRolloutLoop(model_name="unused", dataset=resampled, reward_funcs=[lambda **kw: []],
                                 processing_class=tokenizer, eos_token_ids=[0], rollout_buffer=None,
                                 model_version_value=None, heartbeat_value=None, failed_event=None,
                                 exception_info_queue=None, metrics_queue=None, num_generations=2,
                                 dataset_start_index=start)
        try:
            return [row["task_id"] for _, row in itertools.islice(loop._repeat_iterator(), 2 * count)]
        finally:
            loop._loop.close()
            loop._tool_pool.shutdown()

    ids = served(0, len(resampled))
    assert ids[::2] == ids[1::2] == resampled["task_id"]  # in the resample's order, num_generations each
    counts = np.bincount(ids[::2], minlength=4)
    assert counts[0] == 0 and chisquare(counts[1:], 2000 * np.array(weights[1:]) / 4.5).pvalue > 1e-3
    assert served(700, 50)[::2] == resampled["task_id"][700:750]  # TRL's resume: a row position in the resample


def test_an_epoch_or_draw_count_that_is_not_a_whole_number_is_refused():
    """int() read 1.5 as 1: the epoch the trainer names, the iterable's draws and seed are checked."""
    from trajval_ops.samplers.trl import weighted_iterable_dataset

    with pytest.raises(ValueError, match="epoch must be an integer, got float 1.5"):
        _sampler([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).set_epoch(1.5)
    pool = _weighted_pool([1.0, 2.0])
    with pytest.raises(ValueError, match="draws_per_epoch must be an integer, got float 2.5"):
        weighted_iterable_dataset(pool, draws_per_epoch=2.5)
    with pytest.raises(ValueError, match="seed must be an integer, got float 5.5"):
        weighted_iterable_dataset(pool, seed=5.5)
