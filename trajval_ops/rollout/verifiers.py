"""Binary rewards for rollouts: ``math`` (math-verify on the last ``\\boxed{}``), ``answer_tag``
(exact match inside ``<answer>...</answer>``), ``dapo`` (verl's DAPO reward: the last ``Answer:``
line) and ``custom`` (any ``module:function``).

``build_verifier(name, **options)`` returns a :class:`Verifier`; calling it with
``(completion, ground_truth, row)`` gives a float (1.0/0.0; custom: [0, 1]). Model output never
hangs the pipeline: each check runs under a time limit, and a pathological completion (huge,
deeply nested, a check that times out or crashes) scores 0.0 with a logged reason.
``Verifier.check`` also tells *how* the answer was found (``boxed``, ``last_number``, ``tag``),
so callers can record how many hits came from a fallback.
"""

from __future__ import annotations

import ast
import functools
import importlib
import json
import logging
import math
import multiprocessing
import os
import re
import signal
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from loguru import logger

from trajval_ops.lifetime import die_with_parent
from trajval_ops.pools.answers import last_boxed

#: Longer completions are not parsed at all (score 0, reason logged).
DEFAULT_MAX_COMPLETION_CHARS = 100_000
#: Longer extracted answers (box or tag content) score 0.
MAX_ANSWER_CHARS = 5_000
#: Brace / bracket nesting deeper than this scores 0 (sympy and literal_eval recurse on it).
MAX_NESTING = 40
DEFAULT_TIMEOUT_S = 5.0
#: A reason is logged this many times per verifier, then only counted.
_LOGGED_PER_REASON = 3


class CheckTimeout(Exception):
    """A single verification exceeded its time limit."""


class CheckCrashed(Exception):
    """The checking process died during a verification (a crash inside C code)."""


@dataclass(frozen=True)
class CheckResult:
    """Outcome of one verification: the reward, where the answer came from, why it is 0."""

    reward: float
    method: str | None = None  # "boxed", "last_number", "tag", "custom"; None: no answer found
    reason: str | None = None  # set when the completion was rejected as pathological


