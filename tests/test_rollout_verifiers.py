"""Verifiers on hand-written completions, limits on pathological ones."""

import os
import time

import pytest

from trajval_ops.pools.answers import last_boxed
from trajval_ops.rollout.verifiers import build_verifier, canonical_answer


@pytest.fixture(scope="module")
def math_verifier():
    verifier = build_verifier("math", timeout_s=2.0)
    yield verifier
    verifier.close()


@pytest.fixture(scope="module")
def math_fallback():
    verifier = build_verifier("math", fallback_last_number=True, timeout_s=2.0)
    yield verifier
    verifier.close()


@pytest.mark.parametrize("completion, truth, expected", [
    ("So the answer is \\boxed{5}.", "5", 1.0),
    ("\\boxed{6}", "5", 0.0),
    ("first \\boxed{3} then corrected: \\boxed{5}", "5", 1.0),  # the last box counts
    ("\\boxed{\\boxed{42}}", "42", 1.0),  # nested boxes
    ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),  # LaTeX fraction vs decimal
    ("\\boxed{\\dfrac{3}{4}}", "\\frac{3}{4}", 1.0),
    ("\\boxed{2/4}", "\\frac{1}{2}", 1.0),
    ("\\boxed{x^2+2x+1}", "(x+1)^2", 1.0),
    ("\\boxed{1,000}", "1000", 1.0),
    ("The answer is 5.", "5", 0.0),  # no box, no fallback
    ("\\boxed{5", "5", 0.0),  # truncated box
    ("\\boxed{3} wait, no: \\boxed{4", "3", 0.0),  # the last box is truncated: not the revised-away one
    ("\\boxed{50\\%}", "50", 1.0),  # math-verify reads a boxed percent or degree only inline
    ("\\boxed{12.5\\%}", "12.5", 1.0),
    ("\\boxed{45°}", "45", 1.0),
    ("\\boxed{51\\%}", "50", 0.0),
    ("", "5", 0.0),
])
def test_math_verifier(math_verifier, completion, truth, expected):
    assert math_verifier(completion, truth) == expected


def test_math_fallback_last_number_is_named_and_recorded(math_fallback, math_verifier):
    result = math_fallback.check("2 + 3 makes 5.", "5")
    assert (result.reward, result.method) == (1.0, "last_number")
    assert math_fallback.check("\\boxed{5} not 7", "5").method == "boxed"  # box wins
    assert math_fallback("I think it is 4, no 6", "5") == 0.0
    assert math_fallback.spec["fallback_last_number"] is True
    assert math_verifier.spec == {"name": "math", "fallback_last_number": False, "timeout_s": 2.0,
                                  "max_completion_chars": 100_000}


@pytest.mark.parametrize("completion, truth, expected", [
    ("so x = \\frac{1}{2}", "1/2", 1.0),  # a LaTeX fraction is a/b, not its denominator
    ("so x = \\frac{1}{2}", "2", 0.0),
    ("it is \\dfrac{-3}{4}.", "-3/4", 1.0),
    ("\\sqrt{2}", "2", 0.0),  # a root's, an exponent's or an index's number is not the answer
    ("2^{10}", "10", 0.0),
    ("x^2", "2", 0.0),
    ("the total is 1,024 apples", "1024", 1.0),
    ("\\boxed{3} wait, no: \\boxed{4", "3", 0.0),  # a truncated last box: no earlier box, no number in it
])
def test_math_fallback_reads_the_last_number_that_stands_alone(math_fallback, completion, truth, expected):
    assert math_fallback(completion, truth) == expected


def test_last_boxed_balances_braces():
    assert last_boxed("\\boxed{\\frac{a}{b}} and \\boxed{\\sqrt{2}}") == "\\sqrt{2}"
    assert last_boxed("no box") is None


def test_pathological_completions_score_zero_quickly(math_verifier):
    start = time.perf_counter()
    # a power sympy would compute forever inside C code: only the time limit stops it
    assert math_verifier("\\boxed{" + "9" * 3000 + "^" + "9" * 300 + "}", "1") == 0.0
    assert "check exceeded 2 s" in math_verifier.rejections
    assert math_verifier("\\boxed{" + "{" * 500 + "1" + "}" * 500 + "}", "1") == 0.0
    assert math_verifier("x" * 200_000, "1") == 0.0
    assert math_verifier("\\boxed{" + "1+" * 4000 + "1}", "1") == 0.0
    assert time.perf_counter() - start < 10
    assert math_verifier("\\boxed{5}", "5") == 1.0  # still works after the killed check


