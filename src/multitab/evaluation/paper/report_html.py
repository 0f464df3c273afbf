"""Markdown as pages a browser shows offline: results/report.html (results/report.md), the committed study
records' pages (study_pages.py), and the page shell the entry page (results/index.html) shares with them.

The Markdown is rendered by markdown-it-py (CommonMark with GitHub's tables), with raw HTML off: names are
escaped once, as Markdown text, by `multitab.markup.md_text`, and an HTML tag in a name stays text. The style
sheet is inline and a page loads nothing. Where a page is written elsewhere than its Markdown (`Links`), every
relative link and image is re-based onto the page's folder, a link to a Markdown file that has a page of its own
goes to that page, and a file named in the text (`docs/study.md`, `results/tables/comparison_with_paper.csv`)
becomes a link where that file exists. Every table sits in a wrapper that scrolls sideways, so a wide table
never widens the page.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from multitab.markup import html_text

# One sheet for every page: readable width, tables that scroll sideways inside their wrapper instead of
# widening the page, banners (blockquotes) that stand out, figures scaled to the column.
STYLE = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1f2328;
       margin: 0; background: #fff; }
main { max-width: 1200px; margin: 0 auto; padding: 16px 24px 48px; overflow-wrap: anywhere; }
h1 { font-size: 1.7em; border-bottom: 1px solid #d0d7de; padding-bottom: .3em; }
h2 { font-size: 1.35em; border-bottom: 1px solid #d0d7de; padding-bottom: .2em; margin-top: 1.6em; }
h3 { font-size: 1.1em; margin-top: 1.3em; }
code { font: 13px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f3f4f6;
       padding: .1em .3em; border-radius: 4px; }
pre { overflow-x: auto; }
.table-wrap { overflow-x: auto; max-width: 100%; margin: .8em 0; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; vertical-align: top; overflow-wrap: normal; }
th { background: #f3f4f6; text-align: left; }
tbody tr:nth-child(even) { background: #f8f9fb; }
blockquote { margin: .8em 0; padding: .6em 1em; background: #fff8e1; border-left: 5px solid #d4a017;
             border-radius: 4px; }
blockquote p { margin: .3em 0; }
/* every figure is 4.2 in high: one height limit shows their panels at one scale */
img { max-width: 100%; max-height: 440px; width: auto; height: auto; border: 1px solid #eaeef2; }
figure { margin: 1em 0; }
figcaption { font-size: 13px; color: #57606a; }
.figures { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(520px, 100%), 1fr)); gap: 16px; }
.answer { border: 2px solid #1a7f37; border-radius: 6px; background: #f0fff4; padding: 4px 20px 12px;
          margin: 12px 0 20px; }
.answer h2 { margin-top: .6em; border-bottom-color: #aceebb; }
.answer .figures { grid-template-columns: minmax(0, 2fr) minmax(0, 1fr); }  /* Figure 5: three panels */
.nav { font-size: 13px; color: #57606a; }
a { color: #0969da; }
"""
TABLE_WRAP = '<div class="table-wrap">'
# A file named in running text: a path with a folder (`docs/study.md`, `results/tables/x.csv`) or a top-level
# file with a known extension (`params.yaml`), with an optional anchor; linked only where the file exists.
_FILE_REF = re.compile(r"(?<![\w/.:-])((?:\.\./)*(?:[\w.-]+/)+[\w.-]*\w|[\w-]+\.(?:md|yaml|lock|csv|json|html))"
                       r"(#[\w-]+)?")
_ADDRESS = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|//|#)")  # a scheme, a protocol-relative address, an anchor


@dataclass(frozen=True)
class Links:
    """Where a page's Markdown and the page itself are: `source`, the Markdown's folder (its relative links
    and images resolve there); `page`, the HTML file written; `root`, the project root (a file named in the
    text is looked up there too; None: only beside the Markdown); `pages`, Markdown files -> their own pages
    (a link to one goes to its page); `fresh`, files written in this run that may still wait for their
    all-or-nothing rename (they count as existing)."""

    source: Path
    page: Path
    root: Path | None = None
    pages: Mapping[Path, Path] = field(default_factory=dict)
    fresh: Collection[Path] = ()

    def exists(self, path: Path) -> bool:
        return path.is_file() or path in self.fresh

    def href(self, target: Path, anchor: str = "") -> str:
        target = self.pages.get(target, target)
        return os.path.relpath(target, self.page.parent).replace(os.sep, "/") + anchor

    def rebase(self, ref: str) -> str:
        """A link or image of the Markdown, relative to its folder, as the page's (addresses as they are)."""
        if not ref or _ADDRESS.match(ref):
            return ref
        path, sep, anchor = ref.partition("#")
        return self.href(Path(os.path.normpath(self.source / path)), sep + anchor)

    def file_ref(self, text: str) -> Path | None:
        """The existing file `text` names, beside the Markdown or under the root; None if none."""
        for base in (self.source, self.root):
            if base is not None:
                path = Path(os.path.normpath(base / text))
                if self.exists(path):
                    return path
        return None