class Verifier:
    """Base class: subclasses implement ``_check``; this class adds the limits and logging."""

    name: str = ""
    #: how this release reads answers; raised when a reading changes, so rewards cached by an
    #: earlier reading are not reused (the rollout cache's key holds it beyond 1)
    revision: int = 1

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S,
                 max_completion_chars: int = DEFAULT_MAX_COMPLETION_CHARS):
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < math.inf:
            raise ValueError(f"verifier timeout_s must be a finite number of seconds > 0, got {timeout_s!r}")
        if isinstance(max_completion_chars, bool) or not isinstance(max_completion_chars, int) \
                or max_completion_chars <= 0:
            raise ValueError(f"verifier max_completion_chars must be an integer > 0, got {max_completion_chars!r}")
        self.timeout_s = float(timeout_s)
        self.max_completion_chars = int(max_completion_chars)
        self.rejections: Counter[str] = Counter()
        self._worker: _CheckWorker | None = None

    @property
    def spec(self) -> dict:
        """Name and options, for provenance."""
        return {"name": self.name, **self._options(), "timeout_s": self.timeout_s,
                "max_completion_chars": self.max_completion_chars}

    def _options(self) -> dict:
        return {}

    def __call__(self, completion: str, ground_truth: Any, row: dict | None = None) -> float:
        return self.check(completion, ground_truth, row).reward

    def check(self, completion: str, ground_truth: Any, row: dict | None = None) -> CheckResult:
        if not isinstance(completion, str):
            return self._reject(f"completion is {type(completion).__name__}, not str")
        if len(completion) > self.max_completion_chars:
            return self._reject(f"completion longer than {self.max_completion_chars} chars")
        try:
            result = self._run_limited(completion, ground_truth, row)
        except CheckTimeout:
            return self._reject(f"check exceeded {self.timeout_s:g} s")
        except CheckCrashed:
            return self._reject("the checking process died")
        except (RecursionError, MemoryError) as exc:
            return self._reject(f"check failed: {type(exc).__name__}")
        if result.reason:
            return self._reject(result.reason)
        return result

    def check_many(self, completions: Sequence[Any], ground_truth: Any, row: dict | None = None) -> list[CheckResult]:
        """:meth:`check` for each completion of one task. A check is a function of its inputs
        only, so identical completions are checked once (a small model's n rollouts repeat the
        same short answer); a rejected repeat counts its reason again."""
        done: dict[str, CheckResult] = {}
        results = []
        for completion in completions:
            result = done.get(completion) if isinstance(completion, str) else None
            if result is None:
                result = self.check(completion, ground_truth, row)
                if isinstance(completion, str):
                    done[completion] = result
            elif result.reason:
                self.rejections[result.reason] += 1
            results.append(result)
        return results

    def truth_problem(self, ground_truth: Any) -> str | None:
        """Why ``ground_truth`` cannot be compared with any answer (every completion would score
        0), or None when it can. Runs under the same time limit as a check."""
        if ground_truth is None or (isinstance(ground_truth, str) and not ground_truth.strip()):
            return "the ground truth is empty"
        try:
            return self._call_limited("_truth_problem", ground_truth)
        except CheckTimeout:
            return f"reading the ground truth exceeded {self.timeout_s:g} s"
        except CheckCrashed:
            return "the checking process died while reading the ground truth"
        except (RecursionError, MemoryError) as exc:
            return f"reading the ground truth failed: {type(exc).__name__}"

    def _truth_problem(self, ground_truth: Any) -> str | None:
        return None

    def _reject(self, reason: str) -> CheckResult:
        self.rejections[reason] += 1
        if self.rejections[reason] <= _LOGGED_PER_REASON:
            logger.warning(f"verifier {self.name}: score 0, {reason}")
        return CheckResult(0.0, None, reason)

    def _check(self, completion: str, ground_truth: Any, row: dict | None) -> CheckResult:
        raise NotImplementedError

    def _run_limited(self, completion, ground_truth, row) -> CheckResult:
        return self._call_limited("_check", completion, ground_truth, row)

    def _call_limited(self, method: str, *args):
        """``self.<method>(*args)`` in the checking child, under the time limit."""
        if self._worker is None:
            self._worker = _CheckWorker(self)
        try:
            return self._worker.run(self.timeout_s, method, *args)
        except (CheckTimeout, CheckCrashed):
            self._worker = None
            raise

    def close(self) -> None:
        """Stop the checking child process (it also stops when this process exits)."""
        if self._worker is not None:
            self._worker.kill()
            self._worker = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_worker"] = None
        return state


class _CheckWorker:
    """A forked child that runs checks; killed and replaced when one overruns its limit.

    A signal cannot interrupt C code (sympy raising 9**10**9), a separate process can. The
    child is made with ``os.fork`` rather than ``multiprocessing.Process``, which refuses to
    start children from the daemonic pool workers Data-Juicer uses when ``num_proc > 1``.
    """

    def __init__(self, verifier: "Verifier"):
        self._conn, child_conn = multiprocessing.Pipe()
        parent = os.getpid()
        self._pid = os.fork()
        if self._pid == 0:  # the child
            code = 0
            try:
                die_with_parent(expected_parent=parent)  # also when the parent is SIGKILLed
                # our copy of the parent's end would keep the pipe open after the parent dies:
                # close it so recv() sees EOF and this child exits with its parent
                self._conn.close()
                _serve_checks(child_conn, verifier)
            except BaseException:  # noqa: BLE001 - nothing of the parent's may run in the child
                code = 1
            finally:
                os._exit(code)  # no atexit handlers, no flushing of the parent's buffers
        child_conn.close()

    def run(self, timeout_s: float, *args) -> CheckResult:
        try:
            self._conn.send(args)
            ready = self._conn.poll(timeout_s)
        except (OSError, EOFError):
            ready = False
        if not ready:
            self.kill()
            raise CheckTimeout()
        try:
            ok, value = self._conn.recv()
        except EOFError:
            self.kill()
            raise CheckCrashed() from None
        if not ok:
            raise value
        return value

    def kill(self) -> None:
        try:
            os.kill(self._pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self._pid, 0)
        self._conn.close()