@pytest.mark.parametrize("normalize, completion, truth, expected", [
    (False, "<answer> fdebme </answer>", "fdebme", 1.0),
    (False, "<answer>fdebmx</answer>", "fdebme", 0.0),
    (False, "no tags fdebme", "fdebme", 0.0),
    (False, "<answer>a</answer> then <answer>b</answer>", "b", 1.0),  # last tag counts
    (False, "<answer>['pigeon', 'sparrow']</answer>", ["pigeon", "sparrow"], 1.0),
    (False, '<answer>["pigeon","sparrow"]</answer>', ["pigeon", "sparrow"], 0.0),
    (True, '<answer>["pigeon","sparrow"]</answer>', ["pigeon", "sparrow"], 1.0),
    (True, "<answer>[ 'sparrow', 'pigeon' ]</answer>", "['pigeon', 'sparrow']", 0.0),  # order
    (True, "<answer>[[1, 2], [3, 4]]</answer>", [[1, 2], [3, 4]], 1.0),
    (True, "<answer>\n1 2\n3 4\n</answer>", [[1, 2], [3, 4]], 1.0),  # grid as rows
    (True, "<answer>[[1,2],[3,5]]</answer>", "[[1, 2], [3, 4]]", 0.0),
    (True, "<answer>  fdebme </answer>", "fdebme", 1.0),
])
def test_answer_tag_verifier(normalize, completion, truth, expected):
    verifier = build_verifier("answer_tag", normalize=normalize)
    assert verifier(completion, truth) == expected


@pytest.mark.parametrize("options, completion, truth, expected", [
    # GURU's ordering rows: a list ground truth, the model answering with other quotes and case
    ({"normalize": True, "ignore_case": True}, '<answer>["Pigeon", "sparrow"]</answer>', ["pigeon", "sparrow"], 1.0),
    ({"normalize": True}, '<answer>["Pigeon", "sparrow"]</answer>', ["pigeon", "sparrow"], 0.0),
    ({"normalize": True, "ignore_case": True}, "<answer>['sparrow', 'pigeon']</answer>", ["pigeon", "sparrow"], 0.0),
    # GURU's graph rows: a trait string compared case-insensitively
    ({"ignore_case": True}, "<answer> FDEBME </answer>", "fdebme", 1.0),
    ({}, "<answer> FDEBME </answer>", "fdebme", 0.0),
])
def test_answer_tag_ignore_case_matches_gurus_own_comparison(options, completion, truth, expected):
    assert build_verifier("answer_tag", **options)(completion, truth) == expected


def test_canonical_answer_quotes_and_whitespace():
    assert canonical_answer("['a',  'b']") == canonical_answer('["a","b"]') == ("a", "b")


def custom_reward(completion, ground_truth, row):
    if completion == "boom":
        raise RuntimeError("model wrote boom")
    if completion == "bad":
        return 2.0
    return 0.5 if ground_truth in completion else 0.0


def slow_reward(completion, ground_truth, row):
    time.sleep(30)
    return 1.0


def huge_power_reward(completion, ground_truth, row):
    return float(9 ** 10 ** 9 > 0)  # minutes inside C code: no signal interrupts it


def crashing_reward(completion, ground_truth, row):
    if completion == "die":
        os._exit(3)  # the checking process dies without a reply
    return 1.0


def _check_in_daemonic_worker(function):
    verifier = build_verifier("custom", function=function, timeout_s=1.0)
    start = time.perf_counter()
    score = verifier("x", "y")
    elapsed = time.perf_counter() - start
    reasons = list(verifier.rejections)
    verifier.close()
    return score, elapsed, reasons


def test_time_limit_is_hard_inside_daemonic_pool_workers():
    """Data-Juicer runs mappers in daemonic pool workers when num_proc > 1: the check still runs
    in a killable child there, so a check stuck in C code is cut off at the limit."""
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(1) as pool:
        score, elapsed, reasons = pool.apply(_check_in_daemonic_worker, (f"{__name__}:huge_power_reward",))
    assert score == 0.0 and elapsed < 10
    assert reasons == ["check exceeded 1 s"]


def test_a_dying_check_scores_zero_and_the_next_check_works():
    verifier = build_verifier("custom", function=f"{__name__}:crashing_reward", timeout_s=2.0)
    assert verifier("die", "y") == 0.0
    assert verifier.rejections["the checking process died"] == 1
    assert verifier("fine", "y") == 1.0  # a new checking process took over
    verifier.close()


