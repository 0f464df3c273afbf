"""Everything `aggregate` writes: the paper's tables (md / csv / tex), Figures 5–6 (png / svg), the data
behind the figures for `dvc plots`, a summary for `dvc metrics`, and results/report.md, which shows them in
the paper's order with the published value beside ours and the difference.

Reads only the runs' metrics.json files and the complexity table; never trains.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from multitab.config.aggregate import AggregateConfig, SyntheticConfig
from multitab.evaluation import figures
from multitab.evaluation.bench.numbers import FIGURE5_GROUPS, FIGURE6_GROUPS, convergence
from multitab.evaluation.curves import CURVES, seed_mean_curves
from multitab.evaluation.paper import paper_tables as pt
from multitab.evaluation.paper.bench_icl import icl_beside_bench
from multitab.evaluation.paper.published import Published
from multitab.evaluation.paper.report_html import Links, report_page
from multitab.evaluation.paper.report_markdown import Provenance, bench_inputs, bench_section, render_report
from multitab.evaluation.paper.results import PaperResults
from multitab.evaluation.paper.runs import RunSet
from multitab.evaluation.tables import MISSING, STANDIN_MARK, Table, comparison_rows
from multitab.files.io import atomic_path, write_csv, write_json
from multitab.icl.records import read_records
from multitab.markup import csv_text, md_text
from multitab.registry import trains_in_epochs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outputs:
    tables: Path  # results/tables
    figures: Path  # results/figures
    plots: Path  # results/plots (data series for `dvc plots`)
    report: Path  # results/report.md
    metrics: Path  # results/metrics.json (for `dvc metrics`)
    # results/report.html: the report as a page, beside report.md (its relative figure paths hold for both)
    html: Path | None = None


def _write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def _convergence_note(conv: pd.DataFrame | None, configs: set[str]) -> str:
    """The Δm figure's convergence line: the runs of `configs` flagged not converged by the rule of the
    report's Convergence paragraph (multitab.evaluation.bench.numbers.convergence), of all its runs."""
    if conv is None or conv.empty:
        return ""
    part = conv[conv["config"].isin(configs)]
    runs, flagged = int(part["runs"].sum()), int(part["not_converged"].sum())
    if runs == 0:
        return ""
    if flagged:
        return f"{flagged} of {runs} runs not converged (Convergence section)"  # short: one panel's width
    return f"none of {runs} runs flagged not converged"


def build_tables(results: PaperResults, complexity_csv: str | Path, icl: pt.IclRecords | None = None) -> list[Table]:
    """The paper's tables in the paper's order (2, 3, 4, 5–7, 8, 9, 10); `icl`: the pretrained in-context
    models' records, rows of Table 3."""
    cfg = results.config
    tables = [pt.table2(results), pt.table3(results, icl), pt.table4(results, complexity_csv)]
    tables += [pt.table_std(results, d, 5 + i) for i, d in enumerate(cfg.datasets)]
    tables += [pt.table8(results), pt.table9(results)]
    if "higgs" in cfg.datasets:
        tables.append(pt.table10(results))
    return tables


def _figure_data_csv(frame: pd.DataFrame, groups: Sequence[str]) -> str:
    """Long-form series for `dvc plots` (.dvc/plots/delta_m.json: x = delta_m, y = level, a bar per model; `data`
    says stand-in data, which the plot's title then says); a missing value is the string 'missing' (Vega draws
    no bar for it)."""
    rows: list[list[object]] = [["label", "group", "level", "model", "delta_m", "se", "n_seeds", "data"]]
    for _, r in frame[frame.group.isin(groups)].iterrows():
        missing = bool(r["missing"])
        rows.append([f"{r['group']} | {r['level']} | {r['model']}", r["group"], r["level"], r["model"],
                     MISSING if missing else ("n/a" if math.isnan(r["delta_m"]) else f"{r['delta_m']:.6f}"),
                     MISSING if missing or math.isnan(r["se"]) else f"{r['se']:.6f}", r["n_seeds"], r["data"]])
    return csv_text(rows)


def _json_value(value: float | None) -> object:
    return MISSING if value is None else ("n/a" if math.isnan(value) else round(value, 6))


