"""The docs stay true to the code and the committed results: every generated page equals a fresh
generation (a changed declaration, parser or results file without its regenerated page fails), and
every relative link and ``#anchor`` of README.md and docs/ resolves (GitHub's heading anchors)."""

from __future__ import annotations

import difflib
import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate", REPO / "tools" / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_generated_page_is_what_the_generator_writes():
    generate = _generator()
    generated = generate.pages()
    stale = generate.stale_pages(generated)
    diffs = [line for name in stale for line in difflib.unified_diff(
        (REPO / name).read_text(encoding="utf-8").splitlines() if (REPO / name).is_file() else [],
        generated[REPO / name].splitlines(), f"{name} (committed)", f"{name} (generated)", lineterm="", n=1)]
    assert not stale, f"stale generated pages (run python tools/docs/generate.py): {stale}\n" + "\n".join(diffs[:80])


@pytest.fixture
def results_copy(tmp_path, monkeypatch):
    """The generator pointed at a copy of docs/results (and the older results files it reads)."""
    generate = _generator()
    shutil.copytree(REPO / "docs" / "results", tmp_path / "docs" / "results")
    for path in (REPO / "docs").glob("validation_results_*.json"):
        shutil.copy(path, tmp_path / "docs" / path.name)
    monkeypatch.setattr(generate, "REPO", tmp_path)
    monkeypatch.setattr(generate, "RESULTS", tmp_path / "docs" / "results")
    return generate


def test_a_changed_results_file_leaves_its_pages_stale_and_check_mode_fails(results_copy, capsys):
    generate = results_copy
    assert not generate.stale_pages(generate.results_pages())
    path = generate.RESULTS / "priors-2026" / "results.json"
    results = json.loads(path.read_text())
    results["training"]["variance"]["auc_minus_uniform"] += 0.01
    path.write_text(json.dumps(results))
    stale = generate.stale_pages(generate.results_pages())
    assert stale == ["docs/results/index.md", "docs/results/priors-2026/index.md"]
    generate.pages = generate.results_pages  # check mode over the copy's pages alone (a module of this test's own)
    assert generate.main(["--check"]) == 1
    assert "docs/results/priors-2026/index.md" in capsys.readouterr().err


def test_a_run_without_its_machine_and_date_is_refused(results_copy):
    generate = results_copy
    (generate.RESULTS / "long-2026" / "run.yaml").unlink()
    with pytest.raises(ValueError, match=r"docs/results/long-2026.*no run.yaml \(machine, date, commit\)"):
        generate.load_runs()


def test_an_undeclared_config_field_is_refused_not_left_off_the_page():
    import dataclasses

    generate = _generator()

    @dataclasses.dataclass
    class Section:
        declared: int = __import__("trajval_ops.settings", fromlist=["setting"]).setting(1, "a setting.")
        plain: int = 2

    with pytest.raises(ValueError, match=r"\['plain'\] are plain fields"):
        generate.settings_rows(Section)


def test_an_interval_that_reaches_infinity_says_never():
    generate = _generator()
    row = {"break_even_runs": 12.5, "break_even_runs_ci95": [12.5, float("inf")], "net_saved": -22080.0}
    assert generate.break_even_cell(row, False) == "12.5 [12.5, never]"
    assert generate.break_even_cell({"break_even_runs": None, "net_saved": -24000.0}, False) == \
        "never (saves no steps)"
    assert generate.with_interval(3.75, [None, None], ".3g") == "3.75 (no interval)"


# ----------------------------------------------------------------------------- links


