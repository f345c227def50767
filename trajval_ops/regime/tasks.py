"""Seeded procedural task suite of the miniature regime: short problems with exact answers.

Twelve families (:data:`FAMILIES`), each a generator ``rng -> (question, answer)``. Questions are
a few characters (``"47+38"``, ``"rev 3847"``, ``"count 3 in 38313"``); the tokenizer's chat
template appends ``=`` and the model answers with the bare result, then end-of-sequence.

The last column is the shipped ``tiny-arith`` model's pass@1 at temperature 1.0.

============  =======================================  =========  =========  ======
family        question                                 answer     questions  pass@1
============  =======================================  =========  =========  ======
max           ``max 3 8 4 1`` (4 digits 0-9)           ``8``      10,000     1.00
add1          ``47+8`` (two-digit + one-digit)         ``55``     900        0.78
count_digit   ``count 3 in 383134`` (5-6 digits)       ``3``      > 10^6     0.26
reverse       ``rev 3847`` (3-5 digits 1-9)            ``7483``   66,339     0.99
sub2          ``83-47`` (two-digit, non-negative)      ``36``     4,095      0.08
add2          ``47+38`` (two-digit + two-digit)        ``85``     8,100      0.44
sort_digits   ``sort 38417`` (4-5 digits 1-9)          ``13478``  65,610     0.42
digit_sum     ``dsum 3841`` (3-4 digits)               ``16``     9,900      0.27
mul1          ``7*48`` (one-digit x two-digit)         ``336``    720        0.10
add3          ``472+385`` (three-digit + three-digit)  ``857``    810,000    0.004
mod           ``347%7`` (2-3 digits mod 2-9)           ``4``      7,920      0.36
mul2          ``47*38`` (two-digit x two-digit)        ``1786``   8,100      0.01
============  =======================================  =========  =========  ======

Answers are non-negative integers written without leading zeros (digit reversal and sorting
use the digits 1-9 only), so the project's ``math`` verifier with the last-number fallback
(:data:`VERIFIER`) scores a completion that equals the answer 1 and any other number 0: a
numeric check cannot confuse ``0123`` with ``123`` because no answer starts with 0.

**Pretraining / RL partition.** Every question belongs to one of two halves by a hash of its
text (:func:`question_part`): the pretraining script (:mod:`.pretrain`) only ever sees
``"pretrain"`` questions, and pools, held-out and tuning sets (:func:`generate_tasks`,
:func:`make_split`) are drawn from the ``"rl"`` half, so no RL task was memorised in
pretraining, for whatever seed a pool is made with.

CLI: ``python -m trajval_ops.regime.tasks --pool-size 1500 --heldout-size 500 --seed 0 --out DIR``
writes ``DIR/pool.jsonl`` and ``DIR/heldout.jsonl`` (and ``DIR/tuning.jsonl`` with
``--tuning-size``) atomically.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
from pathlib import Path
from typing import Callable, Iterable, Mapping

from trajval_ops.pools.identity import PROMPT_HASH, TASK_ID, prompt_hash

DATA_SOURCE = "trajval_tiny_arith"
#: Verifier of the regime for ``trajval_ops.rollout.verifiers.build_verifier(name, **options)``:
#: the completion is the bare answer, so the last number in it is compared with math-verify.
VERIFIER: tuple[str, dict] = ("math", {"fallback_last_number": True})

PARTS = ("rl", "pretrain")
#: Share of every family's question space that belongs to the RL half.
RL_SHARE = 0.5

Generator = Callable[[random.Random], tuple[str, str]]


def _digits(rng: random.Random, length: int, low: int = 0) -> str:
    return "".join(str(rng.randint(low, 9)) for _ in range(length))


def _max(rng):
    digits = _digits(rng, 4)
    return "max " + " ".join(digits), max(digits)


def _add1(rng):
    a, b = rng.randint(10, 99), rng.randint(0, 9)
    return f"{a}+{b}", str(a + b)


def _count_digit(rng):
    digit = str(rng.randint(0, 9))
    # the digit appears often enough for counts 0..6 to all occur
    text = "".join(digit if rng.random() < 0.3 else str(rng.choice([d for d in range(10) if str(d) != digit]))
                   for _ in range(rng.randint(5, 6)))
    return f"count {digit} in {text}", str(text.count(digit))


def _reverse(rng):
    digits = _digits(rng, rng.randint(3, 5), low=1)
    return f"rev {digits}", digits[::-1]


def _sub2(rng):
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    a, b = max(a, b), min(a, b)
    return f"{a}-{b}", str(a - b)


def _add2(rng):
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return f"{a}+{b}", str(a + b)


def _sort_digits(rng):
    digits = _digits(rng, rng.randint(4, 5), low=1)
    return f"sort {digits}", "".join(sorted(digits))


def _digit_sum(rng):
    digits = str(rng.randint(1, 9)) + _digits(rng, rng.randint(2, 3))
    return f"dsum {digits}", str(sum(int(d) for d in digits))


def _mul1(rng):
    a, b = rng.randint(2, 9), rng.randint(10, 99)
    return f"{a}*{b}", str(a * b)


def _add3(rng):
    a, b = rng.randint(100, 999), rng.randint(100, 999)
    return f"{a}+{b}", str(a + b)


def _mod(rng):
    a, b = rng.randint(10, 999), rng.randint(2, 9)
    return f"{a}%{b}", str(a % b)


def _mul2(rng):
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return f"{a}*{b}", str(a * b)


#: Family name -> generator. The order is part of the pretraining data stream (families are drawn
#: from this list): changing it changes the model :mod:`.pretrain` makes. Measured difficulty for
#: the shipped model is in its ``quality.json``.
FAMILIES: dict[str, Generator] = {
    "max": _max,
    "add1": _add1,
    "count_digit": _count_digit,
    "reverse": _reverse,
    "sub2": _sub2,
    "add2": _add2,
    "sort_digits": _sort_digits,
    "digit_sum": _digit_sum,
    "mul1": _mul1,
    "add3": _add3,
    "mod": _mod,
    "mul2": _mul2,
}

#: Every character a question or an answer may hold (the tokenizer covers these and more).
QUESTION_CHARS = frozenset("0123456789+-*% acdeimnorstuvx")

#: Draws per wanted row before a family is declared exhausted (its share goes to the others).
_ATTEMPTS_PER_ROW = 60
_MIN_ATTEMPTS = 2_000


def _stable_int(*parts) -> int:
    return int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:16], 16)


def question_part(question: str) -> str:
    """``"rl"`` or ``"pretrain"``: which half of the question space ``question`` belongs to
    (a hash of the text; stable across runs, machines and Python versions)."""
    return "rl" if _stable_int("part", question) % 1000 < RL_SHARE * 1000 else "pretrain"


def family_rng(seed: int, family: str, split: str = "") -> random.Random:
    """The random stream of one family in one call (no ``hash()``: stable across processes)."""
    return random.Random(_stable_int(seed, split, family))


def _quotas(count: int, families: list[str]) -> dict[str, int]:
    base, extra = divmod(count, len(families))
    return {family: base + (i < extra) for i, family in enumerate(families)}


def _draw(family: str, rng: random.Random, want: int, seen: set[str], exclude: frozenset[str] | set[str],
          part: str | None) -> tuple[list[tuple[str, str]], bool]:
    """Up to ``want`` new (question, answer) pairs of ``family``; second value: exhausted."""
    out: list[tuple[str, str]] = []
    attempts = max(_MIN_ATTEMPTS, want * _ATTEMPTS_PER_ROW)
    for _ in range(attempts):
        if len(out) == want:
            return out, False
        question, answer = FAMILIES[family](rng)
        if question in seen or question in exclude or (part is not None and question_part(question) != part):
            continue
        seen.add(question)
        out.append((question, answer))
    return out, len(out) < want


def generate_tasks(count: int, seed: int, families: Iterable[str] | None = None,
                   exclude: Iterable[str] = frozenset(), *, part: str | None = "rl",
                   split: str = "") -> list[dict]:
    """``count`` task rows, deterministic for the arguments, spread evenly over ``families``
    (default: all), no question twice and none in ``exclude`` (question texts).

    A family whose question space runs out (``add1`` and ``mul1`` are small) gives its remaining
    share to the others, so the call still returns ``count`` rows when the families together
    hold enough questions.

    :param part: draw only questions of this half (see :func:`question_part`): ``"rl"`` (the
        default, for pools and evaluation sets), ``"pretrain"``, or None for both.
    :param split: a split name (``pool``, ``heldout``...): gives the split its own random stream
        and goes into the row ids (``<family>-<seed>-<split>-<k>``), so rows of different splits
        of one seed never share an id.
    :raises ValueError: unknown family or part, or not enough distinct questions.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    names = list(FAMILIES) if families is None else list(dict.fromkeys(families))
    unknown = [name for name in names if name not in FAMILIES]
    if unknown or not names:
        raise ValueError(f"unknown or no families {unknown}; choose from {list(FAMILIES)}")
    if part is not None and part not in PARTS:
        raise ValueError(f"part must be one of {PARTS} or None, got {part!r}")
    exclude = exclude if isinstance(exclude, (set, frozenset)) else frozenset(exclude)
    rngs = {name: family_rng(seed, name, split) for name in names}
    seen: set[str] = set()
    drawn: dict[str, list[tuple[str, str]]] = {name: [] for name in names}
    open_families = list(names)
    missing = count
    while missing and open_families:
        quotas = _quotas(missing, open_families)
        missing = 0
        for name in list(open_families):
            got, exhausted = _draw(name, rngs[name], quotas[name], seen, exclude, part)
            drawn[name].extend(got)
            missing += quotas[name] - len(got)
            if exhausted:
                open_families.remove(name)
    if missing:
        raise ValueError(f"the families {names} hold fewer than {count} distinct questions "
                         f"(part {part!r}, {len(exclude)} excluded); ask for fewer tasks")
    pairs = [(name, q, a) for name in names for q, a in drawn[name]]
    random.Random(_stable_int("order", seed, split)).shuffle(pairs)
    return [make_row(name, question, answer, index, seed, split)
            for index, (name, question, answer) in enumerate(pairs)]


