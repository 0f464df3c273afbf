"""The study's answer for the entry page (results/index.html): the verdicts per figure and per MultiTab-Net
layer of the newest complete both-layers record under results/study/, with its scale, seeds, date and commit,
and its two figures.

A both-layers record (`make layers`; docs/study.md, "Both layers") holds an attribution ladder (ladder.csv,
arms.csv, metrics.csv) whose arms differ in MultiTab-Net's inter-sample layer alone, and draws Figures 5 and 6
with a bar per layer (figures/figure5_layers.png, figure6_layers.png). It is complete when its ladder gives
every arm a verdict on every configuration of Figures 5 and 6 (params `bench.configs`, the groups
bench.numbers.FIGURE5_GROUPS and FIGURE6_GROUPS) and every configuration and model ran the same seeds (a record
written while seeds are added configuration by configuration, e.g. layers_n100k_5seeds_1of9, is partial: the
box's "x N seeds" would be true of some configurations only). Of the complete records the newest is the one with the
latest date in its header.md; on the same date, the one that reuses more earlier records' runs (each record
built on another names it in its header: "the runs of results/study/<record>"). Nothing here names a record.
The verdict lines are the record's own (bench/layers.py `figure_answer`, as its section.md opens with them).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from multitab.config.aggregate import SyntheticConfig
from multitab.evaluation.bench.layers import FIGURES, figure_answer
from multitab.evaluation.bench.numbers import StudyError, StudySettings, figure_number, read_metrics_csv
from multitab.evaluation.paper.report_html import markdown_html
from multitab.markup import html_text

LADDER = "ladder.csv"
FIGURE_FILES = tuple(f"figures/{name}.png" for name, _, _ in FIGURES)  # figure5_layers.png, figure6_layers.png
_DATE = re.compile(r"\b(20\d\d-[01]\d-[0-3]\d)\b")
_COMMIT = re.compile(r"Commit: `([0-9a-f]{7,40})`")
_SOURCE = re.compile(r"results/study/([\w.-]+)")


@dataclass(frozen=True)
class StudyAnswer:
    """What the entry page's answer box shows of one record."""

    record: Path  # results/study/<name>
    verdicts: list[str]  # Markdown: the claim, then a line per figure and layer
    configs: int
    models: int
    seeds: tuple[int, ...]
    train_rows: tuple[int, ...]
    commit: str  # "" when the header names none
    date: str  # "" when the header names none
    figures: tuple[Path, ...]  # figure5_layers.png, figure6_layers.png

    def scale(self) -> str:
        """'9 configurations x 5 models x 3 seeds (0, 1, 2), 70,000 training rows per run'."""
        rows = "/".join(f"{r:,}" for r in self.train_rows) or "unrecorded"
        return (f"{self.configs} configurations x {self.models} models x {len(self.seeds)} seeds "
                f"({', '.join(map(str, self.seeds))}), {rows} training rows per run")


def figure_configs(synthetic: Mapping[str, SyntheticConfig]) -> set[str]:
    """The configurations of Figures 5 and 6 among `synthetic` (params bench.configs)."""
    return {name for name, conf in synthetic.items() if figure_number(conf) in ("5", "6")}


def _ladder(folder: Path) -> pd.DataFrame | None:
    """The ladder of a both-layers record (None: `folder` is no such record); StudyError naming the file when
    its ladder.csv cannot be read as one."""
    path = folder / LADDER
    if not (path.is_file() and (folder / "metrics.csv").is_file() and
            all((folder / f).is_file() for f in FIGURE_FILES)):
        return None
    redo = f"regenerate it: python -m multitab.evaluation.bench.attribution regenerate {folder}"
    try:
        table = pd.read_csv(path, dtype={"config": str, "arm": str, "changed": str, "verdict": str, "short_of": str},
                            keep_default_na=False, na_values={"gap": [""], "gap_se": [""]})
    except ValueError as e:  # pandas' parser, empty-file and decoding errors are ValueErrors
        raise StudyError(f"{path}: not a ladder CSV ({e}); {redo}") from None
    missing = sorted({"config", "arm", "changed", "verdict", "gap", "gap_se", "short_of"} - set(table.columns))
    if missing:
        raise StudyError(f"{path}: columns {missing} are missing; {redo}")
    return table


def is_complete(table: pd.DataFrame, configs: Iterable[str]) -> bool:
    """Whether the ladder gives each of its arms a verdict on every one of `configs` (none: never)."""
    configs = set(configs)
    arms = set(table["arm"])
    run = table[table["verdict"] != "missing"]
    given = set(zip(run["config"], run["arm"], strict=True))
    return bool(configs) and bool(arms) and all((c, a) in given for c in configs for a in arms)


