"""The one HTML table of the package's reports (``trajval report``, ``trajval validate``)."""

from __future__ import annotations

import html
import math
from typing import Any, Sequence


def html_cell(value: Any, number_format: str = ".4g") -> str:
    """A value as table-cell text: numbers by ``number_format`` (NaN as ``nan``), a 2-element
    list of numbers (an interval) as ``[low, high]``, anything else as escaped text."""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else format(value, number_format)
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, float) for v in value):
        return f"[{html_cell(value[0], number_format)}, {html_cell(value[1], number_format)}]"
    return html.escape(str(value))


def html_table(header: Sequence[str], rows: Sequence[Sequence[Any]], number_format: str = ".4g") -> str:
    """``<table>`` with one header row and a row per sequence in ``rows``."""
    head = "".join(f"<th>{html.escape(name)}</th>" for name in header)
    body = "".join("<tr>" + "".join(f"<td>{html_cell(v, number_format)}</td>" for v in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