def make_row(family: str, question: str, answer: str, index: int, seed: int, split: str = "") -> dict:
    """One verl-style row (also carrying the pool tools' ``task_id`` and prompt hash)."""
    task_id = f"{family}-{seed}-{split}-{index}" if split else f"{family}-{seed}-{index}"
    prompt = [{"role": "user", "content": question}]
    extra = {"index": index, "family": family}
    if split:
        extra["split"] = split
    return {
        "id": task_id,
        "data_source": DATA_SOURCE,
        "prompt": prompt,
        "ability": "arithmetic",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": extra,
        "family": family,
        TASK_ID: task_id,
        PROMPT_HASH: prompt_hash(prompt),
    }


def question_of(row: Mapping) -> str:
    """The question text of a row made here."""
    return row["prompt"][0]["content"]


def make_split(pool_size: int, heldout_size: int, seed: int, tuning_size: int = 0,
               families: Iterable[str] | None = None) -> dict[str, list[dict]]:
    """Disjoint (by question text) ``pool``, ``heldout`` and, when ``tuning_size`` > 0,
    ``tuning`` sets from the RL half of the question space.

    The held-out set is drawn first, then tuning, then the pool, each excluding the ones
    before: for a seed, the held-out set does not depend on the pool size.
    """
    families = list(families) if families is not None else None
    taken: set[str] = set()
    out: dict[str, list[dict]] = {}
    for split, size in (("heldout", heldout_size), ("tuning", tuning_size), ("pool", pool_size)):
        if split == "tuning" and size <= 0:
            continue
        rows = generate_tasks(size, seed, families, exclude=taken, split=split)
        taken.update(question_of(row) for row in rows)
        out[split] = rows
    return {name: out[name] for name in ("pool", "heldout", "tuning") if name in out}


