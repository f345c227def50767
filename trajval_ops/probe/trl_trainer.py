"""The probe's reliance on TRL's and transformers' trainer internals (read in trl 1.16.0 and
transformers 5.19.0): the prompt order of a resumed run, and the trainer state of a run whose
training is done.

TRL's ``GRPOTrainer._get_train_sampler`` builds a ``RepeatSampler`` whose ``torch.Generator`` is
seeded once (``args.seed``) and draws one ``randperm`` of the prompts each time the sampler is
iterated; transformers' ``Trainer._run_epoch`` iterates the training dataloader once per epoch
(``iter(train_dataloader)``), so epoch ``e`` of an uninterrupted run trains on the generator's
``e+1``-th permutation. A resumed run builds a fresh sampler and starts its loop at the epoch it
resumes in (``global_step // steps_per_epoch``; only the batches already trained in that epoch
are skipped), so without help its epochs would replay permutations 1, 2, ... The sampler of a
resumed run is therefore iterated once per epoch already trained before training goes on: it
draws the permutations those epochs drew, and the run trains on the uninterrupted run's order
(the order of an uninterrupted run is left as it is).
"""

from __future__ import annotations

import os

from transformers.trainer import TRAINER_STATE_NAME, TrainerState
from trl import GRPOTrainer


class ProbeGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` whose resumed training sees the uninterrupted run's prompt order."""

    #: Epochs the checkpoint resumed from has trained (0: a fresh run).
    epochs_trained = 0

    def train_from(self, checkpoint, epochs_trained: int):
        """``train`` from ``checkpoint`` (None: from the start), which has trained
        ``epochs_trained`` whole epochs (its global step // steps per epoch)."""
        self.epochs_trained = epochs_trained
        return self.train(resume_from_checkpoint=None if checkpoint is None else str(checkpoint))

    def take_state_from(self, checkpoint) -> None:
        """Train nothing: take up the trainer state (global step, log history) ``checkpoint``
        saved, as ``train`` does when it resumes."""
        self.state = TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME))

    def _get_train_sampler(self, dataset=None):
        sampler = super()._get_train_sampler(dataset)
        for _ in range(self.epochs_trained):
            next(iter(sampler), None)  # an epoch's iteration: the sampler draws its permutation on the first index
        return sampler
