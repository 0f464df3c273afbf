"""The pages a reader opens (results/report.html, results/index.html) and the `dvc plots show` page: offline
(every link and image a local file that exists, nothing loaded from an address), the caveats first, the
scale each run group trained at stated."""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
import yaml

from _aggregate_fakes import stamp_params
from multitab.markup import md_text
from multitab.validation.assets import load_manifest
from stages import aggregate
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
    """Every src/href of `page` is a relative path to a file that exists (or a place on the page); no address is
    loaded (no http(s):// anywhere in its markup: style sheets included), no script."""
    text = page.read_text(encoding="utf-8")
    parsed = Page(text)
    assert '<meta charset="utf-8">' in text
    assert not re.search(r"https?://", text), re.findall(r"https?://\S+", text)
    assert "script" not in parsed.tags
    for tag, ref in parsed.refs:
        assert not EXTERNAL.match(ref), (tag, ref)
        path, _, anchor = ref.partition("#")
        if not path:  # a place on the page itself
            assert f'id="{anchor}"' in text, (page.name, tag, ref)
            continue
        assert (page.parent / path).is_file(), (page.name, tag, ref)
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
    assert "../docs/deviations.md" in links
    assert "study_html/README.html" in links and "study_html/rec/section.html" in links  # the records as pages
    assert {("img", "figures/figure5_delta_m.png"), ("img", "figures/learning_curves.png")} <= set(index.refs)
    head = page[: page.index("<h2>Provenance")]
    assert "REDUCED TRAINING" in head and "NOT TESTED AT THIS BUDGET" in head
    assert "at most 2 epochs on 2,048 training rows per run, 1 seed" in head
    assert "checks the pipeline; not the paper&#x27;s numbers" in head
    # this run's figures under a heading that says what they are: pipeline checks, not the study's answer
    figures_at = page.index('src="figures/figure5_delta_m.png"')
    heading = page[page.rindex("<h2>", 0, figures_at):figures_at]
    assert "Pipeline checks (stand-in data, 1 seed, at most 2–6 epochs)" in heading and "Start here" not in page
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


class Tree(HTMLParser):
    """Every element's ancestry: (tag, class) of each open element, and the text seen inside each."""

    VOID = {"img", "meta", "br", "hr", "input", "link"}

    def __init__(self, text: str) -> None:
        super().__init__()
        self.stack: list[tuple[str, str]] = []
        self.tables: list[list[tuple[str, str]]] = []  # the ancestry of every <table>
        self.texts: list[tuple[str, list[tuple[str, str]]]] = []  # (text, its ancestry)
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append(list(self.stack))
        if tag not in self.VOID:
            self.stack.append((tag, dict(attrs).get("class") or ""))

    def handle_endtag(self, tag: str) -> None:
        while self.stack and self.stack.pop()[0] != tag:
            pass

    def handle_data(self, data: str) -> None:
        self.texts.append((data, list(self.stack)))


