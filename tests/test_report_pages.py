"""The pages a reader opens (results/report.html, results/index.html) and the `dvc plots show` page: offline
(every link and image a local file that exists, nothing loaded from an address), the caveats first, the
scale each run group trained at stated."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
import yaml

from _aggregate_fakes import stamp_params
from multitab.markup import md_text
from multitab.validation.assets import load_manifest
from test_aggregate_stage import make_inputs, run_stage

ROOT = Path(__file__).resolve().parents[1]
EXTERNAL = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:)?//")


class Page(HTMLParser):
    """Tags in order, every src/href, and the text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.refs: list[tuple[str, str]] = []  # (tag, src or href)
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.refs += [(tag, v) for k, v in attrs if k in ("src", "href") and v is not None]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def check_offline(page: Path) -> Page:
    """Every src/href of `page` is a relative path to a file that exists; no address is loaded (no
    http(s):// anywhere in its markup: style sheets included), no script."""
    text = page.read_text(encoding="utf-8")
    parsed = Page(text)
    assert '<meta charset="utf-8">' in text
    assert not re.search(r"https?://", text), re.findall(r"https?://\S+", text)
    assert "script" not in parsed.tags
    for tag, ref in parsed.refs:
        assert not EXTERNAL.match(ref), (tag, ref)
        assert (page.parent / ref).is_file(), (page.name, tag, ref)
    return parsed


def _shorten_training(root: Path, params: Path) -> None:
    """The default run's shape in the fakes: every real run capped at 2 epochs and 2,048 training rows, the
    MultiTab-Bench runs at 6 epochs on 14,000 rows, one seed each; XGBoost recording its boosting rounds."""
    raw = yaml.safe_load(params.read_text())
    for group in ("real", "ablation", "bench"):
        raw["runs"][group]["seeds"] = [0]
    params.write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))
    for path in (root / "runs").rglob("seed[12]"):
        for f in sorted(path.rglob("*"), reverse=True):
            f.unlink() if f.is_file() else f.rmdir()
        path.rmdir()
    stamp_params(root / "runs", params)
    for path in sorted((root / "runs").glob("*/*/seed0/metrics.json")):
        record = json.loads(path.read_text())
        bench = record["dataset"].startswith("p")
        record["n_rows"] = {"train": 14_000 if bench else 2_048, "val": 3_000, "test": 3_000}
        record["epochs"] = record["max_epochs"] = 200 if record["model"] == "xgboost" else (6 if bench else 2)
        record["max_train_rows"] = None if bench else 2048
        path.write_text(json.dumps(record))


def test_report_page_and_entry_page_work_offline_with_the_caveats_first(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """results/report.html is the report's Markdown as a page: figures inline, tables, the stand-in /
    reduced-training / not-tested banners ahead of the first table; the entry page links it first, states
    each run group's scale, names the Prefect flow run and shows the main figures; both load nothing from
    outside the checkout."""
    params = make_inputs(tmp_path)
    _shorten_training(tmp_path, params)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "deviations.md").write_text("# Deviations\n")
    (tmp_path / "results" / "study" / "rec").mkdir(parents=True)
    (tmp_path / "results" / "study" / "README.md").write_text("# records\n")
    (tmp_path / "results" / "study" / "rec" / "section.md").write_text("# a record\n")
    monkeypatch.setenv("MULTITAB_FLOW_RUN", "all stages @ 0123abcd")  # set by the flow for its stages
    assert run_stage(tmp_path, params) == 0

    report = check_offline(tmp_path / "results" / "report.html")
    html = (tmp_path / "results" / "report.html").read_text()
    first_table = html.index("<table")
    for banner in ("STAND-IN DATA", "REDUCED TRAINING", "NOT TESTED AT THIS BUDGET"):
        assert html.index(banner) < first_table, banner
    assert ("img", "figures/figure5_delta_m.png") in report.refs
    assert ("img", "figures/learning_curves.png") in report.refs
    # the scale in words, per run group, XGBoost's 200 boosting rounds not counted as epochs
    text = " ".join(" ".join(report.text).split())
    assert ("run group real, stand-in data (aliexpress, acs_income, higgs): at most 2 epochs on 2,048 training rows "
            "per run, 1 seed") in text
    assert ("run group bench, 5 MultiTab-Bench configurations: at most 6 epochs on 14,000 training rows per run, "
            "1 seed") in text
    md = (tmp_path / "results" / "report.md").read_text()
    banners = md[: md.index("## What ran")]
    assert "REDUCED TRAINING" in banners and "200" not in banners and "[2" not in banners
    assert md.index("## What ran") < md.index("| Dataset |")
    # the Convergence paragraph counts the runs of the convergence.csv it links (which the figures' notes split)
    conv = pd.read_csv(tmp_path / "results" / "tables" / "convergence.csv")
    assert f"{conv.runs.sum()} runs were ended by early stopping" in md
    assert f"{conv.not_converged.sum()} flagged not converged" in md and "[tables/convergence.csv]" in md

    index = check_offline(tmp_path / "results" / "index.html")
    page = (tmp_path / "results" / "index.html").read_text()
    links = [ref for tag, ref in index.refs if tag == "a"]
    assert links.index("report.html") < links.index("report.md") < links.index("metrics.json")
    assert "../docs/deviations.md" in links and "study/README.md" in links and "study/rec/section.md" in links
    assert {("img", "figures/figure5_delta_m.png"), ("img", "figures/learning_curves.png")} <= set(index.refs)
    head = page[: page.index("<h2>Provenance")]
    assert "REDUCED TRAINING" in head and "NOT TESTED AT THIS BUDGET" in head
    assert "at most 2 epochs on 2,048 training rows per run, 1 seed" in head
    assert "checks the pipeline; not the paper&#x27;s numbers" in head
    assert "Prefect flow run: <code>all stages @ 0123abcd</code>" in page and "&lt;targets&gt;" not in page