def _summary(results: PaperResults, tables: Sequence[Table]) -> dict[str, object]:
    """results/metrics.json: the headline numbers, strings "missing" where a value is missing."""
    cfg = results.config
    delta: dict[str, dict[str, object]] = {}
    for d in cfg.datasets:
        delta[d] = {}
        for m in cfg.rows:
            v = results.delta_m(d, m)
            delta[d][cfg.label(m)] = _json_value(v)
    by_name = {t.name: t for t in tables}
    pvals: dict[str, dict[str, dict[str, object]]] = {}
    for name in ("table8_t_test", "table9_wilcoxon"):
        if name not in by_name:
            continue
        t = by_name[name]
        pvals[name] = {}
        for row in t.rows:
            scope = str(row[0])
            pvals[name][scope] = {col: _json_value(c.value) for col, c in zip(t.header[1:], row[1:])}  # type: ignore[union-attr]
    return {
        "standin": {d: results.runs.standin(d) for d in (*cfg.datasets, *results.synthetic)},
        "delta_m": delta,
        **pvals,
    }


def _curve_rows(curves: dict[str, pd.DataFrame], standin: Sequence[str] = ()) -> pd.DataFrame:
    """Long-form rows for `dvc plots` (one file per curve, every dataset in it: the plot draws a panel per
    dataset and a line per model): dataset, model, epoch (1 = the first), value, data (`stand-in data` for the
    datasets in `standin`, which the plot's title then says; else `real`); models without a log left out."""
    parts = [pd.DataFrame({"dataset": d, "model": label, "epoch": series.index + 1, "value": series.to_numpy(),
                           "data": STANDIN_MARK if d in standin else "real"})
             for d, frame in curves.items() for label in frame.columns if not (series := frame[label].dropna()).empty]
    columns = ["dataset", "model", "epoch", "value", "data"]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)


def write_curves(results: PaperResults, runs_dir: Path, out: Outputs) -> tuple[list[Path], str]:
    """results/plots/learning_curves_<curve>.csv (dvc plots) and results/figures/learning_curves.*;
    returns the paths and the report section. A model that trains in boosting rounds (XGBoost: one log line, the
    registry's `epochs`) has no curve."""
    cfg = results.config
    models = [m for m in cfg.rows if trains_in_epochs(m)]
    labels = [cfg.label(m) for m in models]
    written: list[Path] = []
    val_curves = {}
    standin = results.standin(cfg.datasets)
    for name in CURVES:
        frames = {d: seed_mean_curves(runs_dir, d, models, labels, results.runs.seeds(d), name) for d in cfg.datasets}
        if name == "val_mean":
            val_curves = frames
        path = out.plots / f"learning_curves_{name}.csv"
        write_csv(path, _curve_rows(frames, standin), float_format="%.6f")
        written.append(path)
    fig = figures.curves_figure(val_curves, "validation mean metric (AUC / EV)",
                                "Learning curves: validation mean metric, seed mean", bool(standin))
    paths = figures.save_figure(fig, out.figures, "learning_curves", cfg.figures.dpi)
    written += paths
    have = {d: [c for c in f.columns if f[c].notna().any()] for d, f in val_curves.items()}
    rel = os.path.relpath(paths[0], out.report.parent)
    no_epochs = [cfg.label(m) for m in cfg.rows if not trains_in_epochs(m)]
    lines = [f"## Learning curves{' [' + STANDIN_MARK + ']' if standin else ''}", "",
             f"![Learning curves]({rel})", "",
             "Seed mean of the per-epoch validation mean metric (the early-stopping criterion) from each run's dvclive "
             "log; `dvc plots show` draws these and the training loss from results/plots/learning_curves_*.csv."
             + (f" {', '.join(no_epochs)}: no curve (boosting rounds, not epochs)." if no_epochs else ""), ""]
    lines += [f"- {md_text(d)}: " + (", ".join(have[d]) if have[d] else MISSING)
              + (f"; {MISSING}: " + ", ".join(lab for lab in labels if lab not in have[d]) if have[d] and
                 len(have[d]) < len(labels) else "") for d in cfg.datasets]
    return written, "\n".join(lines) + "\n"