def _stage_with_study(tmp_path: Path) -> Path:
    """The aggregate stage on the default run's shape (one seed, capped epochs), with the project's docs/ and a
    committed study folder of one record; returns results/."""
    params = make_inputs(tmp_path)
    _shorten_training(tmp_path, params)
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    record = tmp_path / "results" / "study" / "rec"
    record.mkdir(parents=True)
    (tmp_path / "results" / "study" / "README.md").write_text("# records\n\n[rec](rec/section.md)\n")
    (record / "section.md").write_text("## a record\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    out = tmp_path / "results"
    assert aggregate.main([
        "--params", str(params), "--runs", str(tmp_path / "runs"), "--complexity", str(tmp_path / "complexity.csv"),
        "--tables", str(out / "tables"), "--figures", str(out / "figures"), "--plots", str(out / "plots"),
        "--metrics", str(out / "metrics.json"), "--report", str(out / "report.md"), "--html", str(out / "report.html"),
        "--index", str(out / "index.html"), "--study", str(out / "study"), "--study-html", str(out / "study_html"),
    ]) == 0
    return out


def test_report_page_shows_each_figure_once_tables_scroll_in_their_wrapper_and_files_are_links(tmp_path: Path) -> None:
    """report.html: every image once (Figures 5 and 6 were drawn both in the MultiTab-Bench section and at
    their place in the paper's order); every table in a wrapper that scrolls sideways, so no table widens the
    page; every docs/... file it names a link to that file; results/study/ named and linked to the records'
    pages; Table 8's empty cells with one seed say why."""
    out = _stage_with_study(tmp_path)
    html = (out / "report.html").read_text()
    report = check_offline(out / "report.html")
    images = [ref for tag, ref in report.refs if tag == "img"]
    assert "figures/figure5_delta_m.png" in images and "figures/figure6_delta_m.png" in images
    assert len(images) == len(set(images)), images
    for page in (out / "report.html", out / "index.html", out / "study_html" / "rec" / "section.html"):
        tree = Tree(page.read_text())
        assert tree.tables, page.name
        assert all(("div", "table-wrap") in ancestry for ancestry in tree.tables), page.name
    assert ".table-wrap { overflow-x: auto;" in html
    # every file under docs/ the text names is inside a link (to it: check_offline saw every href resolve)
    named = [(m.group(0), ancestry) for text, ancestry in Tree(html).texts
             for m in re.finditer(r"docs/[\w./-]*\w", text)]
    assert named and all(any(tag == "a" for tag, _ in ancestry) for _, ancestry in named), \
        [n for n, a in named if not any(tag == "a" for tag, _ in a)]
    assert ("a", "../docs/study.md") in report.refs
    assert ("a", "study_html/README.html") in report.refs and "results/study/" in html
    t8 = (out / "tables" / "table8_t_test.md").read_text()
    assert "n/a: needs >= 2 seeds" in t8 and "| n/a |" not in t8
    assert "a t-test needs at least two seeds" in t8


def test_plots_of_stand_in_data_say_so_in_their_title() -> None:
    """`dvc plots show`: every Vega template dvc.yaml draws the aggregate's series with puts a subtitle on the
    title from the rows' `data` column when it says stand-in data (the aggregate writes it: test_stage_end_to_end),
    and the Δm plot says when a bar has no error bar (one seed) instead of only promising them."""
    plots = yaml.safe_load((ROOT / "results" / "dvc.yaml").read_text())["plots"]  # paths relative to results/
    templates = {spec["template"] for e in plots if isinstance(e, dict) for spec in e.values()
                 if str(next(iter(e))).startswith("plots/")}
    assert templates == {"delta_m", "learning_curves"}
    for name in templates:
        spec = json.loads((ROOT / ".dvc" / "plots" / f"{name}.json").read_text())
        subtitle = spec["title"]["subtitle"]["expr"]
        assert "pluck(data('points'), 'data'), 'stand-in data'" in subtitle and "STAND-IN DATA" in subtitle
        assert spec["data"] == {"name": "points", "values": "<DVC_METRIC_DATA>"}
    delta = json.loads((ROOT / ".dvc" / "plots" / "delta_m.json").read_text())
    assert "no error bar" in delta["title"]["subtitle"]["expr"] and "'n_seeds'" in delta["title"]["subtitle"]["expr"]


def test_a_model_has_one_colour_in_every_figure_and_plot() -> None:
    """The same model, the same colour: in the Δm bars, the learning curves (the default report's and the
    study's) and the `dvc plots` templates, whatever else the figure shows and in whatever order."""
    from matplotlib.colors import to_hex
    from matplotlib.lines import Line2D

    from multitab.evaluation import figures
    from multitab.evaluation.bench.numbers import StudySettings
    from multitab.evaluation.bench.render import curves_figure as study_curves

    def legend(fig) -> dict[str, str]:
        """label -> colour of a figure's legend (a bar's face, a line's colour)."""
        return {t.get_text(): to_hex(h.get_color() if isinstance(h, Line2D) else h.get_facecolor())
                for t, h in zip(fig.legends[0].get_texts(), fig.legends[0].legend_handles, strict=True)}

    bars = ["MMoE", "PLE", "STEM", "MultiTab-Net"]
    frame = pd.DataFrame([{"group": "correlation", "config": "c", "level": "p=0.2", "model": m, "delta_m": 1.0 + i,
                           "se": 0.1, "n_seeds": 3, "missing": False, "standin": False, "data": "real"}
                          for i, m in enumerate(bars)])
    fig5 = legend(figures.delta_m_figure(frame, ("correlation",), bars, "Figure 5"))
    curves = legend(figures.curves_figure(
        {"higgs": pd.DataFrame({m: [0.6, 0.7] for m in ["STL", "MultiTab-Net", "XGB", "STEM", "MMoE", "PLE"]})},
        "metric", "Learning curves", False))
    metrics_curves = pd.DataFrame([{"config": "c", "model": m, "seed": 0, "epoch": e, "val_mean": 0.5, "train_loss": 1}
                                   for m in ("stl_mlp", "mmoe", "ple", "stem", "multitab_net") for e in (1, 2)])
    study = legend(study_curves(metrics_curves, ["c"], ["stl_mlp", "mmoe", "ple", "stem", "multitab_net"],
                                StudySettings()))
    for label in bars:
        assert fig5[label] == curves[label] == study[label], label
    assert curves["STL"] == study["STL"] and len(set(curves.values())) == len(curves)
    assert all(fig5[label] == figures.model_colour(label) for label in bars)
    for name in ("delta_m", "learning_curves"):
        scale = json.loads((ROOT / ".dvc" / "plots" / f"{name}.json").read_text())["spec"]["encoding"]["color"]["scale"]
        assert dict(zip(scale["domain"], scale["range"], strict=True)) == figures.MODEL_COLOURS, name
