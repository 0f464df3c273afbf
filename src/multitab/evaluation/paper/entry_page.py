"""results/index.html: one page that links what a run produced, with the report's provenance block.

Written by the aggregate stage after the report (stages/aggregate.py). Plain HTML, no script, no style
sheet and no address outside the checkout: every link is a relative path to a file that exists when the
page is written (the report, the paper's tables and figures, Figures 3-4, the complexity table, the
validation pages and verdicts, the study's and the sweeps' reports when they are there), so the page works offline
from the file system.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from multitab.evaluation.paper.report_markdown import Provenance
from multitab.io import write_text
from multitab.markup import html_text

VALIDATION = "Data validation"
VALIDATION_PAGES = "reports/validation/index.html"
# (section, glob patterns relative to the project root): what the page links, where it exists
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Report", ("results/report.md", "results/metrics.json")),
    ("The paper's tables (Tables 2-10, Figures 5-6 data)", ("results/tables/*.md",)),
    ("Figures", ("results/figures/*.png", "results/label_correlations/*.png")),
    ("Complexity (Table 4's counts)", ("results/complexity/*.md",)),
    # the Great Expectations pages (no DVC output: shared by the validation stages) and the verdicts (DVC outputs)
    (VALIDATION, (VALIDATION_PAGES, "data/validated/*.json", "data/validated/*/*.json")),
    ("MultiTab-Bench study (make study)", ("results/study_report/report.md",)),
    ("Hyperparameter sweeps (make sweep)", ("results/sweeps/report.md",)),
)


# said where the verdicts are in the workspace and the pages are not (a checkout restored from the DVC cache)
NO_VALIDATION_PAGES = (
    "The Great Expectations pages (reports/validation/) are not in this workspace: its validation stages were "
    "restored from the DVC cache, not run here, and the pages are no DVC output. The verdicts below are. "
    "`make validation-pages` writes them again (the same verdicts, so no later stage re-runs)."
)


def section_notes(root: Path, sections: Sequence[tuple[str, Sequence[Path]]]) -> dict[str, str]:
    """A line for a section whose files are partly absent in a way a reader should know about: the data
    validation's verdicts without its pages."""
    titles = {title for title, _ in sections}
    if VALIDATION in titles and not (root / VALIDATION_PAGES).is_file():
        return {VALIDATION: NO_VALIDATION_PAGES}
    return {}


def entry_links(root: Path, written: Sequence[Path] = ()) -> list[tuple[str, list[Path]]]:
    """(section, files) of SECTIONS under the project `root`: those that exist and those in `written` (this
    run's outputs, which may still wait for their all-or-nothing swap); sections without a file left out."""
    root = root.resolve()
    fresh = [Path(w).resolve() for w in written]
    out = []
    for title, patterns in SECTIONS:
        files = {p.resolve() for pattern in patterns for p in root.glob(pattern) if p.is_file()}
        files |= {w for w in fresh for pattern in patterns if w.is_relative_to(root)
                  and fnmatch.fnmatchcase(w.relative_to(root).as_posix(), pattern)}
        if files:
            out.append((title, sorted(files, key=_natural)))
    return out


def _natural(path: Path) -> list[Any]:
    """table2 before table10: digits compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.as_posix())]


def render(page: Path, sections: Sequence[tuple[str, Sequence[Path]]], provenance: Provenance, protocol: str,
           what_ran: Sequence[str] = (), notes: dict[str, str] | None = None) -> str:
    """The page's HTML; links are relative to the page's folder; `notes`: a line under a section's title."""
    esc = html_text
    notes = notes or {}
    rows = [
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        "<title>multitab results</title>", "</head>", "<body>", "<h1>multitab results</h1>",
        "<h2>Provenance</h2>", "<ul>",
        f"<li>Commit <code>{esc(provenance.commit)}</code></li>",
        f"<li>params.yaml sha256 <code>{esc(provenance.params_sha256)}</code></li>",
        f"<li>Protocol <code>{esc(protocol)}</code> (docs/deviations.md)</li>",
        "<li>Prefect: the flow run named <code>&lt;targets&gt; @ " + esc(provenance.commit[:8])
        + "</code> in the Prefect UI (<code>make ui</code>) holds this run's logs and artifacts</li>",
        "</ul>",
    ]
    if what_ran:
        rows += ["<h2>What ran</h2>", "<ul>", *(f"<li>{esc(line)}</li>" for line in what_ran), "</ul>"]
    for title, files in sections:
        rows.append(f"<h2>{esc(title)}</h2>")
        if title in notes:
            rows.append(f"<p>{esc(notes[title])}</p>")
        rows.append("<ul>")
        for f in files:
            href = os.path.relpath(f, page.parent).replace(os.sep, "/")
            rows.append(f'<li><a href="{esc(href)}">{esc(href)}</a></li>')
        rows.append("</ul>")
    rows += ["</body>", "</html>", ""]
    return "\n".join(rows)


def write_entry_page(page: Path, root: Path, provenance: Provenance, protocol: str,
                     what_ran: Sequence[str] = (), written: Sequence[Path] = ()) -> Path:
    """Write `page` (atomically) linking every output under the project `root` (`written`: this run's)."""
    sections = entry_links(root, written)
    write_text(page, render(page.resolve(), sections, provenance, protocol, what_ran,
                            section_notes(root, sections)))
    return page