def build_results(runs: RunSet, config: AggregateConfig, published: Published,
                  synthetic: dict[str, SyntheticConfig], complexity_csv: str | Path, out: Outputs,
                  runs_dir: str | Path | None = None, provenance: Provenance | None = None,
                  icl_dir: str | Path | None = None, *, root: str | Path | None = None,
                  study_index: Path | None = None) -> list[Path]:
    """Compute and write every output; returns the paths written. `runs_dir`: where the runs' dvclive
    learning-curve logs are (None: no curves). `provenance`: the commit, params hash and the study's budget
    the report's first screen states (None: unknown, and every MultiTab-Bench verdict stands). `icl_dir`: the
    `icl` stage's records (results/icl), rows of Table 3 and, for MultiTab-Bench configurations, a table beside the
    bench runs (None: no such rows). `root`: the project root (a file the report names becomes a link in
    report.html; None: none); `study_index`: the committed study records' page, linked from the report."""
    provenance = provenance or Provenance()
    results = PaperResults(runs, config, published, synthetic)
    icl = read_records(icl_dir) if icl_dir is not None else None
    tables = build_tables(results, complexity_csv, icl)
    synth = pt.synthetic_delta_m(results)
    figure_tables = [
        pt.table_synthetic(results, synth, FIGURE5_GROUPS, "figure5_delta_m",
                           "Figure 5 data: Δm (%) and standard error per MultiTab-Bench configuration"),
        pt.table_synthetic(results, synth, FIGURE6_GROUPS, "figure6_delta_m",
                           "Figure 6 data: Δm (%) and standard error, non-uniform task complexities"),
    ]
    written: list[Path] = []
    for t in (*tables, *figure_tables):
        written += t.write(out.tables)
    comparison = pd.DataFrame(comparison_rows(tables),
                              columns=["table", "row", "column", "ours", "paper", "difference", "stand_in"])
    path = out.tables / "comparison_with_paper.csv"
    write_csv(path, comparison)
    written.append(path)

    bench = bench_inputs(results, Path(runs_dir) if runs_dir is not None else None, provenance.budget)
    conv = None
    convergence_csv = None
    if bench is not None:  # the flags the figures' notes and the report's Convergence paragraph count
        conv = convergence(bench.metrics, bench.settings)
        convergence_csv = out.tables / "convergence.csv"
        write_csv(convergence_csv, conv)
        written.append(convergence_csv)

    labels = [config.label(m) for m in config.figures.models]
    figure_paths = {}
    figure_notes: dict[str, str] = {}
    for name, groups, title in (
        ("figure5", FIGURE5_GROUPS, "Figure 5: Δm (STL-relative) as task correlation, complexity and count vary"),
        ("figure6", FIGURE6_GROUPS, "Figure 6: Δm (STL-relative) with non-uniform task complexities"),
    ):
        part = synth[synth.group.isin(groups)]
        fig = figures.delta_m_figure(part, groups, labels, title, _convergence_note(conv, set(part.config)))
        paths = figures.save_figure(fig, out.figures, f"{name}_delta_m", config.figures.dpi)
        figure_paths[name] = paths[0]
        shown = part[~part["missing"].astype(bool)]
        figure_notes[name] = figures.error_bar_caption(shown["n_seeds"]) if len(shown) else ""
        written += paths
        plot_path = out.plots / f"{name}_delta_m.csv"
        _write_text(plot_path, _figure_data_csv(synth, groups))
        written.append(plot_path)

    curves_section = ""
    if runs_dir is not None:
        paths, curves_section = write_curves(results, Path(runs_dir), out)
        written += paths
    write_json(out.metrics, _summary(results, tables))
    written.append(out.metrics)
    lead = bench_section(bench, figure_paths, out.report, convergence_csv)
    if bench is not None and icl:
        lead += "\n" + icl_beside_bench(bench.metrics, bench.models, {m: config.label(m) for m in bench.models}, icl)
    markdown = render_report(results, tables, figure_tables, figure_paths, out.report, curves_section, lead,
                             provenance, figure_notes, lead_figures=bench is not None, study_index=study_index)
    _write_text(out.report, markdown)
    written.append(out.report)
    if out.html is not None:
        html = out.html.resolve()
        links = Links(source=html.parent, page=html, root=Path(root).resolve() if root is not None else None,
                      fresh=frozenset(p.resolve() for p in written))
        _write_text(out.html, report_page(markdown, links=links))
        written.append(out.html)
    log.info("aggregate: wrote %d files; summary %s", len(written), json.dumps(_summary(results, tables)["standin"]))
    return written
