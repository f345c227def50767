"""The README's demo figures against the demo's log (``dj-process --config recipes/demo_trajval.yaml``):
every number the README's demo passage prints must equal the log's at the README's precision.

The passage is the README's text between ``<!-- demo figures -->`` and ``<!-- end of demo figures -->``
where it has those markers, else the paragraph that says "N of the M ... positive scores". Its
wording may change; its numbers are read by pattern: "N of the M ... positive", "median SE X",
"Cochran's Q X on D degrees of freedom", "G of F families ... more than", "`family` +D (z +Z)" or
"`family` +D (+Z)", and the prior's cost "C completions: probe P, each pass E". The log's figures
come from the learnability mapper's lines (trajval_ops.summary): its rollout noise record, its
per-group table, its sentence on the groups and Cochran's Q, and its cost line.
"""

from __future__ import annotations

import ast
import re

_MARKED = re.compile(r"<!--\s*demo figures\b[^>]*-->(.*?)<!--\s*end of demo figures\s*-->", re.S | re.I)
_NUMBER = r"[+-]?\d[\d,]*(?:\.\d+)?"

#: README patterns: figure name(s) -> pattern whose groups are those figures
README_PATTERNS = {
    ("positive_scores_within_noise", "rows_with_positive_score"):
        rf"({_NUMBER})\s+of\s+the\s+({_NUMBER})\s+(?:\w+\s+){{0,4}}?(?:with\s+a\s+)?positive",
    ("se_delta_median",): rf"median\s+SE(?:\s+of\s+delta)?[\s|:=]*({_NUMBER})",
    ("cochran_q", "df"): rf"Cochran's\s+Q[\s|:=]*(?:of\s+)?({_NUMBER})\s+on\s+({_NUMBER})\s+degrees",
    ("groups_beyond_noise", "groups"):
        rf"({_NUMBER})\s+of\s+({_NUMBER})\s+(?:task\s+)?(?:families|groups)\s+(?:\w+\s+){{0,2}}?more\s+than",
    ("prior_completions", "probe_completions", "pass_completions"):
        rf"({_NUMBER})\s+completions:\s+probe\s+({_NUMBER}),\s+each\s+pass\s+({_NUMBER})",
}
_FAMILY = re.compile(rf"`(\w+)`\s*:?\s+({_NUMBER})\s+\((?:z\s*=?\s*)?({_NUMBER})\)")
#: the figures a README passage must give (the issue's: within-noise count, Q, per-family z)
REQUIRED = ("positive_scores_within_noise", "rows_with_positive_score", "cochran_q", "df")


def readme_passage(readme: str) -> str:
    """The README's demo passage (see the module docstring)."""
    marked = _MARKED.search(readme)
    if marked:
        return marked.group(1)
    for paragraph in re.split(r"\n\s*\n", readme):
        if re.search(r"\bof\s+the\s+[\d,]+\s+(?:\w+\s+){0,4}?positive", paragraph):
            return paragraph
    return ""


def _value(text: str) -> tuple[float, int]:
    """A printed number and its decimals."""
    text = text.replace(",", "")
    return float(text), len(text.split(".")[1]) if "." in text else 0


def readme_figures(passage: str) -> dict[str, tuple[float, int]]:
    """``{figure: (value, decimals printed)}``; per-family figures as ``delta:<family>``, ``z:<family>``."""
    figures = {}
    for names, pattern in README_PATTERNS.items():
        found = re.search(pattern, passage, re.S)
        if found:
            figures.update({name: _value(text) for name, text in zip(names, found.groups())})
    for family, delta, z in _FAMILY.findall(passage):
        figures[f"delta:{family}"], figures[f"z:{family}"] = _value(delta), _value(z)
    return figures


def log_figures(log: str) -> dict[str, float]:
    """The same figures from the demo's log (stderr of dj-process)."""
    figures = {}
    noise = re.search(r"rollout noise (\{[^}]*\})", log)
    if noise:
        figures.update({k: float(v) for k, v in ast.literal_eval(noise.group(1)).items()})
    cochran = re.search(r"Cochran's Q ([\d.]+) on (\d+) degrees of freedom", log)
    if cochran:
        figures["cochran_q"], figures["df"] = float(cochran.group(1)), float(cochran.group(2))
    beyond = re.search(r"(\d+) of (\d+) groups more than", log)
    if beyond:
        figures["groups_beyond_noise"], figures["groups"] = float(beyond.group(1)), float(beyond.group(2))
    table = re.search(r"mean delta by .*?\n(group .*?)(?:\n\S+ \S+ \| |\Z)", log, re.S)
    for line in (table.group(1).splitlines()[1:] if table else []):
        cells = line.split()
        if len(cells) == 8:  # group rows r_early r_late delta SE z weight
            figures[f"delta:{cells[0]}"], figures[f"z:{cells[0]}"] = float(cells[4]), float(cells[6])
    cost = re.search(r"prior cost ([\d,]+) completions.*?\(probe ([\d,]+) completions.*?early ([\d,]+) completions",
                     log)
    if cost:
        figures.update(zip(("prior_completions", "probe_completions", "pass_completions"),
                           (float(g.replace(",", "")) for g in cost.groups())))
    return figures


def demo_figure_mismatches(readme: str, log: str) -> list[str]:
    """Each README demo figure that differs from the log at the README's precision (half a unit
    of its last printed digit), each one the log lacks, and each required one the README lacks."""
    printed, logged = readme_figures(readme_passage(readme)), log_figures(log)
    problems = [f"the README's demo passage gives no {name}" for name in REQUIRED if name not in printed]
    if not any(name.startswith("z:") for name in printed):
        problems.append("the README's demo passage gives no family's z")
    for name, (value, decimals) in printed.items():
        if name not in logged:
            problems.append(f"{name}: README {value}, not in the demo's log")
        elif abs(value - logged[name]) > 0.5 * 10 ** -decimals + 1e-9:
            problems.append(f"{name}: README {value:.{decimals}f}, the demo's log {logged[name]}")
    return problems
