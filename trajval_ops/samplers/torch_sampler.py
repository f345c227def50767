"""PyTorch adapter: a ``torch.utils.data.Sampler`` over a weight column, resumable mid-epoch.

Works with ``torch.utils.data.DataLoader`` and torchdata's ``StatefulDataLoader`` (which saves
and restores :meth:`TrajvalSampler.state_dict` with the loader state).
"""

from __future__ import annotations

import warnings
from collections import deque
from typing import Any, Iterator, Mapping

from torch.utils.data import Sampler

from trajval_ops.fields import PROVENANCE_RECORD, PROVENANCE_REF, RESAMPLE_PROVENANCE, WEIGHT
from trajval_ops.samplers.online import ComposedSampler
from trajval_ops.settings import value_problem, whole_number

DEFAULT_CHUNK_SIZE = 64

RESUMED_AT_EPOCH_END = (
    "TrajvalSampler: resumed from a state saved after epoch {epoch}'s iteration ended, with no set_epoch: "
    "it goes on with epoch {epoch} + 1, right for a state saved after the inner loop; one saved in the step "
    "of the epoch's last, partial batch cannot be told from it, and its loop then serves an epoch more. "
    "Call sampler.set_epoch(epoch) at the top of each epoch, as with DistributedSampler (docs/howto/trainers.md).")
SAVED_BEFORE_FEEDBACK = (
    "TrajvalSampler: feedback() came for indices this sampler handed out before its last state_dict() "
    "call, so that saved state does not hold this feedback and a run resumed from it restarts the online "
    "scheduler from there (the draws after it differ from the uninterrupted run's). A DataLoader with "
    "num_workers > 0 does this: it takes indices ahead of the batches trained on, and torchdata's "
    "StatefulDataLoader saves the sampler's state when it hands them to a worker. With an online source "
    "use num_workers=0 and save the loader state after feedback() (see docs/howto/trainers.md, PyTorch)."
)