def equal_seeds(metrics: pd.DataFrame) -> bool:
    """Whether every configuration x model of a record's metrics.csv ran the same seeds."""
    runs = metrics.drop_duplicates(["config", "model", "seed"])
    return runs.groupby(["config", "model"])["seed"].agg(frozenset).nunique() <= 1


def _header(folder: Path) -> str:
    path = folder / "header.md"
    return path.read_text(encoding="utf-8") if path.is_file() else ""


def _newness(folder: Path) -> tuple[str, int]:
    """(the latest date its header names, how many other records its header says it reuses)."""
    header = _header(folder)
    sources = {name for name in _SOURCE.findall(header) if name != folder.name}
    return max(_DATE.findall(header), default=""), len(sources)


def newest_complete(study: Path, configs: Iterable[str]) -> Path | None:
    """The newest complete both-layers record under `study` (module docstring); None when there is none."""
    configs = set(configs)
    complete = [f for f in sorted(Path(study).iterdir()) if f.is_dir()
                and (table := _ladder(f)) is not None and is_complete(table, configs)
                and equal_seeds(read_metrics_csv(f / "metrics.csv"))] if Path(study).is_dir() else []
    return max(complete, key=_newness, default=None)


def study_answer(study: Path, synthetic: Mapping[str, SyntheticConfig],
                 settings: StudySettings | None = None) -> StudyAnswer | None:
    """The answer of the newest complete record under `study` (results/study/) for Figures 5 and 6's
    configurations of `synthetic`; None when no record is complete. `settings`: the claim (default: the one
    `regenerate` writes the record's section.md with)."""
    settings = settings or StudySettings()
    record = newest_complete(study, figure_configs(synthetic))
    if record is None:
        return None
    table = _ladder(record)
    assert table is not None  # newest_complete read it
    metrics = read_metrics_csv(record / "metrics.csv")
    lines = [line for line in figure_answer(table, metrics, settings) if line and not line.startswith("#")]
    header = _header(record)
    commit = _COMMIT.search(header)
    runs = metrics.drop_duplicates(["config", "model", "seed"])
    return StudyAnswer(record=record, verdicts=lines, configs=runs["config"].nunique(),
                       models=runs["model"].nunique(), seeds=tuple(sorted(int(s) for s in runs["seed"].unique())),
                       train_rows=tuple(sorted({int(x) for x in runs["n_train"].dropna()})),
                       commit=commit.group(1) if commit else "", date=_newness(record)[0],
                       figures=tuple(record / f for f in FIGURE_FILES))


def _href(page: Path, target: Path) -> str:
    return html_text(os.path.relpath(target, page.parent).replace(os.sep, "/"))


def answer_box(answer: StudyAnswer | None, page: Path, study: Path, pages: Mapping[Path, Path]) -> str:
    """The entry page's first section: the record's verdicts per figure and layer, its scale, date and commit,
    a link to its page (`pages`: Markdown file -> its HTML page; the Markdown itself where it has none) and to
    every record, and its two figures; without a complete record, where the records are."""
    study = Path(study).resolve()
    readme = study / "README.md"
    index = pages.get(readme, readme)
    every = f'<a href="{_href(page, index)}">every committed record</a>' if index.is_file() or index in pages.values() \
        else "every committed record"
    if answer is None:
        return ('<section class="answer" id="answer"><h2>The study\'s answer</h2>'
                f"<p>No record under {html_text(study.name)}/ gives both MultiTab-Net layers a verdict on every "
                f"configuration of Figures 5 and 6 yet: see {every}.</p></section>")
    record = answer.record.resolve()
    section = record / "section.md"
    when = ", ".join(x for x in (answer.date, f"commit <code>{html_text(answer.commit[:7])}</code>"
                                 if answer.commit else "") if x)
    rows = ['<section class="answer" id="answer">',
            "<h2>The study's answer: MultiTab-Net against MMoE, PLE and STEM on MultiTab-Bench</h2>",
            f'<p>From the committed record <a href="{_href(page, pages.get(section, section))}"><strong>'
            f"{html_text(record.name)}</strong></a>: {html_text(answer.scale())}"
            + (f" ({when})" if when else "") + f"; {every}.</p>",
            markdown_html("\n".join(answer.verdicts)), '<div class="figures">']
    rows += [f'<figure><a href="{_href(page, f)}"><img src="{_href(page, f)}" alt="{html_text(caption)}"></a>'
             f"<figcaption>{html_text(caption)}, ± standard error over {len(answer.seeds)} seeds</figcaption></figure>"
             for f, (_, _, caption) in zip(answer.figures, FIGURES)]
    return "\n".join([*rows, "</div>", "</section>"])