def _serve_checks(conn, verifier: "Verifier") -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills us
    while True:
        try:
            method, *args = conn.recv()
        except EOFError:
            return
        try:
            conn.send((True, getattr(verifier, method)(*args)))
        except Exception as exc:  # noqa: BLE001 - re-raised in the parent
            conn.send((False, exc))


# ----------------------------------------------------------------------------- math

_NUMBER_RE = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")
_LATEX_FRACTION_RE = re.compile(r"\\[dt]?frac\s*\{\s*(-?\d+)\s*\}\s*\{\s*(\d+)\s*\}")
#: what a number is part of, not the answer, when it follows one of these: an exponent, an index,
#: an argument (``\sqrt{2}``, ``2^{10}``) or an unclosed (truncated) box
_NOT_AN_ANSWER_AFTER = "^_{"
_SHORT_INTEGER_RE = re.compile(r"-?\d{1,100}")


def _integer_truth(ground_truth: Any) -> str | None:
    """The ground truth's text when it is an integer (at most 100 digits), else None: the truths
    the math verifier reads and compares without the checking child."""
    text = str(ground_truth).strip()
    return text if _SHORT_INTEGER_RE.fullmatch(text) else None


def last_number(text: str) -> str | None:
    """The last number in the text (integers, decimals, thousands separators, a/b, ``\\frac{a}{b}``
    as a/b), or None when it is part of something else: an exponent, an index or an argument
    (``2^{10}``, ``\\sqrt{2}``, ``x_1``) is not the answer, nor is a denominator."""
    text = _LATEX_FRACTION_RE.sub(r"\1/\2", text)
    last = None
    for last in _NUMBER_RE.finditer(text):
        pass
    if last is None or (last.start() > 0 and text[last.start() - 1] in _NOT_AN_ANSWER_AFTER):
        return None
    return last.group().replace(",", "")


def max_nesting(text: str) -> int:
    depth = deepest = 0
    for char in text:
        if char in "{[(":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "}])":
            depth = max(0, depth - 1)
    return deepest


def _flag(name: str, value) -> bool:
    """A verifier's on/off option: a YAML ``"false"`` (quoted) would otherwise read as on."""
    if not isinstance(value, bool):
        raise ValueError(f"verifier option {name} must be true or false, got {value!r}")
    return value


