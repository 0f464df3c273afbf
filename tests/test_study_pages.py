"""The committed study where a reader looks first: the entry page opens with the verdicts per figure and
MultiTab-Net layer of the newest complete record under results/study/ (chosen by its data), and every record
(and the records' README) is a page of its own, offline."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from multitab.config import load_params
from multitab.config.aggregate import synthetic_configs
from multitab.evaluation.bench.numbers import StudyError
from multitab.evaluation.paper.entry_page import write_entry_page
from multitab.evaluation.paper.report_markdown import Provenance
from multitab.evaluation.paper.study_answer import newest_complete
from multitab.evaluation.paper.study_pages import write_study_pages
from test_report_pages import Tree, check_offline

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "results" / "study"
SYNTHETIC = synthetic_configs(load_params(ROOT / "params.yaml").bench.configs)
FIGURE_GROUPS = {"correlation", "complexity", "count", "nonuniform"}  # the paper's Figures 5 and 6
FIGURE_CONFIGS = {name for name, conf in SYNTHETIC.items() if FIGURE_GROUPS & set(conf.groups)}


def _complete_in_csv(record: Path) -> bool:
    """Read straight from ladder.csv: both arms have a verdict on every configuration of Figures 5 and 6."""
    ladder = pd.read_csv(record / "ladder.csv")
    given = ladder[ladder.verdict != "missing"]
    return all(set(given.loc[given.arm == arm, "config"]) >= FIGURE_CONFIGS for arm in set(ladder.arm))


def test_entry_page_opens_with_the_committed_verdicts_per_figure_and_layer_with_the_records_scale(tmp_path):
    """The first section after the page's title: the verdict words for each figure and each layer, the record's
    scale (configurations, models, seeds, training rows), date and commit, its two figures, a link to its page;
    then the banners."""
    page = tmp_path / "results" / "index.html"
    write_entry_page(page, tmp_path, Provenance(), "paper", study=STUDY, synthetic=SYNTHETIC)
    html = page.read_text()
    check_offline(page)
    body = html[html.index("<body>"):]
    first = body[body.index("</h1>") + 5:]
    assert first.lstrip().startswith('<section class="answer"')
    box = first[:first.index("</section>")]
    text = " ".join(" ".join(t for t, _ in Tree(box).texts).split())
    for figure in ("5", "6"):
        for layer in ("per_sample_mixing", "rope_attention"):
            assert re.search(rf"Figure {figure}, MultiTab-Net with {layer} \(\w+\): (holds|inconclusive|does not hold)"
                             r" on \d", text), (figure, layer)
    assert "holds" in text and "inconclusive" in text
    record = STUDY / re.search(r'href="[^"]*?results/study/([\w.-]+)/figures/figure5_layers.png"', box).group(1)
    assert _complete_in_csv(record)
    metrics = pd.read_csv(record / "metrics.csv")
    seeds = sorted(metrics.seed.unique())
    rows = {int(x) for x in metrics.n_train.dropna()}
    assert f"{len(FIGURE_CONFIGS)} configurations x {metrics.model.nunique()} models x {len(seeds)} seeds" in text
    assert all(f"{r:,} training rows per run" in text for r in rows)
    commit = re.search(r"Commit: `([0-9a-f]{7})", (record / "header.md").read_text()).group(1)
    assert commit in text and record.name in text
    for name in ("figure5_layers.png", "figure6_layers.png"):
        assert f"{record.name}/figures/{name}" in box
    assert f"{record.name}/section.md" in box  # no pages written here: the Markdown is linked


def _copy_record(source: Path, target: Path, date: str) -> Path:
    """The files that make a both-layers record for the entry page, its header dated `date`."""
    (target / "figures").mkdir(parents=True)
    for name in ("ladder.csv", "metrics.csv", "figures/figure5_layers.png", "figures/figure6_layers.png"):
        shutil.copy(source / name, target / name)
    header = re.sub(r"20\d\d-\d\d-\d\d", date, (source / "header.md").read_text())
    (target / "header.md").write_text(header if date in header else f"> trained {date}\n\n{header}")
    return target


def test_the_record_shown_is_the_newest_complete_one_by_its_data(tmp_path):
    """Not by name: a complete record dated later wins over one dated earlier whatever their names, and a record
    missing a configuration of Figures 5 and 6 is never shown, however new."""
    complete = next(p.parent for p in sorted(STUDY.glob("*/ladder.csv")) if _complete_in_csv(p.parent)
                    and (p.parent / "figures" / "figure5_layers.png").is_file())
    partial = next(p.parent for p in sorted(STUDY.glob("*/ladder.csv")) if not _complete_in_csv(p.parent)
                   and (p.parent / "figures" / "figure5_layers.png").is_file())
    study = tmp_path / "study"
    _copy_record(complete, study / "a_newer", "2027-03-02")
    _copy_record(complete, study / "z_older", "2027-03-01")
    _copy_record(partial, study / "zz_newest_but_partial", "2027-04-01")
    assert newest_complete(study, FIGURE_CONFIGS) == study / "a_newer"
    assert newest_complete(study, FIGURE_CONFIGS | {"p99_pd9_t9"}) is None  # a configuration no record ran
    page = tmp_path / "index.html"
    write_entry_page(page, tmp_path, Provenance(), "paper", study=study, synthetic=SYNTHETIC)
    assert "a_newer" in page.read_text().split("</section>")[0]


def test_a_record_whose_configurations_ran_different_seeds_is_not_shown(tmp_path):
    """Seeds added configuration by configuration (the five-seed study's partial records): a record where one
    configuration has more seeds than the others is partial, however new; the box's "x N seeds" stays true."""
    complete = next(p.parent for p in sorted(STUDY.glob("*/ladder.csv")) if _complete_in_csv(p.parent)
                    and (p.parent / "figures" / "figure5_layers.png").is_file())
    study = tmp_path / "study"
    _copy_record(complete, study / "older_equal_seeds", "2027-03-01")
    uneven = _copy_record(complete, study / "newer_uneven_seeds", "2027-03-02")
    metrics = pd.read_csv(uneven / "metrics.csv")
    assert metrics.groupby(["config", "model"]).seed.nunique().nunique() == 1  # the copy is even before
    assert newest_complete(study, FIGURE_CONFIGS) == uneven
    one = sorted(FIGURE_CONFIGS)[0]
    top = metrics.seed.max()
    metrics[(metrics.config != one) | (metrics.seed != top)].to_csv(uneven / "metrics.csv", index=False)
    assert newest_complete(study, FIGURE_CONFIGS) == study / "older_equal_seeds"


def test_a_record_whose_ladder_cannot_be_read_is_named(tmp_path):
    """A committed record with a broken ladder.csv: an error naming the file and how to write it again (the stage
    exits with BAD_INPUT on it), not a traceback and not an answer from the records that remain."""
    complete = next(p.parent for p in sorted(STUDY.glob("*/ladder.csv")) if _complete_in_csv(p.parent))
    record = _copy_record(complete, tmp_path / "study" / "rec", "2027-03-02")
    (record / "ladder.csv").write_text("config,arm\n\"unclosed\n")
    with pytest.raises(StudyError, match=r"rec/ladder.csv: .*regenerate"):
        newest_complete(tmp_path / "study", FIGURE_CONFIGS)


def test_every_record_is_a_page_with_its_tables_figures_and_links(tmp_path):
    """results/study/README.md and each record's section.md as HTML: pipe tables as tables (in their scrolling
    wrapper), the record's figures shown from results/study/, a link to another record's section.md going to its
    page, files the text names (docs/...) linked, names with markup shown as text; every committed record too,
    with every link and image resolving."""
    root = tmp_path / "project"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "study.md").write_text("# study\n")
    study = root / "results" / "study"
    (study / "rec" / "figures").mkdir(parents=True)
    (study / "rec" / "figures" / "ladder.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (study / "README.md").write_text("# Records\n\n| Record | Says |\n|---|---|\n"
                                     "| [rec](rec/section.md) | **holds** |\n")
    (study / "rec" / "section.md").write_text(
        "## A record\n\nThe verdict (docs/study.md): \\<script\\>x\\</script\\>\n\n| Arm | Verdict |\n|---|---|\n"
        "| A6 | **holds** |\n\n![Ladder](figures/ladder.png)\n")
    out = root / "results" / "study_html"
    pages = write_study_pages(study, out, root)
    assert sorted(p.relative_to(out).as_posix() for p in pages) == ["README.html", "rec/section.html"]
    section = (out / "rec" / "section.html").read_text()
    parsed = check_offline(out / "rec" / "section.html")
    assert "<table>" in section and all(("div", "table-wrap") in a for a in Tree(section).tables)
    assert ("img", "../../study/rec/figures/ladder.png") in parsed.refs
    assert ("a", "../../../docs/study.md") in parsed.refs and ("a", "../README.html") in parsed.refs
    assert ("a", "../../study/rec/section.md") in parsed.refs  # the source it is made from
    assert "<script>" not in section and "&lt;script&gt;x&lt;/script&gt;" in section
    readme = check_offline(out / "README.html")
    assert ("a", "rec/section.html") in readme.refs
    assert "<td><strong>holds</strong></td>" in (out / "README.html").read_text()

    committed = write_study_pages(STUDY, tmp_path / "study_html", ROOT)
    assert len(committed) == 1 + len(list(STUDY.glob("*/section.md")))
    for page in committed:
        check_offline(page)
        assert "<table>" in page.read_text(), page  # every record has its tables, as tables
    layers = (tmp_path / "study_html" / "layers_n100k_3seeds_9of9" / "section.html").read_text()
    assert "figures/figure5_layers.png" in layers and "figures/figure6_layers.png" in layers
