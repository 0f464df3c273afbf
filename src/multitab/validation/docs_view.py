"""Great Expectations' Data Docs pages with every name shown as text: the view our site renders its suite and
result pages with (runner.py's site config names it: `site_section_builders.<section>.view`).

GX's page templates do not escape what they print (its Jinja environment autoescapes only `.html` / `.xml`
templates, and its are `.j2`): a column's name goes raw into the page's navigation, its section header and
the observed value of `expect_table_columns_to_match_ordered_list`, so a column or task named
`<script>alert(1)</script>` (a declared dataset's file decides its names) runs in the reader's browser, and
the category values of a failed check are printed the same way. GX escapes only the string parameters of its
templates.

`EscapedPageView` renders the same document with every piece of text escaped before GX's templates see it:
every string of the page's content (section names, headers, table cells, lists), each template's
text but for the two bits of markup GX writes into templates itself (`<br>`, the collapse triangle), and the
template parameters GX leaves raw (lists, such as a table's column list). Styling (classes, attributes,
styles, tags), the parameters GX escapes itself and Markdown (GX renders it with mistune, which escapes raw
HTML) are left as they are, so a page whose names hold no markup shows what GX's shows (quotes in text become
character references, which a browser shows as quotes).
"""

from __future__ import annotations

import html
from typing import Any

from great_expectations.render.view import DefaultJinjaPageView

# GX's own markup inside template text (column_section_renderer's collapse header; a renderer's line break)
_GX_MARKUP = ('<span class="mr-3 triangle"></span>', "<br>")
# keys whose values are page structure, not text, kept as GX made them; and Markdown, which GX renders with
# mistune, escaping raw HTML itself (escaped here as well, an entity would show as its code)
_STRUCTURE = frozenset({"styling", "content_block_type", "tag", "renderer_type", "markdown"})
# template parameters that GX's view itself leaves raw as trusted markup (DefaultJinjaView._TRUSTED_HTML_PARAMS)
_TRUSTED = frozenset(DefaultJinjaPageView._TRUSTED_HTML_PARAMS)


def _text(value: str) -> str:
    return html.escape(value, quote=True)


def _template_text(template: str) -> str:
    text = _text(template)
    for markup in _GX_MARKUP:
        text = text.replace(_text(markup), markup)
    return text


def _param(name: str, value: Any) -> Any:
    """A template parameter: GX escapes strings itself and prints the rest with str(): that rest escaped here."""
    if name in _TRUSTED or isinstance(value, str | int | float | bool) or value is None:
        return value
    return _text(str(value))


def escaped(node: Any) -> Any:
    """`node` (a rendered document as JSON) with its text escaped (module docstring)."""
    if isinstance(node, str):
        return _text(node)
    if isinstance(node, list):
        return [escaped(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    template = isinstance(node.get("template"), str)  # a string template: {template, params, styling, ...}
    for key, value in node.items():
        if key in _STRUCTURE:
            out[key] = value
        elif template and key == "template":
            out[key] = _template_text(value)
        elif template and key == "params" and isinstance(value, dict):
            out[key] = {k: _param(k, v) for k, v in value.items()}
        else:
            out[key] = escaped(value)
    return out


class EscapedPageView(DefaultJinjaPageView):
    """GX's page view over the document with its text escaped (module docstring)."""

    def render(self, document: Any, template: Any = None, **kwargs: Any) -> str:
        self._validate_document(document)
        page = self._get_template(template or self._template)
        return str(page.render(escaped(document.to_json_dict()), **kwargs))