def pretraining_pair(rng: random.Random, family: str) -> tuple[str, str]:
    """A random (question, answer) of ``family`` from the pretraining half (repeats allowed)."""
    generator = FAMILIES[family]
    while True:
        question, answer = generator(rng)
        if question_part(question) == "pretrain":
            return question, answer


def main(argv: list[str] | None = None) -> int:
    from trajval_ops.pools.io import write_rows

    parser = argparse.ArgumentParser(prog="python -m trajval_ops.regime.tasks",
                                     description="Write a pool and a disjoint held-out set of the miniature regime.")
    parser.add_argument("--pool-size", type=int, required=True)
    parser.add_argument("--heldout-size", type=int, required=True)
    parser.add_argument("--tuning-size", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--families", help=f"comma-separated subset of {','.join(FAMILIES)}")
    parser.add_argument("--out", required=True, help="folder for pool.jsonl, heldout.jsonl (, tuning.jsonl)")
    args = parser.parse_args(argv)
    families = args.families.split(",") if args.families else None
    try:
        splits = make_split(args.pool_size, args.heldout_size, args.seed, args.tuning_size, families)
    except ValueError as exc:
        parser.error(str(exc))
    out = Path(args.out)
    for name, rows in splits.items():
        write_rows(out / f"{name}.jsonl", rows)
        print(f"{name}\t{len(rows)}\t{out / f'{name}.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
