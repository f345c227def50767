"""What a verl main run trains a row on, by the row's ``data_source``: verl renders the row's own
chat prompt (``template: pool``) and scores it with the reward its ``default_compute_score``
picks by ``data_source`` (``verl/utils/reward_score/__init__.py``). A prior is a pass rate, so an
endpoint pass measured under another prompt or reward measures something the main run does not
train on; :func:`main_run_difference` says how, for the warning the endpoint mapper gives before
its first batch. No Data-Juicer and no verl here: the dispatch is written down as verl's source has
it (checked against verl 0.7.1 and main, early 2026).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from trajval_ops.rollout.prompts import POOL_TEMPLATE

#: The field verl chooses a row's reward by (its ``data.reward_fn_key`` default).
DATA_SOURCE_KEY = "data_source"
#: How many data sources a warning names before it only counts.
NAMED_SOURCES = 4


@dataclass(frozen=True)
class VerlReward:
    """One of verl's rule rewards: its module, what it reads, and our verifier giving the same
    reward (None: none does)."""

    module: str
    reads: str
    verifier: str | None


DAPO = VerlReward("math_dapo", "the last 'Answer:' line, normalized, equal as text", "dapo")
_BOXED = "the last \\boxed{} answer"  # our math verifier reads the same box (compared by math-verify)
_REWARDS = {
    **dict.fromkeys(("math_dapo", "math", "math_dapo_reasoning"), DAPO),
    "openai/gsm8k": VerlReward("gsm8k", "the number after '####'", None),
    **dict.fromkeys(("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"),
                    VerlReward("math_reward", f"{_BOXED}, string-normalized", "math")),
    **dict.fromkeys(("numina_aops_forum", "numina_synthetic_math", "numina_amc_aime", "numina_synthetic_amc",
                     "numina_cn_k12", "numina_olympiads"), VerlReward("prime_math", f"{_BOXED}, sympy-equivalent", "math")),
    **dict.fromkeys(("codecontests", "apps", "codeforces", "taco"), VerlReward("prime_code", "test cases run", None)),
    "hiyouga/geometry3k": VerlReward("geo3k", f"{_BOXED} and a <think> format", None),
    **dict.fromkeys(("searchR1_nq", "searchR1_triviaqa", "searchR1_popqa", "searchR1_hotpotqa",
                     "searchR1_2wikimultihopqa", "searchR1_musique", "searchR1_bamboogle"),
                    VerlReward("search_r1_like_qa_em", "exact match inside <answer> tags", None)),
}


def verl_reward(data_source: str) -> VerlReward | None:
    """The reward verl's ``default_compute_score`` gives rows of ``data_source`` (None: it has none
    and raises, so the run must bring its own reward function)."""
    if data_source.startswith("aime"):
        return DAPO
    return _REWARDS.get(data_source)


def main_run_difference(data_sources: Iterable, template: str, verifier: str) -> str | None:
    """How a pass measuring with ``template`` and ``verifier`` differs from what a verl run
    trains rows of these ``data_source`` values on, in words (None: it does not). Only data
    sources verl's default reward knows are compared: for another one the run brings its own
    reward, unknown here. A custom verifier is the user's: only the template is compared then."""
    sources = Counter(str(source) for source in data_sources if source is not None)
    rewards = {source: reward for source in sources if (reward := verl_reward(source)) is not None}
    if not rewards:
        return None
    problems = []
    if template != POOL_TEMPLATE:
        problems.append(f"template {template!r} (verl renders the row's own chat prompt: template: pool, with "
                        "chat_template_kwargs as the run's data.apply_chat_template_kwargs)")
    other = [(s, r) for s, r in rewards.items() if r.verifier != verifier] if verifier != "custom" else []
    for source, reward in other[:NAMED_SOURCES]:
        fix = f"verifier: {reward.verifier}" if reward.verifier else "a custom verifier that does the same"
        problems.append(f"verifier {verifier!r} where verl scores data_source {source!r} ({sources[source]} rows) "
                        f"with its {reward.module} reward ({reward.reads}; {fix})")
    if len(other) > NAMED_SOURCES:
        problems.append(f"and {len(other) - NAMED_SOURCES} more data sources")
    if not problems:
        return None
    return ("it measures under another prompt or reward than a verl run on this pool trains on: "
            + "; ".join(problems) + ". The prior is a pass rate: measured so, it is not the main run's")