class TrajvalSampler(Sampler[int]):
    """Indices drawn with replacement in proportion to ``trajval_weight`` (times ``w_online``).

    Indices are drawn lazily, ``chunk_size`` at a time, so feedback given to an online scheduler
    between batches shapes the following draws. Every rank draws the same global stream (seed
    and epoch only); global position ``i`` goes to rank ``i % num_replicas``.

    :param weights: one weight per dataset row (ignored when ``source`` is given).
    :param source: a :class:`~trajval_ops.samplers.online.ComposedSampler` (prior times online
        weight) to draw from instead of plain weights.
    :param num_samples: indices per epoch over all ranks (default: the pool size).
    :param seed: stream seed, the same on every rank (default 0). With ``source`` the stream is
        the source's own: leave it unset, or give the source's seed.
    :param chunk_size: indices drawn per call to the core sampler (e.g. the batch size).
    :param num_replicas: number of ranks sharing the stream.
    :param rank: this process's rank.
    """

    def __init__(
        self,
        weights=None,
        *,
        source: ComposedSampler | None = None,
        num_samples: int | None = None,
        seed: int | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        if (weights is None) == (source is None):
            raise ValueError("give exactly one of weights or source")
        for name, value, lowest in (("num_samples", num_samples, 1), ("seed", seed, 0), ("chunk_size", chunk_size, 1),
                                    ("num_replicas", num_replicas, 1), ("rank", rank, 0)):
            problem = None if value is None else value_problem(value, int, {"ge": lowest})
            if problem:  # int() read 2.7 as 2
                raise ValueError(f"TrajvalSampler: {name} {problem}")
        if source is not None and seed is not None and int(seed) != source.sampler.seed:
            raise ValueError(f"TrajvalSampler: seed={seed} but the source draws with its own seed "
                             f"{source.sampler.seed}; set the seed on the source (ComposedSampler(weights, "
                             f"seed={seed}, ...)) and leave TrajvalSampler's seed unset")
        self.source = source if source is not None else ComposedSampler(weights, seed=0 if seed is None else seed)
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} outside [0, {num_replicas})")
        total = self.source.num_tasks if num_samples is None else int(num_samples)
        self.num_replicas, self.rank, self.chunk_size = int(num_replicas), int(rank), int(chunk_size)
        self.total_size = (total // self.num_replicas) * self.num_replicas
        if self.total_size == 0:
            raise ValueError(f"num_samples={total} gives no index for {num_replicas} replicas")
        self.epoch = 0
        self._yielded = 0  # global positions consumed in this epoch
        self._pending: deque[int] = deque()
        self._resuming = False
        self._named_epoch: int | None = None  # the epoch the last set_epoch named
        self._completed = False  # the current iteration ran to its end
        self._unstarted = False  # the last iterator made has not been read yet
        self._handed = 0  # indices this rank handed out since the last feedback
        self._saved_ahead = False  # a state_dict() taken while some of them awaited feedback

    @classmethod
    def from_dataset(cls, dataset, field: str = WEIGHT, **options) -> "TrajvalSampler":
        """A sampler over the weights in ``dataset``'s ``field``, read by
        :func:`~trajval_ops.samplers.weighted.weights_from_dataset`: each weight checked (the row
        named), and a pool the weighted resampler already drew by that weight refused (a bare list
        of weights carries no such record). ``dataset``: a map-style dataset, a dict of columns or
        a list of row dicts; ``options``: :meth:`__init__`'s."""
        from trajval_ops.samplers.weighted import weights_from_dataset

        if isinstance(dataset, list):  # rows: the columns read
            keys = (field, RESAMPLE_PROVENANCE, PROVENANCE_REF, PROVENANCE_RECORD)
            dataset = {key: [row.get(key) for row in dataset] for key in keys}
        return cls(weights_from_dataset(dataset, field), **options)

    def __len__(self) -> int:
        return self.total_size // self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next iteration (as with ``DistributedSampler``). The epoch a
        :meth:`load_state_dict` stopped in keeps its resume point (a training loop calls
        ``set_epoch`` at the top of every epoch, the resumed one included)."""
        epoch = whole_number(epoch, "epoch")
        self._named_epoch = epoch
        self._unstarted = False
        if self._resuming and epoch == self.epoch:
            return
        self.epoch = epoch
        self._resuming = False
        self._yielded = 0
        self._pending.clear()

    def __iter__(self) -> Iterator[int]:
        # Decided when the iterator is made, as DistributedSampler does: a resumed state continues
        # where it stopped. One saved with every index handed over has nothing left where the loop
        # names that epoch (set_epoch, before or after the state was loaded: it resumes in it) or
        # where the iteration had not ended (saved in the last batch's step); a state saved after
        # its iteration ended, with no set_epoch naming it, gives way to the next epoch, as a
        # finished epoch with no set_epoch since does (a loop that never calls set_epoch, resumed
        # from a state saved after its inner loop).
        if self._unstarted:
            # the last iterator was made and dropped unread (torchdata's StatefulDataLoader does so
            # when it restores a state) and no set_epoch came since: this one serves what it would
            return self._stream()
        finished = self._yielded >= self.total_size
        resuming, self._resuming = self._resuming, False
        if resuming and self._named_epoch is not None and self._named_epoch > self.epoch:
            # a set_epoch before the state was loaded (torchdata restores it lazily, after the
            # loop's set_epoch) naming a later epoch: the loop has moved on to it, as a set_epoch
            # after the load does (an earlier one was named before a load that moved past it)
            self._start_epoch(self._named_epoch)
        elif resuming and (not finished or self._named_epoch == self.epoch or not self._completed):
            pass  # the saved epoch continues where it stopped
        else:
            if resuming and self._named_epoch is None:
                warnings.warn(RESUMED_AT_EPOCH_END.format(epoch=self.epoch), RuntimeWarning, stacklevel=2)
            self._start_epoch(self.epoch + 1 if finished else self.epoch)
        self._completed = False
        return self._stream()

    def _start_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.source.set_epoch(epoch)
        self._yielded = 0
        self._pending.clear()
        # indices handed out in the epoch before that got no feedback by its end never will (a
        # DataLoader with drop_last drops its leftovers): a state saved after them misses nothing
        self._handed, self._saved_ahead = 0, False

    def _stream(self) -> Iterator[int]:
        self._unstarted = True
        return self._indices()

    def _indices(self) -> Iterator[int]:
        # The epoch stays the current one when its last index is handed over: a DataLoader serves
        # the last, partial batch after this generator ended, and a checkpoint taken after that
        # batch must still say "epoch e, all of it served" (yielded == total), not "epoch e + 1".
        self._unstarted = False
        while self._yielded < self.total_size:
            if not self._pending:
                count = min(self.chunk_size, self.total_size - self._yielded)
                self._pending.extend(self.source.draw(count).tolist())
            index = self._pending.popleft()
            position = self._yielded
            self._yielded += 1
            if position % self.num_replicas == self.rank:
                self._handed += 1
                yield index
        self._completed = True  # the iteration ended (a DataLoader may still serve a partial batch)

    def feedback(self, task_ids, rewards, group_size: int | None = None, group_ids=None):
        """Forward one step's rollout feedback to the online scheduler (returns the DAPO mask);
        ``group_size`` / ``group_ids`` as in :meth:`ComposedSampler.feedback`.

        Warns when a :meth:`state_dict` was taken after indices were handed out and before
        this feedback on them: the saved state misses it (a DataLoader with ``num_workers > 0``)."""
        if self._saved_ahead and self.source.online is not None:
            warnings.warn(SAVED_BEFORE_FEEDBACK, RuntimeWarning, stacklevel=2)
        self._saved_ahead, self._handed = False, 0
        return self.source.feedback(task_ids, rewards, group_size=group_size, group_ids=group_ids)

    def state_dict(self) -> dict:
        self._saved_ahead = self._saved_ahead or self._handed > 0
        return {
            "epoch": self.epoch,
            "yielded": self._yielded,
            "pending": list(self._pending),
            "completed": self._completed,
            "source": self.source.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume: the next iteration continues the saved epoch where it stopped. A state saved
        once the epoch's last index was handed over (after the inner loop, or in the body of its
        last, partial batch) resumes with nothing left in that epoch where the loop names it with
        ``set_epoch(e)`` (before or after this call); ``set_epoch(e + 1)``, or an iteration with no
        ``set_epoch`` named it, starts the next epoch's own stream."""
        self.source.load_state_dict(state["source"])
        self.epoch = int(state["epoch"])
        self._yielded = int(state["yielded"])
        self._pending = deque(int(i) for i in state["pending"])
        self._completed = bool(state.get("completed", False))  # states saved before 2026-11-28 hold none
        # Saved before the epoch's first draw, the source still stands at the end of the previous
        # epoch's stream: the next iteration must start epoch (seed, epoch) afresh, not continue it.
        self._resuming = self._yielded > 0 or bool(self._pending)
        self._handed, self._saved_ahead, self._unstarted = 0, False, False
