"""Text from data or params (dataset, task, column, stage and run-group names; failure messages that quote
them) written into Markdown or HTML: shown as text, never read as markup. Each writer escapes what it
quotes with these, once, where it writes (flows/summary.py, the report's Markdown, the entry page)."""

from __future__ import annotations

import html
import re

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