class MathVerifier(Verifier):
    """The paper's math reward: the last ``\\boxed{}`` answer checked with math-verify.

    :param fallback_last_number: when the completion has no box, check its last number instead
        (off in the paper; small models rarely box their answer). Which one was used is
        reported by :meth:`check` as ``method``.
    """

    name = "math"
    #: 2 (2026-11-27): a truncated last box is no answer, a boxed percent or degree is read inline,
    #: the last-number fallback reads LaTeX fractions and skips exponents, indices and arguments
    revision = 2

    def __init__(self, fallback_last_number: bool = False, **limits):
        super().__init__(**limits)
        self.fallback_last_number = _flag("fallback_last_number", fallback_last_number)
        # it warns that its own timeouts are off (ours wraps the whole check instead), from the
        # first parse on
        logging.getLogger("math_verify").setLevel(logging.ERROR)
        # parse once before the checking child forks: math-verify loads its LaTeX parser on
        # first use (about a second), which every forked child would otherwise pay again
        _parse_boxed("1")

    def _options(self) -> dict:
        return {"fallback_last_number": self.fallback_last_number}

    def _answer(self, completion: str) -> tuple[str | None, str]:
        """The answer to check and how it was found (the last box, else the last number)."""
        answer, method = last_boxed(completion), "boxed"
        if answer is None and self.fallback_last_number:
            answer, method = last_number(completion), "last_number"
        return answer, method

    def _run_limited(self, completion, ground_truth, row) -> CheckResult:
        # An integer answer against an integer ground truth (every DAPO-Math-17k task, the tiny
        # regime) is decided here, without the checking child: math-verify's verdict on two
        # integers is their equality (tests/test_rollout_verifiers.py checks the agreement).
        # Linear regexes on a length-capped completion: no time limit needed.
        gold = _integer_truth(ground_truth)
        if gold is not None:
            answer, method = self._answer(completion)
            if answer is None:
                return CheckResult(0.0, None)
            if _SHORT_INTEGER_RE.fullmatch(answer):
                return CheckResult(1.0 if int(answer) == int(gold) else 0.0, method)
        return super()._run_limited(completion, ground_truth, row)

    def truth_problem(self, ground_truth: Any) -> str | None:
        # an integer ground truth is always readable (math-verify parses it to an Integer):
        # decided here, without a round trip to the checking child for each distinct truth
        if _integer_truth(ground_truth) is not None:
            return None
        return super().truth_problem(ground_truth)

    def _truth_problem(self, ground_truth) -> str | None:
        if not _comparable(_parse_gold(str(ground_truth).strip())):
            return f"math-verify cannot read the ground truth {ground_truth!r} as a math answer"
        return None

    def _check(self, completion, ground_truth, row) -> CheckResult:
        from math_verify import verify

        # the ground truth is checked first, so a bad one is reported even when no answer is found
        gold = _parse_gold(str(ground_truth).strip())
        if not _comparable(gold):
            raise ValueError(f"math-verify cannot read the ground truth {ground_truth!r} as a math answer")
        answer, method = self._answer(completion)
        if answer is None:
            return CheckResult(0.0, None)
        if len(answer) > MAX_ANSWER_CHARS:
            return CheckResult(0.0, method, f"answer longer than {MAX_ANSWER_CHARS} chars")
        if max_nesting(answer) > MAX_NESTING:
            return CheckResult(0.0, method, f"answer nested deeper than {MAX_NESTING}")
        # our time limit wraps the whole check; math-verify's own alarms would reset it
        pred = _parse_answer(answer)
        if not pred:
            return CheckResult(0.0, method)
        return CheckResult(1.0 if verify(gold, pred, timeout_seconds=None) else 0.0, method)


# Parsing dominates a check (math-verify ~0.4 ms per expression, the comparison ~0.01 ms), and
# ground truths and short answers repeat across rollouts and rows: parses are cached (the
# results are immutable sympy values; the cache lives in the checking process).
@functools.lru_cache(maxsize=1 << 16)
def _parse_boxed(text: str):
    from math_verify import parse

    return parse(f"\\boxed{{{text}}}", parsing_timeout=None)


@functools.lru_cache(maxsize=1 << 16)
def _parse_answer(text: str):
    """math-verify's reading of a boxed answer; read as inline math (``$...$``) when the box
    yields no value, as a ground truth is (:func:`_parse_gold`): math-verify 0.9 reads
    ``\\boxed{50\\%}`` and ``\\boxed{45°}`` as raw text only, so a right answer written with a
    percent or degree sign scored 0 against the truth ``50`` or ``45``."""
    boxed = _parse_boxed(text)
    if _comparable(boxed):
        return boxed
    from math_verify import parse

    inline = parse(f"${text}$", parsing_timeout=None)
    return inline if _comparable(inline) else boxed


@functools.lru_cache(maxsize=1 << 14)
def _parse_gold(text: str):
    """math-verify's reading of a ground truth (stripped text): a list whose non-string items
    are the parsed answers (a list of strings alone means it fell back to the raw text)."""
    from math_verify import parse

    if "\\boxed" in text:
        return parse(text, parsing_timeout=None)
    boxed = _parse_boxed(text)
    return boxed if _comparable(boxed) else parse(f"${text}$", parsing_timeout=None)


def _comparable(parsed) -> bool:
    """Whether math-verify parsed a value (not only kept the raw text) from a ground truth."""
    return any(not isinstance(item, str) for item in parsed or [])


# ----------------------------------------------------------------------------- answer tag

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def last_answer_tag(text: str) -> str | None:
    matches = _ANSWER_RE.findall(text)
    return matches[-1] if matches else None