def test_custom_verifier():
    verifier = build_verifier("custom", function=f"{__name__}:custom_reward", timeout_s=1.0)
    assert verifier("it is 7", "7", {"id": 1}) == 0.5
    assert verifier("it is 8", "7") == 0.0
    assert verifier("boom", "7") == 0.0  # exception on model output: 0 with a reason
    assert any("RuntimeError" in reason for reason in verifier.rejections)
    with pytest.raises(ValueError, match="outside \\[0, 1\\]"):
        verifier("bad", "7")
    verifier.close()


def test_custom_verifier_time_limit():
    verifier = build_verifier("custom", function=f"{__name__}:slow_reward", timeout_s=0.5)
    start = time.perf_counter()
    assert verifier("x", "y") == 0.0
    assert time.perf_counter() - start < 5
    verifier.close()


@pytest.mark.parametrize("name, options, fragment", [
    ("regex", {}, "unknown verifier"),
    ("custom", {"function": "no_colon"}, "module:function"),
    ("custom", {"function": "os:not_there"}, "not a callable"),
    ("math", {"timeout_s": 0}, "timeout_s"),
    ("math", {"timeout_s": float("nan")}, "timeout_s must be a finite number"),
    ("math", {"timeout_s": "5"}, "timeout_s must be a finite number"),
    ("math", {"max_completion_chars": 0}, "max_completion_chars must be an integer > 0"),
    ("math", {"fallback_last_number": "false"}, "fallback_last_number must be true or false"),
    ("answer_tag", {"normalize": 1}, "normalize must be true or false"),
    ("answer_tag", {"ignore_case": "no"}, "ignore_case must be true or false"),
])
def test_bad_verifier_configs(name, options, fragment):
    with pytest.raises(ValueError, match=fragment):
        build_verifier(name, **options)


def test_check_many_checks_each_distinct_completion_once():
    verifier = build_verifier("math", fallback_last_number=True)
    calls = []
    original = verifier.check

    def counting(completion, ground_truth, row=None):
        calls.append(completion)
        return original(completion, ground_truth, row)

    verifier.check = counting
    long_text = "9" * (verifier.max_completion_chars + 1)
    results = verifier.check_many(["42", "41", "42", "42", long_text, long_text], "42")
    assert [r.reward for r in results] == [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert calls == ["42", "41", long_text]
    assert sum(verifier.rejections.values()) == 2  # each rejected completion counts
    verifier.close()


def test_integer_answers_are_decided_as_math_verify_decides_them():
    """The integer fast path (no checking child) agrees with math-verify on integer pairs,
    edge cases included; anything else still goes to math-verify."""
    import random

    verifier = build_verifier("math", fallback_last_number=True)
    rng = random.Random(0)
    golds = ["0", "7", "-5", "42", "1000", "123456789012345678901234567890", "007"]
    answers = ["0", "-0", "7", "07", "007", "-5", "5", "42", "042", "1000", "1,000",
               "123456789012345678901234567890", "123456789012345678901234567891"]
    answers += [str(rng.randint(-2000, 2000)) for _ in range(60)]
    completions = [f"the answer is {a}" for a in answers] + [f"so \\boxed{{{a}}}" for a in answers]
    for gold in golds + [str(rng.randint(-2000, 2000)) for _ in range(20)]:
        for completion in completions:
            fast = verifier._run_limited(completion, gold, None)
            slow = verifier._check(completion, gold, None)  # math-verify, in this process
            assert (fast.reward, fast.method) == (slow.reward, slow.method), (completion, gold)
    for gold in golds + [" 12 ", 3, -4, "9" * 100]:  # the truth check's fast path agrees too
        assert verifier.truth_problem(gold) is None and verifier._truth_problem(gold) is None
    calls = []
    verifier._call_limited = lambda method, *args: calls.append(args) or None
    verifier._run_limited("so \\boxed{\\frac{1}{2}}", "7", None)   # not an integer answer
    verifier._run_limited("so \\boxed{3}", "\\frac{1}{2}", None)    # not an integer truth
    assert len(calls) == 2
    verifier.truth_problem("7")
    verifier.truth_problem("\\frac{")  # not an integer: read by math-verify in the child
    assert len(calls) == 3
    verifier.close()
