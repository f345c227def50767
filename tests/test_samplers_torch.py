"""PyTorch adapter against torch's DataLoader and torchdata's StatefulDataLoader."""

import re

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
        reason="needs torchdata (installed with TRAJVAL_WITH_TRAINERS=1; see docs/howto/trainers.md)")
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


def test_a_state_saved_after_an_epoch_ended_resumes_on_the_next_epoch_unless_the_loop_names_it():
    """A state saved once epoch 0 was handed over whole: the loop that names epoch 0 again
    (``set_epoch(0)``, resuming in it) finds nothing left there; ``set_epoch(1)``, or an iteration
    with no ``set_epoch`` (a loop that never calls it, saved after its inner loop), starts epoch 1
    on its own stream. Before, that iteration gave an empty epoch and every later one shifted."""
    w = np.arange(1, 11, dtype=float)
    uninterrupted = TrajvalSampler(w, seed=7, chunk_size=4)
    list(uninterrupted)
    second_epoch = list(uninterrupted)
    stopped = TrajvalSampler(w, seed=7, chunk_size=4)
    list(stopped)  # the checkpoint is taken after epoch 0 ended
    state = stopped.state_dict()
    assert (state["epoch"], state["yielded"], state["completed"]) == (0, 10, True)
    resumed = TrajvalSampler(w, seed=7, chunk_size=4)
    resumed.load_state_dict(state)
    resumed.set_epoch(1)
    assert list(resumed) == second_epoch
    resumed = TrajvalSampler(w, seed=7, chunk_size=4)
    resumed.load_state_dict(state)
    with pytest.warns(RuntimeWarning, match="resumed from a state saved after epoch 0's iteration ended, with no "
                                            "set_epoch: it goes on with epoch 0 \\+ 1"):
        assert list(resumed) == second_epoch
    named = TrajvalSampler(w, seed=7, chunk_size=4)
    named.set_epoch(0)  # before the state is loaded, as torchdata's lazy restore does it
    named.load_state_dict(state)
    assert list(named) == []
    named.set_epoch(1)
    assert list(named) == second_epoch
    # a state written by an earlier release at an epoch's end ("epoch 1, nothing yielded")
    old = TrajvalSampler(w, seed=7, chunk_size=4)
    old.load_state_dict(dict(state, epoch=1, yielded=0))
    assert list(old) == second_epoch


@pytest.mark.parametrize("batch_size", [2, 4])
def test_a_loop_without_set_epoch_resumes_after_its_inner_loop_or_in_its_last_full_batch(batch_size):
    """A DataLoader loop that never calls set_epoch: a state saved after an epoch's inner loop
    resumes on the next epoch, and one saved in the step of the epoch's last full batch (every
    index handed over, the iteration not ended) resumes with nothing left in that epoch."""
    from torch.utils.data import DataLoader

    w = np.linspace(0.1, 1, 10)

    def loader(sampler):
        return DataLoader(list(range(10)), batch_size=batch_size, sampler=sampler, collate_fn=list)

    sampler = TrajvalSampler(w, seed=3)
    uninterrupted = [[tuple(b) for b in loader(sampler)] for _ in range(3)]
    sampler = TrajvalSampler(w, seed=3)
    first = [tuple(b) for b in loader(sampler)]
    resumed = TrajvalSampler(w, seed=3)
    resumed.load_state_dict(sampler.state_dict())  # saved after epoch 0's inner loop
    with pytest.warns(RuntimeWarning, match="Call sampler.set_epoch"):  # the one case it cannot tell apart
        assert [first] + [[tuple(b) for b in loader(resumed)] for _ in range(2)] == uninterrupted
    if 10 % batch_size == 0:  # saved in the last batch's step: the iteration had not ended
        sampler = TrajvalSampler(w, seed=3)
        for batch in loader(sampler):
            state = sampler.state_dict()
        resumed = TrajvalSampler(w, seed=3)
        resumed.load_state_dict(state)
        rest = [[tuple(b) for b in loader(resumed)] for _ in range(3)]
        assert rest == [[]] + uninterrupted[1:]