def _link_tokens(text: str, links: Links) -> list[Token] | None:
    """`text` as text and link tokens, each existing file it names a link; None when it names none."""
    out: list[Token] = []
    last = 0
    for m in _FILE_REF.finditer(text):
        path = links.file_ref(m.group(1))
        if path is None:
            continue
        if m.start() > last:
            out.append(Token("text", "", 0, content=text[last:m.start()]))
        out += [Token("link_open", "a", 1, attrs={"href": links.href(path, m.group(2) or "")}),
                Token("text", "", 0, content=m.group(0)), Token("link_close", "a", -1)]
        last = m.end()
    if not out:
        return None
    if last < len(text):
        out.append(Token("text", "", 0, content=text[last:]))
    return out


def linked_text(escaped: str, links: Links) -> str:
    """HTML text (already escaped) with every existing file it names made a link (the entry page's banners)."""
    def link(m: re.Match[str]) -> str:
        path = links.file_ref(m.group(1))
        if path is None:
            return m.group(0)
        return f'<a href="{html_text(links.href(path, m.group(2) or ""))}">{m.group(0)}</a>'
    return _FILE_REF.sub(link, escaped)


def _relink(children: list[Token], links: Links) -> list[Token]:
    """An inline block's tokens with links and images re-based and file names outside links made links."""
    out: list[Token] = []
    depth = 0  # inside a link: its text stays as it is
    for tok in children:
        if tok.type == "link_open":
            tok.attrSet("href", links.rebase(str(tok.attrGet("href") or "")))
            depth += 1
        elif tok.type == "link_close":
            depth -= 1
        elif tok.type == "image":
            tok.attrSet("src", links.rebase(str(tok.attrGet("src") or "")))
        elif depth == 0 and tok.type == "text" and (split := _link_tokens(tok.content, links)):
            out += split
            continue
        elif depth == 0 and tok.type == "code_inline" and (m := _FILE_REF.fullmatch(tok.content)) \
                and (path := links.file_ref(m.group(1))) is not None:
            out += [Token("link_open", "a", 1, attrs={"href": links.href(path, m.group(2) or "")}), tok,
                    Token("link_close", "a", -1)]
            continue
        out.append(tok)
    return out


def _wrapped(name: str) -> Any:
    """A renderer rule that puts every table in its scrolling wrapper."""
    def rule(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
        tag = self.renderToken(tokens, idx, options, env)
        return f"{TABLE_WRAP}\n{tag}" if name == "table_open" else f"{tag}</div>\n"
    return rule


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
    for name in ("table_open", "table_close"):
        md.add_render_rule(name, _wrapped(name))
    return md


def markdown_html(text: str, links: Links | None = None) -> str:
    """CommonMark with tables and strikethrough as HTML; raw HTML in `text` is shown as text; tables in a
    scrolling wrapper; `links`: where the Markdown and the page are (None: the page sits beside it and no
    file name in the text becomes a link)."""
    md = _parser()
    tokens = md.parse(text)
    if links is not None:
        for tok in tokens:
            if tok.type == "inline" and tok.children:
                tok.children = _relink(tok.children, links)
    return str(md.renderer.render(tokens, md.options, {}))


def html_page(title: str, body: str) -> str:
    """A whole page: charset, title, the inline style sheet, `body` (HTML) in a centred column."""
    return "\n".join(["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
                      '<meta name="viewport" content="width=device-width, initial-scale=1">',
                      f"<title>{html_text(title)}</title>", f"<style>{STYLE}</style>", "</head>", "<body>",
                      "<main>", body.rstrip("\n"), "</main>", "</body>", "</html>", ""])


def report_page(markdown: str, title: str = "MultiTab: the study's tables and figures, regenerated",
                links: Links | None = None) -> str:
    """results/report.html from results/report.md's text (both in results/, so image paths carry over);
    `links`: to make the files it names links (None: none)."""
    return html_page(title, markdown_html(markdown, links))
