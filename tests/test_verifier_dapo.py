"""The ``dapo`` verifier: verl's DAPO-Math reward (``verl/utils/reward_score/math_dapo.py``) on the
same completion, by fixed cases of our own and, where verl is installed (tools/install.sh
TRAJVAL_WITH_TRAINERS=1, as CI does), against verl's own function on several hundred generated
completions with their edge cases."""

from __future__ import annotations

import random

import pytest

from trajval_ops.rollout.verifiers import DAPO_TAIL_CHARS, build_verifier, dapo_normal_form


@pytest.fixture(scope="module")
def dapo():
    verifier = build_verifier("dapo")
    yield verifier
    verifier.close()


@pytest.mark.parametrize("completion, truth, expected", [
    ("3 + 4 = 7.\nAnswer: 7", "7", 1.0),
    ("answer : 7", "7", 1.0),                                     # any case, spaces around the colon
    ("ANSWER:\n7", "7", 1.0),                                     # the answer may start on the next line
    ("Answer: 8\nwait, no.\nAnswer: 7", "7", 1.0),                # the last Answer: line counts
    ("Answer: 7\nwait, no.\nAnswer: 8", "7", 0.0),
    ("Answer: $7$", "7", 1.0),                                    # dollar signs dropped
    ("Answer: 1,000", "1000", 1.0),                               # a comma-grouped integer
    ("Answer: 12 dollars", "12", 1.0),                            # units dropped
    ("Answer: x = 12", "12", 1.0),                                # what follows the last '='
    ("Answer: \\boxed{12}", "12", 1.0),
    ("Answer: \\frac12", "\\frac{1}{2}", 1.0),                    # TeX shorthand given its braces
    ("Answer: 0.5", "\\frac{1}{2}", 0.0),                         # text equality, not math equivalence
    ("Answer: 90^\\circ", "90", 1.0),
    ("The answer is \\boxed{7}.", "7", 0.0),                      # a box alone is no Answer: line
    ("Answer: 7 and 8", "7", 0.0),                                # the whole line is the answer
    ("x" * 1000 + "\nAnswer: 7", "7", 1.0),                       # only the tail is read, whatever the length
    ("Answer: 7\n" + "y" * DAPO_TAIL_CHARS, "7", 0.0),            # the answer left the 300-character tail
    ("no answer here", "7", 0.0),
])
def test_fixed_cases(dapo, completion, truth, expected):
    assert dapo(completion, truth) == expected


def test_how_the_answer_was_found_is_named(dapo):
    assert dapo.check("Answer: 7", "7").method == "answer_line"
    assert dapo.check("7", "7").method is None


def test_ground_truths_it_cannot_compare_are_named(dapo):
    assert dapo.truth_problem("42") is None and dapo.truth_problem(42) is None
    assert "normalized" in dapo.truth_problem("dollars")  # units only: nothing left to compare
    assert dapo.truth_problem("") is not None and dapo.truth_problem(None) is not None


def test_the_normal_form():
    assert dapo_normal_form(" \\text{5} cm ") == "5"
    assert dapo_normal_form("y = $3\\sqrt2$") == "3\\sqrt{2}"
    assert dapo_normal_form("1,234,567") == "1234567"
    assert dapo_normal_form("1,2") == "12"  # as verl: the commas of a digit string go, grouped or not


# --------------------------------------------------------------------------- against verl

TRUTHS = ["7", "42", "1000", "-3", "0", "\\frac{1}{2}", "\\sqrt{2}", "3\\sqrt{3}", "\\pi", "x=5", "12", "2017",
          "\\frac{3}{4}", "(1,2)", "90", "5\\%", "a"]