def test_uninterrupted_epochs_draw_what_they_drew_before():
    """Pinned against the sampler before the epoch was left unadvanced at an epoch's end: the same
    seeds, the same order, with and without set_epoch, on one rank and on two."""
    w = np.arange(1, 11, dtype=float)
    sampler = TrajvalSampler(w, seed=5, chunk_size=4)
    assert [list(sampler) for _ in range(3)] == [
        [8, 8, 7, 5, 1, 6, 6, 1, 1, 9], [8, 6, 8, 8, 7, 7, 4, 2, 6, 9], [4, 6, 7, 8, 1, 6, 4, 2, 4, 2]]
    shard = TrajvalSampler(w, seed=5, chunk_size=3, num_replicas=2, rank=1)
    assert [list(shard) for _ in range(3)] == [[8, 5, 6, 1, 9], [6, 8, 7, 2, 9], [6, 8, 6, 2, 2]]
    sampler = TrajvalSampler(w, seed=5, chunk_size=4)
    loader = DataLoader(list(range(10)), batch_size=4, sampler=sampler, collate_fn=list)
    served = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        served.append(list(loader))
    assert served == [[[8, 8, 7, 5], [1, 6, 6, 1], [1, 9]], [[8, 6, 8, 8], [7, 7, 4, 2], [6, 9]],
                      [[4, 6, 7, 8], [1, 6, 4, 2], [4, 2]]]


