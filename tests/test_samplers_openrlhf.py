"""OpenRLHF route against openrlhf 0.11.2's real PromptDataset and its collate_fn."""

from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("openrlhf.datasets", reason="needs openrlhf==0.11.2 --no-deps (see docs/howto/trainers.md)")

from datasets import Dataset  # noqa: E402
from openrlhf.datasets import PromptDataset  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from trajval_ops.samplers.openrlhf import prompt_sampler  # noqa: E402

N = 10
HEAVY = [0, 1]


def _strategy():
    # PromptDataset reads these attributes of OpenRLHF's strategy (no base class involved).
    data = SimpleNamespace(input_key="input", label_key="label", apply_chat_template=False, image_key="images")
    return SimpleNamespace(args=SimpleNamespace(data=data), is_rank_0=lambda: True)


def test_weighted_sampler_feeds_the_real_prompt_dataset():
    raw = Dataset.from_dict({
        "input": [f"What is {i} + {i}?" for i in range(N)], "label": [str(2 * i) for i in range(N)],
        "datasource": ["toy"] * N, "trajval_weight": [1.0 if i in HEAVY else 0.05 for i in range(N)],
    })
    prompts = PromptDataset(raw, tokenizer=None, strategy=_strategy())
    assert len(prompts) == N  # one item per raw row, same order: positions line up
    sampler = prompt_sampler(raw, seed=42, num_samples=2000)
    labels = []
    for batch in DataLoader(prompts, batch_size=16, sampler=sampler, collate_fn=prompts.collate_fn):
        labels += list(batch[2])
    share = np.isin(labels, [str(2 * i) for i in HEAVY]).mean()
    assert len(labels) == 2000 and share == pytest.approx(2 / 2.4, abs=0.04)


def test_ranks_split_one_stream():
    raw = Dataset.from_dict({"trajval_weight": list(np.linspace(0.05, 1, N))})
    r0 = list(prompt_sampler(raw, seed=1, num_replicas=2, rank=0))
    r1 = list(prompt_sampler(raw, seed=1, num_replicas=2, rank=1))
    whole = list(prompt_sampler(raw, seed=1))
    assert [x for pair in zip(r0, r1) for x in pair] == whole