def test_report_page_shows_names_as_text() -> None:
    """A name with markup in the report's Markdown (escaped there by md_text) stays text in the page."""
    from multitab.evaluation.paper.report_html import report_page

    page = report_page(f"# r\n\n| dataset |\n|---|\n| {md_text('<script>x</script> *b*')} |\n")
    assert "<script>" not in page and "&lt;script&gt;x&lt;/script&gt; *b*" in page and "<td>" in page


def test_dvc_plots_page_template_loads_the_vendored_vega_with_a_charset() -> None:
    """`dvc plots show`'s page (.dvc/config plots.html_template): a charset, DVC's plot placeholder, no
    `{scripts}` placeholder (DVC puts its CDN script tags there), and every script a vendored file of the
    Data Docs assets, by its path from the page DVC writes (dvc_plots/index.html in the project)."""
    config = (ROOT / ".dvc" / "config").read_text()
    m = re.search(r"^\s*html_template\s*=\s*(\S+)", config, re.MULTILINE)
    assert m, config
    template = (ROOT / ".dvc" / m.group(1)).read_text(encoding="utf-8")
    assert '<meta charset="utf-8">' in template and "{plot_divs}" in template and "{scripts}" not in template
    assert not re.search(r"https?://", template)
    vendored = {f"../.cache/datadocs/{p.spec}/{f}" for p in load_manifest().packages for f in p.files}
    scripts = re.findall(r'<script src="([^"]+)"', template)
    assert {s.split("/")[3] for s in scripts} == {"vega", "vega-lite", "vega-embed"} or len(scripts) == 3
    assert scripts and all(s in vendored for s in scripts), scripts


def test_dvc_yaml_plots_are_few_labelled_and_drawn_from_the_declared_datasets() -> None:
    """No stage declares per-run plots (each run's dvclive series, timings included, made ~1,200 plots);
    the top-level plots are few, each template exists, every Vega plot labels its axes, and the learning
    curves name no dataset (the aggregate stage writes a panel per dataset of `datasets:`)."""
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    assert "plots" not in dvc  # the DAG's file holds stages; results/dvc.yaml the plots
    for name, stage in dvc["stages"].items():
        body = stage.get("do", stage)
        assert "plots" not in body, name
    plots = yaml.safe_load((ROOT / "results" / "dvc.yaml").read_text())["plots"]
    assert len(plots) <= 60
    for entry in plots:
        if isinstance(entry, str):
            assert entry.endswith(".png")
            continue
        (target, spec), = entry.items()
        template = spec.get("template")
        if template and template not in ("linear", "simple", "bar_horizontal"):
            content = json.loads((ROOT / ".dvc" / "plots" / f"{template}.json").read_text())
            assert "<DVC_METRIC_DATA>" in json.dumps(content)
        assert spec.get("x_label") and (spec.get("y_label") or spec.get("template") == "delta_m"), target
    curves = [t for e in plots if isinstance(e, dict) for t in e if "learning_curves" in t]
    assert curves and not any(d in json.dumps(curves) for d in ("aliexpress", "acs_income", "higgs"))


def test_learning_curve_figure_ticks_whole_epochs() -> None:
    """Two epochs drawn: the epoch axis ticks 1 and 2, not 1.0, 1.2, ... (matplotlib's default steps)."""
    from multitab.evaluation import figures

    fig = figures.curves_figure({"higgs": pd.DataFrame({"STL": [0.61, 0.64], "MMoE": [0.6, 0.66]})},
                                "validation mean metric", "Learning curves", False)
    fig.canvas.draw()
    ticks = [t for t in fig.axes[0].get_xticks() if 1 <= t <= 2]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
