"""results/index.html: the page a reader opens first: the study's answer (the committed record's verdicts per
figure and MultiTab-Net layer, its scale and its figures: study_answer.py), what this run's numbers can say at
the scale that ran, its figures under a heading that says they check the pipeline, the provenance block, and
links to everything a run produced.

Written by the aggregate stage after the report (stages/aggregate.py). HTML with an inline style sheet, no
script and no address outside the checkout: every link and image is a relative path to a file that exists
when the page is written (the report as a page and as Markdown, the paper's tables and figures, Figures 3-4,
the complexity table, the validation pages and verdicts, the deviations from the paper, the committed study
records, the study's and the sweeps' reports when they are there), so the page works offline from the file
system.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from multitab.config.aggregate import SyntheticConfig
from multitab.evaluation.paper.budget import NOT_TESTED, GroupBudget, not_tested_banner, reduced_banner, span
from multitab.evaluation.paper.report_html import TABLE_WRAP, Links, html_page, linked_text
from multitab.evaluation.paper.report_markdown import Provenance
from multitab.evaluation.paper.study_answer import answer_box, study_answer
from multitab.files.io import write_text
from multitab.markup import html_text

VALIDATION = "Data validation"
# committed records of real runs at a larger scale (each folder's header.md says where and at which commit); their
# pages where the aggregate stage wrote them (study_pages.py), else the Markdown
STUDY_RECORDS = "Study records (committed runs of make study, make attribution, make layers, make precision-pair)"
VALIDATION_PAGES = "reports/validation/index.html"
# (section, glob patterns relative to the project root): what the page links, where it exists
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Report", ("results/report.html", "results/report.md", "results/metrics.json")),
    ("Deviations from the paper (protocol: paper | authors_code)", ("docs/deviations.md",)),
    ("The paper's tables (Tables 2-10, Figures 5-6 data)", ("results/tables/*.md",)),
    ("Figures", ("results/figures/*.png", "results/label_correlations/*.png")),
    ("Complexity (Table 4's counts)", ("results/complexity/*.md",)),
    # the Great Expectations pages (no DVC output: shared by the validation stages) and the verdicts (DVC outputs)
    (VALIDATION, (VALIDATION_PAGES, "data/validated/*.json", "data/validated/*/*.json")),
    ("MultiTab-Bench study (make study)", ("results/study_report/report.md",)),
    ("Hyperparameter sweeps (make sweep)", ("results/sweeps/report.md",)),
    (STUDY_RECORDS, ("results/study/README.md", "results/study/*/section.md")),
)
# the figures shown on the page (where they exist), with their captions
FIRST_FIGURES: tuple[tuple[str, str], ...] = (
    ("results/figures/figure5_delta_m.png", "Figure 5: Δm against STL per MultiTab-Bench configuration"),
    ("results/figures/figure6_delta_m.png", "Figure 6: Δm with non-uniform task complexities"),
    ("results/figures/learning_curves.png", "Learning curves: validation mean metric per epoch, seed mean"),
)
NO_FLOW_RUN = "none: the aggregate stage ran outside the Prefect flow (e.g. plain dvc repro)"


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
        files: list[Path] = []  # in the patterns' order (the report as a page first), each pattern's sorted
        for pattern in patterns:
            found = {p.resolve() for p in root.glob(pattern) if p.is_file()}
            found |= {w for w in fresh
                      if w.is_relative_to(root) and fnmatch.fnmatchcase(w.relative_to(root).as_posix(), pattern)}
            files += [f for f in sorted(found, key=_natural) if f not in files]
        if files:
            out.append((title, files))
    return out


def _natural(path: Path) -> list[Any]:
    """table2 before table10: digits compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.as_posix())]


def _href(page: Path, target: Path) -> str:
    return html_text(os.path.relpath(target, page.parent).replace(os.sep, "/"))


def _budget_rows(budgets: Sequence[GroupBudget]) -> list[str]:
    esc = html_text
    rows = [TABLE_WRAP, "<table>",
            "<thead><tr><th>Run group</th><th>Data</th><th>Runs with a record</th><th>Seeds</th>"
            "<th>Epochs run (cap)</th><th>Training rows per run</th><th>What the numbers can say</th></tr></thead>",
            "<tbody>"]
    for b in budgets:
        cap = b.epoch_cap or "authors' selection"
        rows.append(f"<tr><td>{esc(b.group)}</td><td>{esc(b.what())}</td><td>{b.n_runs}</td><td>{len(b.seeds)}</td>"
                    f"<td>{esc(b.epochs_run or '-')} ({esc(cap)})</td><td>{esc(b.rows or 'not recorded')}</td>"
                    f"<td>{esc(b.meaning)}</td></tr>")
    return [*rows, "</tbody>", "</table>", "</div>"]


def pipeline_heading(budgets: Sequence[GroupBudget]) -> str:
    """The heading over this run's figures: what they rest on, and that they check the pipeline where the run
    is stand-in, cut down or below the study's budget ('This run's figures' when none is)."""
    checks = [b for b in budgets if b.standin or b.reduced or NOT_TESTED in b.meaning]
    if not checks:
        return "This run's figures"
    seeds = span(len(b.seeds) for b in checks)
    parts = ["stand-in data"] if any(b.standin for b in checks) else []
    parts.append(f"{seeds} seed{'' if seeds == '1' else 's'}")
    if caps := span(int(c) for b in checks for c in b.epoch_cap.replace(",", "").split("–") if c.isdigit()):
        parts.append(f"at most {caps} epochs")
    return f"Pipeline checks ({', '.join(parts)}): this run's figures, not the study's answer"


