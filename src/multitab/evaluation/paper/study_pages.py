"""The committed study records as pages: results/study/README.md and each record's section.md (its verdicts,
ladder or tables, and figures) rendered to HTML by the aggregate stage into a folder of its own
(results/study_html/: README.html, <record>/section.html), offline.

The Markdown in results/study/ stays the source, committed; the pages are regenerated like the report (and
git-ignored), so they can never drift from it. A page's links and images point back into results/study/ (the
record's figures, CSVs and header), a link to another record's section.md goes to that record's page, and a
file the text names (docs/study.md, src/.../verdict.py) is a link where it exists.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from pathlib import Path

from multitab.evaluation.paper.report_html import Links, html_page, markdown_html
from multitab.files.io import write_text
from multitab.markup import html_text

README = "README.md"
SECTION = "section.md"
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def study_sources(study: Path) -> list[Path]:
    """The Markdown files that get a page: the README of `study` (results/study/) and every record's
    section.md, in the records' name order."""
    study = Path(study)
    readme = [study / README] if (study / README).is_file() else []
    return readme + sorted(p for p in study.glob(f"*/{SECTION}") if p.is_file())


def page_of(source: Path, study: Path, out: Path) -> Path:
    """Where the page of `source` (a file under `study`) goes under `out`: the same path, .html."""
    return Path(out) / source.relative_to(study).with_suffix(".html")


def page_map(study: Path, out: Path) -> dict[Path, Path]:
    """Every page-worthy Markdown file under `study` -> its page under `out` (absolute paths)."""
    study, out = Path(study).resolve(), Path(out).resolve()
    return {src: page_of(src, study, out) for src in study_sources(study)}


def _title(text: str, fallback: str) -> str:
    m = _HEADING.search(text)
    return m.group(1).replace("`", "") if m else fallback


def _nav(source: Path, page: Path, study: Path, links: Links) -> str:
    """The line above a record's page: back to the list of records, and the Markdown it is made from."""
    index = links.pages.get(study / README)
    parts = [f'<a href="{html_text(links.href(index))}">All study records</a>'] if index and index != page else []
    shown = source.relative_to(links.root if links.root and source.is_relative_to(links.root) else study.parent)
    href = os.path.relpath(source, page.parent).replace(os.sep, "/")  # the Markdown itself, not its page
    parts.append(f'made from <a href="{html_text(href)}">{html_text(shown.as_posix())}</a> (the source)')
    return f'<p class="nav">{" · ".join(parts)}</p>'


def write_study_pages(study: Path, out: Path, root: Path | None = None,
                      fresh: Collection[Path] = ()) -> list[Path]:
    """Write the page of every Markdown file `study_sources` lists into `out` (atomically; a page of a
    record no longer there is removed); `root`: the project root (files the text names link there);
    `fresh`: this run's outputs that may still wait for their rename. Returns the pages written."""
    study, out = Path(study).resolve(), Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)  # the stage's output, even with no record to show
    pages = page_map(study, out)
    fresh_set = frozenset(Path(f).resolve() for f in fresh) | frozenset(pages.values())
    written = []
    for source, page in pages.items():
        text = source.read_text(encoding="utf-8")
        links = Links(source=source.parent, page=page, root=root.resolve() if root else None, pages=pages,
                      fresh=fresh_set)
        title = _title(text, "Study records") if source.name == README else \
            f"{source.parent.name}: {_title(text, source.parent.name)}"
        write_text(page, html_page(title, _nav(source, page, study, links) + "\n" + markdown_html(text, links)))
        written.append(page)
    for stale in sorted(out.rglob("*.html")) if out.is_dir() else []:
        if stale not in fresh_set:
            stale.unlink()
    return written
