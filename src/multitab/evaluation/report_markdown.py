"""The report's Markdown (results/report.md): banners, the inputs, the tables and figures in the paper's
order, the agreement with the published numbers, and the MultiTab-Bench section it leads with."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from multitab.evaluation import bench_study
from multitab.evaluation import study as st
from multitab.evaluation.tables import MISSING, STANDIN_MARK, Table


def inputs_section(study: st.Study) -> list[str]:
    cfg = study.config
    lines = ["## Inputs", "",
             "| Dataset | Data | Seeds expected | Complete run sets | Incomplete or missing |",
             "|---|---|---|---|---|"]
    for d in (*cfg.datasets, *study.synthetic):
        seeds = study.runs.seeds(d)
        flag = study.runs.standin(d)
        data = MISSING if flag is None else (STANDIN_MARK if flag else "real")
        names = [*cfg.models, *(r.model for r in cfg.ablation if r.model not in cfg.models)]
        if d not in cfg.datasets:
            names = [cfg.baseline, *cfg.figures.models]
        complete = [m for m in names if study.runs.matrix(d, m) is not None]
        incomplete = [f"{m} ({study.runs.n_found(d, m)}/{len(seeds)})" for m in names if m not in complete]
        lines.append(f"| {d} | {data} | {', '.join(map(str, seeds)) or MISSING} | {len(complete)} | "
                     f"{', '.join(incomplete) or '—'} |")
    unused = [d for d in study.runs.datasets if d not in cfg.datasets and d not in study.synthetic]
    if unused:
        lines += ["", f"Runs of datasets named neither in aggregate.datasets nor in bench.configs (not used): "
                      f"{', '.join(unused)}."]
    shown = {*cfg.models, *(r.model for r in cfg.ablation)}
    extra = [f"{d}/{m}" for d in cfg.datasets for m in study.runs.models(d) if m not in shown]
    if extra:
        lines += ["", f"Run sets in no table (add them to aggregate.models or aggregate.ablation): {', '.join(extra)}."]
    return lines + [""]


def agreement_section(tables: Sequence[Table]) -> list[str]:
    lines = ["## Agreement with the published numbers", "",
             "| Table | Cells with a published value | Ours missing | Mean abs. difference | Max abs. difference |",
             "|---|---:|---:|---:|---:|"]
    for t in tables:
        cells = [c for _, _, c in t.cells() if c.paper is not None]
        if not cells:
            continue
        diffs = [abs(c.difference) for c in cells if c.difference is not None]
        missing = sum(c.difference is None for c in cells)
        mean = f"{sum(diffs) / len(diffs):.4f}" if diffs else MISSING
        mx = f"{max(diffs):.4f}" if diffs else MISSING
        lines.append(f"| {t.name}{' (' + STANDIN_MARK + ')' if t.standin else ''} | {len(cells)} | {missing} | {mean} | {mx} |")
    return lines + [""]


def validation_banner(study: st.Study) -> list[str]:
    """Warnings of the data validation (params validation.policy: warn) carried by the runs' metrics.json."""
    out = []
    for d in study.runs.datasets:
        warns = sorted({w for m in study.runs.models(d) for r in study.runs.runs(d, m).values()
                        for w in r.extra.get("validation_warnings") or []})
        if warns:
            shown = "; ".join(warns[:5]) + (f"; ... {len(warns) - 5} more" if len(warns) > 5 else "")
            out += [f"> **DATA DIFFERS FROM THE PUBLISHED FACTS ({d})**: {len(warns)} validation check(s) of "
                    f"estimates did not hold and were let through as warnings (params `validation.policy.{d}`): "
                    f"{shown}. See reports/validation/index.html.", ""]
    return out


