"""PyTorch adapter against torch's DataLoader and torchdata's StatefulDataLoader."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Sampler  # noqa: E402

from trajval_ops.samplers import BotsScheduler, ComposedSampler  # noqa: E402
from trajval_ops.samplers.torch_sampler import TrajvalSampler  # noqa: E402


def test_dataloader_draws_by_weight():
    weights = np.array([1.0] * 2 + [0.05] * 8)
    sampler = TrajvalSampler(weights, num_samples=4000, seed=0)
    assert isinstance(sampler, Sampler) and len(sampler) == 4000
    drawn = torch.cat(list(DataLoader(list(range(10)), batch_size=50, sampler=sampler))).numpy()
    share = np.isin(drawn, [0, 1]).mean()
    assert share == pytest.approx(2 / 2.4, abs=0.03)


def test_epochs_differ_and_replicas_partition_the_same_stream():
    w = np.arange(1, 101, dtype=float)
    whole = TrajvalSampler(w, seed=3, chunk_size=7)
    parts = [TrajvalSampler(w, seed=3, chunk_size=7, num_replicas=3, rank=r) for r in range(3)]
    epoch0 = list(whole)
    assert list(whole) != epoch0
    shards = [list(p) for p in parts]
    assert all(len(s) == len(parts[0]) == 33 for s in shards)
    assert [shards[i % 3][i // 3] for i in range(99)] == epoch0[:99]


def test_stateful_dataloader_resumes_mid_epoch():
    stateful = pytest.importorskip(
        "torchdata.stateful_dataloader",
        reason="needs torchdata (installed with TRAJVAL_WITH_TRAINERS=1; see docs/downstream.md)")
    StatefulDataLoader = stateful.StatefulDataLoader

    w = np.random.default_rng(0).random(60) + 0.05

    def loader():
        return StatefulDataLoader(list(range(60)), batch_size=8, sampler=TrajvalSampler(w, seed=9, chunk_size=8))

    full = loader()
    batches = []
    it = iter(full)
    for _ in range(3):
        batches.append(next(it).tolist())
    state = full.state_dict()
    rest = [b.tolist() for b in it]
    resumed = loader()
    resumed.load_state_dict(state)
    assert [b.tolist() for b in resumed] == rest


def test_online_feedback_between_batches_shapes_later_draws():
    n = 20
    source = ComposedSampler(np.ones(n), online=BotsScheduler(n), seed=1)
    sampler = TrajvalSampler(source=source, num_samples=16 * 60, chunk_size=16)
    counts = np.zeros(n)
    for batch in DataLoader(list(range(n)), batch_size=16, sampler=sampler):
        ids = np.repeat(batch.numpy(), 8)
        rewards = (ids >= 10).astype(float) * (np.arange(ids.size) % 2)  # tasks >= 10 pass half the time
        sampler.feedback(ids, rewards)
        counts += np.bincount(batch.numpy(), minlength=n)
    assert counts[10:].sum() > 1.5 * counts[:10].sum()


def test_a_state_saved_between_epochs_resumes_on_the_next_epochs_own_stream():
    w = np.arange(1, 11, dtype=float)
    uninterrupted = TrajvalSampler(w, seed=7, chunk_size=4)
    list(uninterrupted)
    second_epoch = list(uninterrupted)
    stopped = TrajvalSampler(w, seed=7, chunk_size=4)
    list(stopped)  # the checkpoint is taken after epoch 0 ended
    resumed = TrajvalSampler(w, seed=7, chunk_size=4)
    resumed.load_state_dict(stopped.state_dict())
    assert list(resumed) == second_epoch


def test_set_epoch_after_a_resume_keeps_the_resume_point():
    w = np.arange(1, 13, dtype=float)
    sampler = TrajvalSampler(w, seed=0, chunk_size=4)
    sampler.set_epoch(0)
    it = iter(DataLoader(list(range(12)), batch_size=4, sampler=sampler))
    next(it), next(it)
    state = sampler.state_dict()  # stopped after 2 of the epoch's 3 batches
    rest = [batch.tolist() for batch in it]
    resumed = TrajvalSampler(w, seed=0, chunk_size=4)
    resumed.load_state_dict(state)
    resumed.set_epoch(0)  # what a training loop does at the top of every epoch
    assert [b.tolist() for b in DataLoader(list(range(12)), batch_size=4, sampler=resumed)] == rest
    resumed.set_epoch(0)  # a second pass over epoch 0 replays it whole
    assert len(list(resumed)) == 12


def test_a_seed_that_the_source_does_not_use_is_refused():
    source = ComposedSampler(np.ones(50), seed=4)
    with pytest.raises(ValueError, match=r"seed=5 but the source draws with its own seed 4.*ComposedSampler"):
        TrajvalSampler(source=source, seed=5)
    assert list(TrajvalSampler(source=ComposedSampler(np.ones(50), seed=4), seed=4)) == list(TrajvalSampler(source=source))


def test_from_dataset_checks_the_rows_a_bare_list_cannot_show():
    """``TrajvalSampler.from_dataset`` reads the weights with the adapters' checks: the row of a bad
    weight named, and a pool the resampler already drew by its weight refused (a bare list of
    weights, as docs/downstream.md showed before, carries no record of the draw)."""
    import pytest

    from trajval_ops.errors import TrajvalInputError

    rows = [{"id": f"t{i}", "trajval_weight": w} for i, w in enumerate([1.0, 0.25, 0.5])]
    sampler = TrajvalSampler.from_dataset(rows, seed=3, chunk_size=2)
    assert list(sampler) == list(TrajvalSampler([1.0, 0.25, 0.5], seed=3, chunk_size=2))
    drawn = [row | {"trajval_resample_provenance": {"mode": "systematic", "weight_key": "trajval_weight"}}
             for row in rows]
    with pytest.raises(TrajvalInputError, match="this pool was drawn by that weight already"):
        TrajvalSampler.from_dataset(drawn)
    with pytest.raises(TrajvalInputError, match="row 1"):
        TrajvalSampler.from_dataset([rows[0], {"id": "t1"}])
