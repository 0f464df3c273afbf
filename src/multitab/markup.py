"""Text from data or params (dataset, task, column, stage and run-group names; failure messages that quote
them) written into Markdown or HTML: shown as text, never read as markup. Each writer escapes what it
quotes with these, once, where it writes (flows/summary.py, the report's Markdown, the entry page).

Tables a person may open in a spreadsheet (every CSV we write, the Markdown tables) hold such names too: a cell
that starts with `=`, `+`, `-` or `@` (or a tab or carriage return) is a formula to Excel, LibreOffice and
Google Sheets (`=HYPERLINK(...)` as a task name runs when the file is opened). `spreadsheet_cell` makes such a
text cell start with an apostrophe (OWASP's advice: the cell shows as text); numbers, and text that is a
number such as `-0.12` or `+1.5`, are left as they are. `csv_text` and `spreadsheet_frame` apply it to every
cell and header of a table; multitab.files.io.write_csv writes a DataFrame through it.
"""

from __future__ import annotations

import csv
import html
import io
import re
from collections.abc import Iterable
from typing import Any

# Markdown's code, emphasis, link and table characters; `_` only where it can open or close emphasis (at a
# word's edge: `acs_income` stays as it is, as CommonMark reads it).
_MARKDOWN = re.compile(r"[\\`*\[\]|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
# what starts an HTML tag or an entity (`&` and `>` elsewhere are text: `F-not-T & T-not-T`, `Δm > 0`)
_HTML = re.compile(r"<|&(?=#?[A-Za-z0-9]+;)")


def md_text(value: object) -> str:
    """`value` as literal text in Markdown, a table cell included: `<` (and `&` where it would start an entity)
    as HTML entities (Markdown renderers pass raw HTML through: a quoted `<script>` would run), Markdown's
    special characters backslash-escaped, line breaks as spaces (a table row is one line)."""
    text = _HTML.sub(lambda m: "&lt;" if m.group() == "<" else "&amp;", " ".join(str(value).splitlines()))
    return _MARKDOWN.sub(lambda m: "\\" + m.group(), text)


def html_text(value: object) -> str:
    """`value` as literal text in HTML, attribute values included."""
    return html.escape(str(value), quote=True)


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_cell(value: Any) -> Any:
    """`value`, or a text cell a spreadsheet would run as a formula with a leading apostrophe (module docstring)."""
    if not isinstance(value, str) or not value.startswith(_FORMULA_START):
        return value
    try:
        float(value)  # -0.12, +1.5, -inf: a number, not a formula
    except ValueError:
        return "'" + value
    return value


def md_cell(value: Any) -> str:
    """A name in a Markdown table cell: spreadsheet-safe (`spreadsheet_cell`), then literal text (`md_text`)."""
    return md_text(spreadsheet_cell(value))


def csv_text(rows: Iterable[Iterable[Any]]) -> str:
    """`rows` (the header first) as CSV text, every cell through `spreadsheet_cell`."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for row in rows:
        writer.writerow([spreadsheet_cell(v) for v in row])
    return buf.getvalue()


def spreadsheet_frame(frame: Any) -> Any:
    """A pandas DataFrame with its column names and text cells through `spreadsheet_cell` (numbers unchanged)."""
    out = frame.copy()
    for name in frame.select_dtypes(include=["object", "string", "category"]).columns:
        out[name] = frame[name].astype(object).map(spreadsheet_cell)
    return out.rename(columns=spreadsheet_cell)