def _markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
_HTML = re.compile(r"""<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_EXPLICIT = re.compile(r"""<a\b[^>]*\b(?:id|name)\s*=\s*["']([^"']+)["']|\{:?\s*#([\w-]+)[^}]*\}""")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, inline code removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            lines.append("")
            continue
        lines.append("" if fenced else _INLINE_CODE.sub("", line))
    return lines


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lowercased, punctuation but ``-`` and ``_``
    removed, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a page: its headings' GitHub slugs (a repeated one numbered -1, -2, ...) and
    explicit ones (``<a id=...>``, ``{#id}``)."""
    found, counts = set(), {}
    raw, fenced = path.read_text(encoding="utf-8").splitlines(), False
    for line in raw:
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for match in _EXPLICIT.finditer(line):
            found.add(match.group(1) or match.group(2))
        heading = _HEADING.match(line)
        if heading:
            text = re.sub(r"\s*\{[^}]*\}\s*$", "", heading.group(2))
            slug = github_slug(text)
            found.add(slug if slug not in counts else f"{slug}-{counts[slug]}")
            counts[slug] = counts.get(slug, 0) + 1
    return found


def link_problems(path: Path) -> list[str]:
    """Each relative link of a Markdown file whose file or anchor does not resolve."""
    problems, cache = [], {}
    for number, line in enumerate(_prose_lines(path.read_text(encoding="utf-8")), 1):
        targets = [m.group(1) for m in _LINK.finditer(line)] + [m.group(1) for m in _HTML.finditer(line)]
        targets += [m.group(1) for m in _REFERENCE.finditer(line)]
        for target in targets:
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(REPO)}:{number}: {target}"
            if not resolved.exists():
                problems.append(f"{where}: no such file")
            elif anchor and resolved.suffix == ".md":
                if resolved not in cache:
                    cache[resolved] = anchors(resolved)
                if anchor not in cache[resolved]:
                    problems.append(f"{where}: no heading or anchor '{anchor}' in {resolved.name}")
    return problems


def test_every_relative_link_and_anchor_of_the_docs_resolves():
    problems = [problem for path in _markdown_files() for problem in link_problems(path)]
    assert not problems, "\n".join(problems)


def test_the_link_checker_finds_a_missing_page_and_a_missing_anchor(tmp_path, monkeypatch):
    import tests.test_docs as module

    monkeypatch.setattr(module, "REPO", tmp_path)
    (tmp_path / "a.md").write_text("# Title: `code` and more\n\n## Title: code and more\n\n"
                                   "[ok](#title-code-and-more-1) [ok](b.md#the-b-page) [bad](#nope)\n"
                                   "[missing](c.md) `[in code](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n"
                                   "[bad anchor](b.md#other) [web](https://example.org/x.md)\n")
    (tmp_path / "b.md").write_text("# The B page\n")
    problems = link_problems(tmp_path / "a.md")
    assert [p.split(": ", 1)[0] + ": " + p.split(": ")[1] for p in problems] == [
        "a.md:5: #nope", "a.md:6: c.md", "a.md:11: b.md#other"], problems


# ----------------------------------------------------------------------------- the README's demo figures

#: lines of a demo run's log (dj-process --config recipes/demo_trajval.yaml, 2 cores)
DEMO_LOG = """\
2026-11-28 13:58:06.857 | INFO     | trajval_ops.ops.learnability_mapper:552 - trajval_learnability_mapper: the trajval prior cost 24,000 completions and 84,062 generated tokens (probe 4,800 completions, 16,831 tokens, 391.6 s; early 9,600 completions, 33,333 tokens; late 9,600 completions, 33,898 t ...)
2026-11-28 13:58:06.861 | INFO     | trajval_ops.summary:94 - trajval_learnability_mapper: rollout noise {'se_r_early_median': 0.0786, 'se_r_late_median': 0.0786, 'se_delta_median': 0.1094, 'rows_with_positive_score': 219, 'positive_scores_within_noise': 156, 'z': 2.0}
2026-11-28 13:58:06.865 | WARNING  | trajval_ops.summary:97 - trajval_learnability_mapper: 156 of the 219 rows with a positive score have a gain below 2 standard errors of delta (median SE 0.1094): most of the prior is within the rollout noise of n. Raise n (the endpoint mapper's rollouts) or the probe's training.
2026-11-28 13:58:06.867 | INFO     | trajval_ops.summary:151 - trajval_learnability_mapper: mean delta by extra_info.family (SE from the rollouts; z against the pooled delta +0.0352):
group             rows  r_early   r_late    delta      SE      z  weight
add1                50    0.748    0.824   +0.076   0.017   +2.4   0.243
add2                50    0.364    0.351   -0.013   0.021   -2.3   0.253
add3                50    0.009    0.006   -0.003   0.012   -3.1   0.088
count_digit         50    0.251    0.371   +0.120   0.021   +4.1   0.353
digit_sum           50    0.241    0.231   -0.010   0.020   -2.2   0.292
max                 50    0.974    0.998   +0.024   0.012   -0.9   0.084
mod                 50    0.336    0.410   +0.074   0.019   +2.0   0.288
mul1                50    0.125    0.120   -0.005   0.016   -2.5   0.198
mul2                50    0.021    0.007   -0.014   0.013   -3.9   0.081
reverse             50    0.979    0.991   +0.013   0.013   -1.8   0.090
sort_digits         50    0.414    0.730   +0.316   0.019  +14.5   0.493
sub2                50    0.077    0.110   +0.033   0.017   -0.2   0.272
2026-11-28 13:58:06.869 | INFO     | trajval_ops.summary:155 - trajval_learnability_mapper: the probe's gain differs between values of extra_info.family beyond the rollout noise: 8 of 12 groups more than 2 SE from the pooled delta (Cochran's Q 282.93 on 11 degrees of freedom; about 11 under noise alone)
"""


def test_the_readme_demo_check_reads_the_numbers_strictly_and_the_wording_loosely():
    from tests.demo_figures import demo_figure_mismatches, log_figures

    assert log_figures(DEMO_LOG)["z:sort_digits"] == 14.5 and log_figures(DEMO_LOG)["cochran_q"] == 282.93
    sentence = ("Its log ends with what the prior cost (24,000 completions: probe 4,800, each pass 9,600): per task, "
                "156 of the 219 positive scores are within 2 standard errors of delta (median SE 0.11); per family, "
                "Cochran's Q 282.9 on 11 degrees of freedom: `sort_digits` +0.32 (z +14.5), `count_digit` +0.12 "
                "(+4.1), `mul2` -0.01 (-3.9), `add3` -0.00 (-3.1).")
    assert demo_figure_mismatches(f"# Demo\n\n{sentence}\n\nMore.\n", DEMO_LOG) == []
    assert demo_figure_mismatches(sentence + " 8 of 12 families lie more than 2 SE from it.", DEMO_LOG) == []
    assert demo_figure_mismatches(sentence + " 7 of 12 families lie more than 2 SE from it.", DEMO_LOG) == [
        "groups_beyond_noise: README 7, the demo's log 8.0"]
    reworded = ("<!-- demo figures: compared with the demo's log by the slow suite -->\n| | |\n|---|---|\n"
                "| within noise | 156 of the 219 rows with a positive score |\n| Cochran's Q | 282.93 on 11 degrees of "
                "freedom |\n| `sort_digits`: +0.316 (z = +14.5) | |\n<!-- end of demo figures -->")
    assert demo_figure_mismatches(reworded, DEMO_LOG) == []
    stale = sentence.replace("156 of the 219", "155 of the 218").replace("z +14.5", "z +14.4")
    assert demo_figure_mismatches(stale, DEMO_LOG) == [
        "positive_scores_within_noise: README 155, the demo's log 156.0",
        "rows_with_positive_score: README 218, the demo's log 219.0", "z:sort_digits: README 14.4, the demo's log 14.5"]
    assert "the README's demo passage gives no cochran_q" in demo_figure_mismatches(
        sentence.replace("Cochran's Q", "Q"), DEMO_LOG)


def test_an_operator_parameters_union_reads_alike_in_either_order():
    from typing import Optional, Union

    generate = _generator()
    assert (generate.annotation_text(Optional[list[Union[int, str]]])
            == generate.annotation_text(Optional[list[Union[str, int]]])
            == ("a list (a string or an integer each) or null", ""))