def _docs_loop(make_loader, sampler, start_epoch=0, epochs=3, save_at=None):
    """docs/howto/trainers.md's PyTorch loop; returns the batches served and, after batch ``save_at``,
    ``(state, epoch)``, the state from ``make_loader``'s second item."""
    loader, save = make_loader(sampler)
    served, saved = [], None
    for epoch in range(start_epoch, epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            served.append(list(batch))
            if len(served) == save_at:
                saved = (save(), epoch)
    return served, saved


def test_a_checkpoint_after_an_epochs_last_partial_batch_resumes_in_that_epoch():
    """30 rows, batches of 4: the DataLoader serves epoch 0's last batch (2 rows) after the
    sampler's iterator ended. A checkpoint after it resumed, in epoch 0 with set_epoch(0), by
    replaying epoch 0 whole (it said "epoch 1, nothing yielded"); now it serves what remains."""
    import json

    rows = [{"trajval_weight": 1.0, "i": i} for i in range(30)]

    def make_loader(sampler):
        loader = DataLoader(rows, batch_size=4, sampler=sampler, collate_fn=lambda b: [r["i"] for r in b])
        return loader, lambda: json.dumps(sampler.state_dict())

    full, _ = _docs_loop(make_loader, TrajvalSampler.from_dataset(rows, seed=0))
    for save_at in (5, 8, 9, 16):
        _, (state, epoch) = _docs_loop(make_loader, TrajvalSampler.from_dataset(rows, seed=0), save_at=save_at)
        resumed = TrajvalSampler.from_dataset(rows, seed=0)
        resumed.load_state_dict(json.loads(state))
        assert _docs_loop(make_loader, resumed, start_epoch=epoch)[0] == full[save_at:], save_at


def test_stateful_dataloader_checkpoint_after_an_epochs_last_partial_batch():
    """torchdata's StatefulDataLoader saves the sampler's state with its own: a checkpoint after
    epoch 0's last, partial batch served epoch 1's draws inside epoch 0 and again in epoch 1."""
    stateful = pytest.importorskip(
        "torchdata.stateful_dataloader",
        reason="needs torchdata (installed with TRAJVAL_WITH_TRAINERS=1; see docs/howto/trainers.md)")

    def make_loader(sampler):
        loader = stateful.StatefulDataLoader(list(range(30)), batch_size=4, sampler=sampler, collate_fn=list)
        return loader, loader.state_dict

    full, _ = _docs_loop(make_loader, TrajvalSampler(np.ones(30), seed=0))
    for save_at in (3, 8, 9):
        _, (state, epoch) = _docs_loop(make_loader, TrajvalSampler(np.ones(30), seed=0), save_at=save_at)
        sampler = TrajvalSampler(np.ones(30), seed=0)

        def restored(sampler, state=state):
            loader, save = make_loader(sampler)
            loader.load_state_dict(state)
            return loader, save

        assert _docs_loop(restored, sampler, start_epoch=epoch)[0] == full[save_at:], save_at


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


@pytest.mark.parametrize("options, says", [
    ({"chunk_size": 2.7}, "TrajvalSampler: chunk_size must be an integer, got float 2.7"),  # was read as 2
    ({"num_samples": float("inf")}, "TrajvalSampler: num_samples must be an integer, got float inf"),
    ({"seed": float("nan")}, "TrajvalSampler: seed must be an integer, got float nan"),
    ({"num_replicas": 0}, "TrajvalSampler: num_replicas must be in [1, inf), got 0"),
])
def test_a_count_that_is_no_whole_number_is_refused_naming_it(options, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        TrajvalSampler(np.ones(8), **options)
    with pytest.raises(ValueError, match=re.escape("seed must be an integer, got float 2.7")):
        ComposedSampler(np.ones(8), seed=2.7)
    assert TrajvalSampler(np.ones(8), chunk_size=np.int64(4), num_replicas=np.int64(2)).chunk_size == 4


def test_from_dataset_checks_the_rows_a_bare_list_cannot_show():
    """``TrajvalSampler.from_dataset`` reads the weights with the adapters' checks: the row of a bad
    weight named, and a pool the resampler already drew by its weight refused (a bare list of
    weights, as docs/howto/trainers.md showed before, carries no record of the draw)."""
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


def test_feedback_on_indices_a_saved_state_already_covered_warns():
    """A state saved after indices were handed out and before the feedback on them misses that
    feedback (a resume restarts the online scheduler from the saved one): what a DataLoader with
    num_workers > 0 does. Saved after feedback, or with no online scheduler, nothing is lost."""
    import warnings

    from trajval_ops.samplers import GresoScheduler

    def online_sampler():
        return TrajvalSampler(source=ComposedSampler(np.ones(16), online=GresoScheduler(16), seed=0), chunk_size=4)

    sampler = online_sampler()
    it = iter(sampler)
    batch = [next(it) for _ in range(4)]
    sampler.state_dict()  # the loader's snapshot, taken when it handed the batch to a worker
    with pytest.warns(RuntimeWarning, match=r"num_workers > 0.*num_workers=0 and save the loader state after feedback"):
        sampler.feedback(np.repeat(batch, 2), np.ones(8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for sampler in (online_sampler(), TrajvalSampler(np.ones(16), chunk_size=4)):
            it = iter(sampler)
            for _ in range(3):
                batch = [next(it) for _ in range(4)]
                sampler.feedback(np.repeat(batch, 2), np.ones(8))
                sampler.state_dict()  # saved after the feedback: it holds it
        plain = TrajvalSampler(np.ones(16), chunk_size=4)
        it = iter(plain)
        batch = [next(it) for _ in range(4)]
        plain.state_dict()
        plain.feedback(np.repeat(batch, 2), np.ones(8))  # prior only: no scheduler to miss
        # drop_last drops an epoch's leftovers, which get no feedback: a state saved after the epoch
        # misses none, and the next epoch's feedback warned that it did
        sampler = online_sampler()
        loader = DataLoader(list(range(16)), batch_size=3, sampler=sampler, drop_last=True, collate_fn=list)
        for epoch in range(2):
            sampler.set_epoch(epoch)
            for batch in loader:
                sampler.feedback(np.repeat(batch, 2), np.ones(2 * len(batch)))
            sampler.state_dict()


def test_stateful_dataloader_with_workers_warns_that_online_feedback_misses_its_checkpoints():
    """torchdata saves the sampler's state when it hands indices to a worker (ahead of the batch
    trained on), so the feedback given since is not in a checkpoint: the feedback warns."""
    stateful = pytest.importorskip(
        "torchdata.stateful_dataloader",
        reason="needs torchdata (installed with TRAJVAL_WITH_TRAINERS=1; see docs/howto/trainers.md)")
    from trajval_ops.samplers import GresoScheduler

    def run(num_workers):
        sampler = TrajvalSampler(source=ComposedSampler(np.ones(16), online=GresoScheduler(16), seed=0), chunk_size=4)
        loader = stateful.StatefulDataLoader(list(range(16)), batch_size=4, sampler=sampler,
                                             num_workers=num_workers, collate_fn=list)
        it = iter(loader)
        for _ in range(2):
            batch = next(it)
            sampler.feedback(np.repeat(batch, 4), np.ones(16))
        return sampler, loader.state_dict()

    with pytest.warns(RuntimeWarning, match="num_workers > 0"):
        run(num_workers=1)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        sampler, state = run(num_workers=0)
    resumed = TrajvalSampler(source=ComposedSampler(np.ones(16), online=GresoScheduler(16), seed=0), chunk_size=4)
    loader = stateful.StatefulDataLoader(list(range(16)), batch_size=4, sampler=resumed, collate_fn=list)
    loader.load_state_dict(state)
    next(iter(loader))
    assert (resumed.source.online.easy_streak > 0).sum() == (sampler.source.online.easy_streak > 0).sum() > 0


@pytest.mark.parametrize("size, batch_size, drop_last", [(8, 4, False), (10, 4, True), (10, 4, False)])
def test_stateful_dataloader_resumes_an_epochs_end_where_the_loop_names(size, batch_size, drop_last):
    """torchdata restores the sampler's state lazily, after the loop's set_epoch, and calls iter()
    twice on a finished iterator, dropping the first. A checkpoint in an epoch's last full batch
    resumed at the next epoch served nothing in it (that epoch's draws lost); one after the inner
    loop resumed in its own epoch served the next epoch there and again in the next."""
    stateful = pytest.importorskip(
        "torchdata.stateful_dataloader",
        reason="needs torchdata (installed with TRAJVAL_WITH_TRAINERS=1; see docs/howto/trainers.md)")

    def loop(state=None, start=0, save_at=None, save_after=None):
        sampler = TrajvalSampler(np.linspace(0.1, 1.0, size), seed=1)
        loader = stateful.StatefulDataLoader(list(range(size)), batch_size=batch_size, sampler=sampler,
                                             drop_last=drop_last, collate_fn=list)
        if state is not None:
            loader.load_state_dict(state)
        served, saved = [], None
        for epoch in range(start, 3):
            sampler.set_epoch(epoch)
            for batch in loader:
                served.append((epoch, batch))
                if len(served) == save_at:
                    saved = loader.state_dict()
            if epoch == save_after:
                saved = loader.state_dict()
        return served, saved

    full, _ = loop()
    for epoch in range(2):
        last = max(k for k, (e, _) in enumerate(full, 1) if e == epoch)
        rest = [batch for e, batch in full if e > epoch]
        in_step, after = loop(save_at=last)[1], loop(save_after=epoch)[1]
        assert [b for _, b in loop(in_step, start=epoch)[0]] == [b for _, b in full[last:]]
        assert [b for _, b in loop(in_step, start=epoch + 1)[0]] == rest
        assert [b for _, b in loop(after, start=epoch)[0]] == rest
        assert [b for _, b in loop(after, start=epoch + 1)[0]] == rest


def test_an_earlier_epoch_named_before_a_load_does_not_discard_the_loaded_state():
    """A set_epoch before the load names the epoch the loop moved on to only when it is later
    than the saved one: one named during set-up (epoch 0) threw away a mid-epoch state of epoch 1."""
    def sampler():
        return TrajvalSampler(np.linspace(0.1, 1.0, 8), seed=3)

    running = sampler()
    running.set_epoch(1)
    it = iter(running)
    head = [next(it) for _ in range(3)]
    state, rest = running.state_dict(), list(it)
    resumed = sampler()
    resumed.set_epoch(0)
    resumed.load_state_dict(state)
    assert head and list(resumed) == rest