class AnswerTagVerifier(Verifier):
    """The paper's logic reward: exact match of the text inside the last ``<answer>`` tags.

    :param normalize: compare lists and grids by structure, ignoring whitespace and the quote
        style (``['a', 'b']`` == ``["a","b"]``; ``[[1,2],[3,4]]`` == ``"1 2\\n3 4"``). Off: the
        stripped text must equal the ground truth (non-string ground truths as Python repr).
    :param ignore_case: compare letters case-insensitively (GURU's own ordering and graph
        rewards lowercase the answer).
    """

    name = "answer_tag"

    def __init__(self, normalize: bool = False, ignore_case: bool = False, **limits):
        super().__init__(**limits)
        self.normalize = _flag("normalize", normalize)
        self.ignore_case = _flag("ignore_case", ignore_case)

    def _options(self) -> dict:
        return {"normalize": self.normalize, "ignore_case": self.ignore_case}

    def _check(self, completion, ground_truth, row) -> CheckResult:
        answer = last_answer_tag(completion)
        if answer is None:
            return CheckResult(0.0, None)
        if len(answer) > MAX_ANSWER_CHARS:
            return CheckResult(0.0, "tag", f"answer longer than {MAX_ANSWER_CHARS} chars")
        if self.normalize:
            if max_nesting(answer) > MAX_NESTING:
                return CheckResult(0.0, "tag", f"answer nested deeper than {MAX_NESTING}")
            equal = canonical_answer(answer, self.ignore_case) == canonical_answer(ground_truth, self.ignore_case)
        else:
            gold = (ground_truth if isinstance(ground_truth, str) else repr(ground_truth)).strip()
            answer = answer.strip()
            equal = answer.lower() == gold.lower() if self.ignore_case else answer == gold
        return CheckResult(1.0 if equal else 0.0, "tag")