def _answers(truth: str, rng: random.Random) -> list[str]:
    """Ways a completion writes an answer to ``truth``, right and wrong."""
    core = truth.split("=")[-1]
    wrong = str(rng.randint(-20, 2100))
    shorthand = core
    for braced, short in (("\\frac{1}{2}", "\\frac12"), ("\\frac{3}{4}", "\\frac34"), ("\\sqrt{2}", "\\sqrt2"),
                          ("\\sqrt{3}", "\\sqrt3")):
        shorthand = shorthand.replace(braced, short)
    return [core, shorthand, f"${shorthand}$", f"${core}$", f"\\boxed{{{core}}}", f"{core} dollars", f"x = {core}",
            f"{core}.", f"\\text{{{core}}}", f"{core} \\text{{cm}}^2", f"{core}^\\circ", f"{core} degrees", f" {core} ",
            f"**{core}**", f"a {core}", f"\\${core}", f"{core}\\;", f"{{,}}{core}", wrong, f"${wrong}$", "", "\\frac12",
            "\\frac{1}{2}", "0.5", "\\sqrt2", "1,000", "1,0,0,0", f"{core} and {wrong}", f"\\textbf{{{core}}}",
            f"\\overline{{{core}}}", f"$x$ is ${core}$ here", f"${core}$ is it", f"{core}\\ldots", f"\\mbox{{{core}}}"]


def _completions(seed: int = 0, count: int = 800) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = ["Let", "x", "=", "3", "so", "$x^2$", "we", "get", "\\frac{1}{2}", "Answer", "answer:", "\n", "then", ".",
             "\\boxed{9}", "2+2=4", "hence"]
    heads = ["Answer:", "answer:", "ANSWER :", "Answer :\n", "The final Answer:", "answer:\n\n", "Answer:  ",
             "answer"]  # the last has no colon: no Answer: line
    cases = []
    for _ in range(count):
        truth = rng.choice(TRUTHS)
        working = " ".join(rng.choice(words) for _ in range(rng.choice([0, 5, 40, 120])))
        answer = rng.choice(_answers(truth, rng))
        tail = rng.choice(["", "\n", "\nI hope this helps.", "\n" + "z" * rng.choice([50, 280, 400]),
                           "\nAnswer: " + str(rng.randint(0, 9))])
        cases.append((f"{working}\n{rng.choice(heads)}{answer}{tail}", truth))
    return cases


def test_same_reward_as_verls_own_function(dapo):
    math_dapo = pytest.importorskip("verl.utils.reward_score.math_dapo",
                                    reason="verl is not installed (tools/install.sh TRAJVAL_WITH_TRAINERS=1)")
    cases = _completions()
    ours = [dapo(completion, truth) for completion, truth in cases]
    verls = [1.0 if math_dapo.compute_score(completion, truth)["acc"] else 0.0 for completion, truth in cases]
    differing = [case for case, a, b in zip(cases, ours, verls) if a != b]
    assert not differing, differing[:5]
    # the cases reach both outcomes, and the edge cases among them: no Answer: line, a cut tail
    assert 0.15 < sum(ours) / len(ours) < 0.85
    assert any("answer" not in c[-DAPO_TAIL_CHARS:].lower() for c, _ in cases)
    # verl's own dispatch picks this reward for DAPO's data sources
    from verl.utils.reward_score import default_compute_score

    for source in ("math_dapo", "aime2024"):
        assert default_compute_score(source, "so\nAnswer: 12 dollars", "12")["acc"] is True


def test_the_data_sources_verl_scores_with_its_dapo_reward():
    """trajval_ops.rollout.verl_reward writes verl's dispatch down; verl's own
    default_compute_score agrees where it is installed."""
    from trajval_ops.rollout.verl_reward import DAPO, _REWARDS, verl_reward

    assert verl_reward("aime2025") is DAPO and verl_reward("math_dapo") is DAPO and verl_reward("mine") is None
    scoring = pytest.importorskip("verl.utils.reward_score", reason="verl is not installed")
    for source, reward in _REWARDS.items():
        if reward.module in ("math_dapo", "math_reward", "gsm8k", "prime_math"):
            result = scoring.default_compute_score(source, "so\nAnswer: 12 dollars\n#### 12 \\boxed{12}", "12")
            assert (isinstance(result, dict) and "acc" in result) == (reward is DAPO), source
    with pytest.raises(NotImplementedError):
        scoring.default_compute_score("mine", "Answer: 12", "12")
