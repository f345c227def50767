"""Extracting a short ground truth from a worked answer (GSM8K ``#### 42``, MATH ``\\boxed{}``)."""

from __future__ import annotations

import json
from typing import Any

#: How a ground-truth value is turned into the canonical string.
ANSWER_EXTRACTORS = ("none", "gsm8k", "boxed", "auto")

GSM8K_MARKER = "####"
BOXED_MARKER = "\\boxed{"


def canonical_ground_truth(value: Any) -> str:
    """The ground truth as a string: strings unchanged, anything else (numbers, lists, GURU's
    zebra grids) as compact JSON with sorted keys, so one column never mixes types."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def extract_answer(text: str, how: str) -> str:
    """Apply an extractor to a ground-truth string.

    ``none`` keeps it; ``gsm8k`` takes what follows the last ``####`` (thousands commas removed);
    ``boxed`` takes the content of the last ``\\boxed{...}``; ``auto`` uses gsm8k when ``####`` is
    present, boxed when ``\\boxed{`` is, else keeps the text.

    :raises ValueError: when the requested marker is absent or empty.
    """
    if how == "none":
        return text
    if how == "auto":
        if GSM8K_MARKER in text:
            how = "gsm8k"
        elif BOXED_MARKER in text:
            how = "boxed"
        else:
            return text
    if how == "gsm8k":
        if GSM8K_MARKER not in text:
            raise ValueError(f"no '{GSM8K_MARKER}' final-answer marker")
        answer = text.rsplit(GSM8K_MARKER, 1)[1].strip().replace(",", "")
    elif how == "boxed":
        answer = last_boxed(text)
    else:
        raise ValueError(f"unknown answer extractor {how!r}; choose one of {ANSWER_EXTRACTORS}")
    if not answer:
        raise ValueError(f"empty answer after the {how} marker")
    return answer


def last_boxed(text: str) -> str:
    """Content of the last ``\\boxed{...}``, with nested braces matched."""
    start = text.rfind(BOXED_MARKER)
    if start < 0:
        raise ValueError("no \\boxed{...} answer")
    depth = 0
    begin = start + len(BOXED_MARKER)
    for i in range(begin, len(text)):
        char = text[i]
        if char == "{":
            depth += 1
        elif char == "}":
            if depth == 0:
                return text[begin:i].strip()
            depth -= 1
    raise ValueError("unbalanced braces in \\boxed{...}")