def canonical_answer(value: Any, ignore_case: bool = False) -> Any:
    """Whitespace- and quote-insensitive form of a list, grid or plain answer (and
    case-insensitive with ``ignore_case``)."""
    if isinstance(value, str):
        value = _parse_structure(value.strip())
    if isinstance(value, dict):
        return tuple(sorted((str(k).strip(), canonical_answer(v, ignore_case)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(canonical_answer(v, ignore_case) for v in value)
    text = " ".join(value.strip().strip("'\"").split()) if isinstance(value, str) else str(value)
    return text.lower() if ignore_case else text


def _parse_structure(text: str) -> Any:
    if text[:1] in "[({":
        for loader in (json.loads, ast.literal_eval):
            try:
                return loader(text)
            except (ValueError, SyntaxError, TypeError):
                continue
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if len(lines) > 1:  # a grid written as rows of tokens
        return lines
    return text


# ----------------------------------------------------------------------------- dapo

#: verl's DAPO reward reads only the completion's last characters (MATH-500's longest answer is 159)
DAPO_TAIL_CHARS = 300
_DAPO_ANSWER_RE = re.compile(r"answer\s*:\s*([^\n]+)", re.IGNORECASE)
#: Literal rewrites of an answer, in the order they apply (each sees the previous one's text):
#: articles, dollar signs and spaces out, ``mbox`` read as ``text``, "and" as a comma, then units
#: and typographic marks removed.
_DAPO_REWRITES = (
    ("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), ("\\ ", ""), (" ", ""), ("mbox", "text"),
    (",\\text{and}", ","), ("\\text{and}", ","), ("\\text{m}", "\\text{}"),
    *((unit, "") for unit in (
        "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue", "points",
        "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals", "edges", "students",
        "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3",
        "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"', "\\dots")),
)
#: Then, in order: the first ``$...$`` of a line is what counts; ``\text{}``, ``\textbf{}``,
#: ``\overline{}`` and ``\boxed{}`` (to the line's last brace) unwrapped; TeX shorthand
#: (``\frac12``, ``\sqrt2``) given its braces.
_DAPO_PATTERNS = tuple((re.compile(pattern), replacement) for pattern, replacement in (
    (r".*?\$(.*?)\$.*", r"$\1$"),
    (r"\\text\{(.*?)\}", r"\1"),
    (r"\\textbf\{(.*?)\}", r"\1"),
    (r"\\overline\{(.*?)\}", r"\1"),
    (r"\\boxed\{(.*)\}", r"\1"),
    (r"frac([^{])(.)", r"frac{\1}{\2}"),
    (r"sqrt([^{])", r"sqrt{\1}"),
))


def dapo_normal_form(answer: str) -> str:
    """An answer as verl's DAPO reward compares it (Minerva's normalization): what follows the
    last ``=``, rewritten (:data:`_DAPO_REWRITES`, :data:`_DAPO_PATTERNS`), dollar signs dropped,
    a comma-grouped integer without its commas, stripped."""
    answer = answer.split("=")[-1]
    for before, after in _DAPO_REWRITES:
        answer = answer.replace(before, after)
    for pattern, replacement in _DAPO_PATTERNS:
        answer = pattern.sub(replacement, answer)
    answer = answer.replace("$", "")
    if answer.replace(",", "").isdigit():
        answer = answer.replace(",", "")
    return answer.strip()


class DapoVerifier(Verifier):
    """The reward verl gives a DAPO-Math-17k row (``data_source`` ``math_dapo``, ``math``, ``aime*``;
    ``verl/utils/reward_score/math_dapo.py``): in the completion's last 300 characters, the last
    line of the form ``Answer: X`` (any case, spaces around the colon), normalized as Minerva's
    evaluation does (:func:`dapo_normal_form`), equal as text to the normalized ground truth.
    verl's score is +1 / -1; the pass is its ``acc``, 1 / 0. One difference by design: a
    completion with no ``Answer:`` line scores 0, where verl compares the text ``[INVALID]``."""

    name = "dapo"

    def check(self, completion: str, ground_truth: Any, row: dict | None = None) -> CheckResult:
        # only the tail is read, as verl reads it: the length limit never cuts what decides the reward
        if isinstance(completion, str):
            completion = completion[-DAPO_TAIL_CHARS:]
        return super().check(completion, ground_truth, row)

    def _run_limited(self, completion, ground_truth, row) -> CheckResult:
        # string rewrites of at most 300 characters: decided here, without the checking child
        return self._check(completion, ground_truth, row)

    def truth_problem(self, ground_truth: Any) -> str | None:
        # decided here as the checks are, without the checking child
        if ground_truth is None or not dapo_normal_form(str(ground_truth)):
            return (f"the ground truth {ground_truth!r} is empty once normalized (verl's DAPO reward drops units and "
                    "marks): every answer would be compared with nothing")
        return None

    def _check(self, completion, ground_truth, row) -> CheckResult:
        found = None
        for found in _DAPO_ANSWER_RE.finditer(completion):
            pass
        if found is None:
            return CheckResult(0.0, None)
        equal = dapo_normal_form(found.group(1)) == dapo_normal_form(str(ground_truth))
        return CheckResult(1.0 if equal else 0.0, "answer_line")


# ----------------------------------------------------------------------------- custom

#: A custom verifier spec's key for its module file's sha256 (recorded since 2026-11-27).
SOURCE_DIGEST = "source_sha256"


class CustomVerifier(Verifier):
    """Any ``module:function`` taking ``(completion, ground_truth, row)`` and returning [0, 1].

    An exception raised inside the function scores 0.0 with a logged reason (model output can
    be anything); a return value outside [0, 1] is a bug in the function and raises. Its spec
    holds the sha256 of the function's module file, so rewards cached before the module was
    edited are sampled afresh. Rows are cached and repeated rows merged by their prompt and
    ground truth: a row's other fields must not change the score (two such rows share one).
    """

    name = "custom"

    def __init__(self, function: str, **limits):
        super().__init__(**limits)
        self.function = function
        self._fn = load_function(function)
        self._source_sha256 = _source_digest(self._fn)

    def _options(self) -> dict:
        return {"function": self.function, **({SOURCE_DIGEST: self._source_sha256} if self._source_sha256 else {})}

    def _check(self, completion, ground_truth, row) -> CheckResult:
        try:
            value = self._fn(completion, ground_truth, row)
        except (RecursionError, MemoryError):  # the base class scores these 0 with a reason
            raise
        except Exception as exc:  # noqa: BLE001 - user code on model output; reason is logged
            return CheckResult(0.0, "custom", f"{self.function} raised {type(exc).__name__}: {exc}")
        score = float(value)
        if not 0.0 <= score <= 1.0:
            raise ValueError(f"custom verifier {self.function} returned {value!r}, outside [0, 1]")
        return CheckResult(score, "custom")

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_fn")
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._fn = load_function(self.function)


def _source_digest(fn: Callable) -> str | None:
    """The sha256 of the file ``fn`` is defined in (its module: helpers it calls count too), or
    None where it has no source file (a builtin, a function made at run time)."""
    import inspect

    from trajval_ops.canonical import file_sha256

    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        return None
    return file_sha256(path) if path and os.path.isfile(path) else None


def load_function(spec: str) -> Callable:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"custom verifier function must be 'module:function', got {spec!r}")
    fn = getattr(importlib.import_module(module_name), attr, None)
    if not callable(fn):
        raise ValueError(f"custom verifier {spec!r}: {attr!r} is not a callable in {module_name}")
    return fn


#: every verifier, by its name in recipes
VERIFIERS: dict[str, type[Verifier]] = {
    MathVerifier.name: MathVerifier,
    AnswerTagVerifier.name: AnswerTagVerifier,
    DapoVerifier.name: DapoVerifier,
    CustomVerifier.name: CustomVerifier,
}


def verifier_revision(name: str) -> int:
    """How the named verifier's release reads answers (:attr:`Verifier.revision`): what a result
    scored by it depends on beside its name and options. A custom function is revision 1."""
    if name not in VERIFIERS:
        raise ValueError(f"unknown verifier {name!r}; choose one of {sorted(VERIFIERS)}")
    return VERIFIERS[name].revision


#: What a record that holds no verifier revision was read by: the math verifier's revision 2
#: (3c3f6c1) came before results recorded the revision (80538c2), both at version 0.1.0, so such a
#: record's reading is not known.
UNRECORDED_REVISION = "records without one were read by revision 1 or 2, which cannot be told apart"


def unrecorded_revision(name: str) -> int | None:
    """The revision of the ``name`` verifier that read what a record holding no ``verifier_revision``
    holds: 1 for a verifier never revised, None (not known: 1 or 2, :data:`UNRECORDED_REVISION`)
    for the math verifier."""
    return None if name == MathVerifier.name else 1


def recorded_revision(record: Mapping, name: str) -> int | None:
    """The revision of the ``name`` verifier a record (a manifest, a ``protocol.json``) was read by:
    its ``verifier_revision``, else :func:`unrecorded_revision`."""
    return record.get("verifier_revision", unrecorded_revision(name))


def unrecorded_reading(name: str) -> str:
    """``records no revision of the <name> verifier (...); this release reads answers as revision
    <n>``: the words of a refusal of work whose record holds no revision (:func:`unrecorded_revision`
    None) where it would go on under this release's reading."""
    return (f"records no revision of the {name} verifier ({UNRECORDED_REVISION}); this release reads answers as "
            f"revision {verifier_revision(name)}")


def revision_record(revision: int) -> dict[str, int]:
    """``{"verifier_revision": revision}`` past a verifier's first revision, else empty: an identity
    (a rollout cache's key, a validation run's hash, a unit's spec) holds it beyond 1, so what was
    recorded before revisions existed keeps its identity, and what an earlier reading scored does not."""
    return {"verifier_revision": revision} if revision > 1 else {}


def build_verifier(name: str, **options) -> Verifier:
    """A verifier by name ("math", "answer_tag", "dapo", "custom") with its options."""
    if name not in VERIFIERS:
        raise ValueError(f"unknown verifier {name!r}; choose one of {sorted(VERIFIERS)}")
    return VERIFIERS[name](**options)