def render(page: Path, sections: Sequence[tuple[str, Sequence[Path]]], provenance: Provenance, protocol: str,
           what_ran: Sequence[str] = (), notes: dict[str, str] | None = None, *,
           budgets: Sequence[GroupBudget] = (), figures: Sequence[tuple[Path, str]] = (),
           flow_run: str | None = None, deviations: Path | None = None, answer: str = "",
           root: Path | None = None) -> str:
    """The page's HTML; links are relative to the page's folder; `notes`: a line under a section's title;
    `budgets`: the scale each run group ran at; `figures`: (image, caption) of this run, under a heading that
    says what they check; `flow_run`: the Prefect flow run's name (None: none); `deviations`:
    docs/deviations.md, linked from the protocol; `answer`: the study's answer (study_answer.answer_box),
    first; `root`: the project root (a file a banner names is linked there)."""
    esc = html_text
    notes = notes or {}
    links = Links(source=page.parent, page=page, root=root)
    rows = ["<h1>multitab results</h1>"]
    if answer:
        rows.append(answer)
    standin = sorted({d for b in budgets if b.standin for d in b.datasets})
    if standin:
        rows.append(f"<blockquote><p><strong>STAND-IN DATA</strong>: {esc(', '.join(standin))} are generated stand-in "
                    "data: every number built from them is a pipeline check, not a result of the study."
                    "</p></blockquote>")
    if reduced := reduced_banner(budgets, esc):
        rows.append(f"<blockquote><p><strong>REDUCED TRAINING</strong>: {reduced}</p></blockquote>")
    if below := not_tested_banner(budgets, esc):
        rows.append(f"<blockquote><p><strong>{NOT_TESTED.upper()}</strong>: {linked_text(below, links)}"
                    + (' The study\'s answer is <a href="#answer">above</a>.' if answer else "") + "</p></blockquote>")
    if budgets:
        rows += ["<h2>The scale each run group trained at</h2>", *_budget_rows(budgets)]
    if figures:
        rows += [f"<h2>{esc(pipeline_heading(budgets))}</h2>", '<div class="figures">']
        rows += [f'<figure><a href="{_href(page, f)}"><img src="{_href(page, f)}" alt="{esc(caption)}"></a>'
                 f"<figcaption>{esc(caption)}</figcaption></figure>" for f, caption in figures]
        rows.append("</div>")
    protocol_text = f"<code>{esc(protocol)}</code>"
    if deviations is not None:
        protocol_text += (f' (<a href="{_href(page, deviations)}">docs/deviations.md</a>: '
                          "where the two protocols differ)")
    flow = (f"<code>{esc(flow_run)}</code> in the Prefect UI (<code>make ui</code>): its logs and artifacts"
            if flow_run else esc(NO_FLOW_RUN))
    rows += [
        "<h2>Provenance</h2>", "<ul>",
        f"<li>Commit <code>{esc(provenance.commit)}</code></li>",
        f"<li>params.yaml sha256 <code>{esc(provenance.params_sha256)}</code></li>",
        f"<li>Protocol {protocol_text}</li>",
        f"<li>Prefect flow run: {flow}</li>",
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
            href = _href(page, f)
            rows.append(f'<li><a href="{href}">{href}</a></li>')
        rows.append("</ul>")
    return html_page("multitab results", "\n".join(rows))


def write_entry_page(page: Path, root: Path, provenance: Provenance, protocol: str,
                     what_ran: Sequence[str] = (), written: Sequence[Path] = (), *,
                     budgets: Sequence[GroupBudget] = (), flow_run: str | None = None, study: Path | None = None,
                     synthetic: Mapping[str, SyntheticConfig] | None = None,
                     study_pages: Mapping[Path, Path] | None = None) -> Path:
    """Write `page` (atomically) linking every output under the project `root` (`written`: this run's), with
    the scale each run group trained at (`budgets`) and the Prefect flow run's name (`flow_run`); `study`: the
    committed records (results/study/), whose newest complete record's answer opens the page, for Figures 5 and
    6's configurations of `synthetic` (params bench.configs); `study_pages`: their Markdown -> their pages
    (study_pages.py), linked instead of the Markdown."""
    root = root.resolve()
    pages = dict(study_pages or {})
    sections = entry_links(root, written)
    if pages:
        sections = [(title, files) for title, files in sections if title != STUDY_RECORDS]
        sections.append((STUDY_RECORDS, list(pages.values())))
    fresh = {Path(w).resolve() for w in written}
    figures = [(root / rel, caption) for rel, caption in FIRST_FIGURES
               if (root / rel).is_file() or (root / rel).resolve() in fresh]
    deviations = root / "docs" / "deviations.md"
    answer = ""
    if study is not None:
        answer = answer_box(study_answer(study, synthetic or {}), page.resolve(), study, pages)
    write_text(page, render(page.resolve(), sections, provenance, protocol, what_ran, section_notes(root, sections),
                            budgets=budgets, figures=figures, flow_run=flow_run,
                            deviations=deviations if deviations.is_file() else None, answer=answer, root=root))
    return page