def bench_section(study: st.Study, runs_dir: Path | None, figure_paths: dict[str, Path], report_path: Path) -> str:
    """The MultiTab-Bench section the report leads with: Δm (mean ± σ) per configuration and model and the
    paper's claim checked per configuration (multitab.evaluation.bench_study), from the bench runs of
    `runs_dir`; empty when there are none. Points at a `make study` report when one exists beside it."""
    if runs_dir is None or not study.synthetic:
        return ""
    cfg = study.config
    models = [cfg.baseline, *[m for m in cfg.figures.models if m != cfg.baseline]]
    metrics, _ = bench_study.collect(runs_dir, study.synthetic, models)
    if metrics.empty:
        return ""
    settings = bench_study.StudySettings(baseline=cfg.baseline, labels={**cfg.models},
                                         model=cfg.significance.model,
                                         rivals=tuple(m for m in cfg.figures.models if m != cfg.significance.model))
    prefix = os.path.relpath(figure_paths["figure5"].parent, report_path.parent) + "/"
    header = ["From the `train_bench` runs (params `bench.train`; the default is one seed for a few epochs, and "
              "with one seed no t-test is run). `make study` trains Figures 5-6 to convergence over several seeds "
              "(docs/study.md).", ""]
    study_report = report_path.parent / "study_report" / "report.md"
    if study_report.is_file():
        header += [f"A `make study` report exists: [{os.path.relpath(study_report, report_path.parent)}]"
                   f"({os.path.relpath(study_report, report_path.parent)}).", ""]
    return bench_study.section_only(metrics, settings, models, header=header, figure_prefix=prefix)


def render_report(study: st.Study, tables: Sequence[Table], figure_tables: Sequence[Table],
                  figure_paths: dict[str, Path], report_path: Path, curves_section: str = "",
                  lead_section: str = "") -> str:
    cfg = study.config
    standin = sorted({d for t in (*tables, *figure_tables) for d in t.standin})
    lines = ["# MultiTab: the study's tables and figures, regenerated", ""]
    if lead_section:
        lines += [lead_section, ""]
    if standin:
        lines += [f"> **{STANDIN_MARK.upper()}**: inputs {', '.join(standin)} come from generated stand-in data. "
                  "Every number built from them is a pipeline check, not a result of the study.", ""]
    lines += validation_banner(study)
    caps = study.runs.training_caps()
    if caps:
        lines += [f"> **REDUCED TRAINING**: runs were trained on at most {caps['max_train_rows']} training rows for at "
                  f"most {caps['max_epochs']} epochs (params `train.max_train_rows`, `train.max_epochs`), not the "
                  "paper's full protocol (all rows, early stopping within 100 epochs, 50 for AliExpress). Their "
                  "metrics check the pipeline; they do not reproduce the study.", ""]
    lines += [
        "Metrics in percent (AUC, explained variance), Δm in percent (Equation 5, against "
        f"{cfg.label(cfg.baseline)}), MSE in target units, p-values one-sided. Where the paper printed a value the "
        "cell reads `ours (paper P; Δ ours − paper)`. `missing` marks a run that failed or was not run "
        "(`missing (k/n seeds)`: only k of the n expected seeds exist); it is never replaced by a number.", "",
    ]
    lines += inputs_section(study)
    by_name = {t.name: t for t in tables}
    order = ["table2_ablation", "table3_test_results", "figure5", "figure6", "table4_params_flops"]
    order += [t.name for t in tables if t.name.startswith(("table5", "table6", "table7"))]
    order += ["table8_t_test", "table9_wilcoxon", "table10_higgs_mse"]
    fig_tables = {t.name: t for t in figure_tables}
    for name in order:
        if name in by_name:
            lines.append(by_name[name].to_markdown(compare=True, heading="##"))
            continue
        if name in ("figure5", "figure6"):
            number = name[-1]
            ft = fig_tables[f"{name}_delta_m"]
            title = ("Figure 5: Δm under varied task correlation, complexity and count" if number == "5"
                     else "Figure 6: Δm with non-uniform task complexities")
            mark = f" [{STANDIN_MARK}]" if ft.standin else ""
            rel = os.path.relpath(figure_paths[name], report_path.parent)
            lines += [f"## {title}{mark}", "", f"![{title}]({rel})", "",
                      "The paper publishes Figures 5 and 6 as bar charts only (no numbers to compare). "
                      "Error bars: standard error of the per-seed Δm.", ""]
            lines.append(ft.to_markdown(heading="###"))
    lines += agreement_section(tables)
    if curves_section:
        lines.append(curves_section)
    return "\n".join(lines)
