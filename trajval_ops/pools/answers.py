"""Extracting a short ground truth from a worked answer (GSM8K ``#### 42``, MATH ``\\boxed{}``), and
the last ``\\boxed{}`` answer of a text, which the math verifier reads from a completion too."""

from __future__ import annotations

import re
from typing import Any

from trajval_ops.canonical import canonical_json

#: How a ground-truth value is turned into the canonical string.
ANSWER_EXTRACTORS = ("none", "gsm8k", "boxed", "auto")

GSM8K_MARKER = "####"
#: A comma grouping digits in thousands (``1,234,567``), which GSM8K answers write; other commas
#: (``(2, 3)``, ``2,3``) are part of the answer.
THOUSANDS_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
BOXED_MARKER = "\\boxed{"
_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")


def canonical_ground_truth(value: Any) -> str:
    """The ground truth as a string: strings unchanged, anything else (numbers, lists, GURU's
    zebra grids) as compact JSON with sorted keys, so one column never mixes types."""
    if isinstance(value, str):
        return value
    return canonical_json(value)


def extract_answer(text: str, how: str) -> str:
    """Apply an extractor to a ground-truth string.

    ``none`` keeps it; ``gsm8k`` takes what follows the last ``####`` (commas between digit groups of
    three removed: ``1,234`` gives ``1234``, ``(2, 3)`` stays);
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
        answer = THOUSANDS_COMMA.sub("", text.rsplit(GSM8K_MARKER, 1)[1].strip())
    elif how == "boxed":
        answer = last_boxed(text)  # the verifiers' reader: the same answer the reward would see
        if answer is None:
            raise ValueError("no complete \\boxed{...} answer (absent, or its braces do not balance)")
        answer = answer.strip()
    else:
        raise ValueError(f"unknown answer extractor {how!r}; choose one of {ANSWER_EXTRACTORS}")
    if not answer:
        raise ValueError(f"empty answer after the {how} marker")
    return answer


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (balanced braces, nested boxes allowed), or None, also
    when the last box does not close (a truncated completion): an earlier box is an answer the
    completion went on to revise, and verl's math rewards find none there either."""
    starts = [m.end() for m in _BOX_RE.finditer(text)]
    if not starts:
        return None
    depth = 1
    for i in range(starts[-1], len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[starts[-1]:i]
    return None
