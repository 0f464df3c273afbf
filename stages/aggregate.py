"""aggregate: the paper's tables, significance tests, figures and results/report.md from the runs.

Reads results/runs/<dataset>/<model>/seed<S>/metrics.json of the runs params.yaml declares (a run folder
left from an earlier matrix is listed and left out; a run trained under other settings is refused) and the
complexity table (when present); never trains. The report's first screen states the commit, the params
hash and the study's budget (params `study`). With --study (results/study: the committed records) the entry page
opens with the newest complete record's answer, and --study-html writes every record as a page. Every path
comes from dvc.yaml's command line.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

from multitab.config import Params, load_params
from multitab.config.aggregate import synthetic_configs
from multitab.config.attribution import study_settings
from multitab.datasets.split import split_sizes
from multitab.evaluation.bench.numbers import Budget
from multitab.evaluation.paper.budget import group_budgets
from multitab.evaluation.paper.entry_page import write_entry_page
from multitab.evaluation.paper.published import load_published
from multitab.evaluation.paper.report import Outputs, build_results
from multitab.evaluation.paper.report_markdown import Provenance
from multitab.evaluation.paper.runs import RunSet, load_runs, select_declared
from multitab.evaluation.paper.study_pages import README, page_map, write_study_pages
from multitab.files.io import all_or_nothing, remove_stale_temporaries
from multitab.runs.expand import declared_runs
from multitab.runs.profiles import group_train, profiled
from multitab.runtime.provenance import flow_run_name, git_commit
from stages._common import parser, run


def aggregate(a: argparse.Namespace) -> None:
    params = load_params(a.params)
    config = params.aggregate
    synthetic = synthetic_configs(params.bench.configs if "bench" in params.sections else {})
    # exactly the runs params.yaml declares, each trained under the settings it declares now
    runs = RunSet(select_declared(load_runs(a.runs), params), seeds=config.seeds)
    outputs = Outputs(tables=a.tables, figures=a.figures, plots=a.plots, report=a.report, metrics=a.metrics,
                      html=a.html)
    # Debris of a killed earlier run: its temporaries.
    for folder in (a.tables, a.figures):
        remove_stale_temporaries(folder, stems=OWN_STEMS)
    remove_stale_temporaries(a.plots)
    for path in (a.report, a.metrics, a.index, *([a.html] if a.html else [])):
        remove_stale_temporaries(path.parent, path.name)
    if a.study_html is not None:
        for folder in (a.study_html, *(p for p in a.study_html.glob("*") if p.is_dir())):
            remove_stale_temporaries(folder)
    prov = provenance(a.params, params)
    root = Path(a.params).resolve().parent
    # every table, figure, the report, the study records' pages and the entry page: all new, or all as they were
    with all_or_nothing():
        pages = write_study_pages(a.study, a.study_html, root) if a.study is not None and a.study_html else []
        page_of = page_map(a.study, a.study_html) if pages else {}
        readme = (a.study / README).resolve() if a.study is not None else None
        index = page_of.get(readme, readme) if readme is not None and readme.is_file() else None
        written = build_results(runs, config, load_published(), synthetic, a.complexity, outputs,
                                runs_dir=a.runs, provenance=prov, icl_dir=a.icl, root=root, study_index=index)
        write_entry_page(a.index, root, prov, params.protocol, what_ran(params), [*written, *pages],
                         budgets=group_budgets(runs, list(synthetic), prov.budget, [*config.datasets, *synthetic]),
                         flow_run=flow_run_name(), study=a.study, synthetic=synthetic, study_pages=page_of)


def what_ran(params: Params) -> list[str]:
    """The entry page's short account of the run matrix: each dataset's source, each default group's runs."""
    lines = [f"dataset {name}: source {cfg.source}" for name, cfg in params.datasets.items()] \
        if "datasets" in params.sections else []
    runs = declared_runs(params)
    for group in dict.fromkeys(runs.values()):
        n = sum(g == group for g in runs.values())
        lines.append(f"run group {group}: {n} runs (runs.{group} in params.yaml)")
    return lines


def provenance(params_path: Path, params: Params) -> Provenance:
    """The report's provenance: the commit of the checkout, the sha256 of params.yaml, and the study's
    budget (its seeds, and the training rows of `study.data.n_samples` under `bench.data.split`; all of them
    under `protocol: authors_code`, whose arm trains and tests on every row) below which MultiTab-Bench runs
    give no verdict on the paper's claim."""
    budget = None
    if "study" in params.sections and "bench" in params.sections:
        at_study = profiled(params, "study")  # study.data over bench.data
        train = group_train(params, params.study.group)  # the study group's train over train
        settings = study_settings(params)  # None under `paper`
        if settings is not None and settings["evaluation"] == "training_rows":
            n_train = at_study.bench.data.n_samples  # no split: the authors' loader trains on every row
        else:
            n_train, _, _ = split_sizes(at_study.bench.data.n_samples, at_study.bench.data.split)
        if train.max_train_rows is not None:
            n_train = min(n_train, train.max_train_rows)
        budget = Budget(n_seeds=len(params.group(params.study.group).seeds), n_train=n_train)
    digest = hashlib.sha256(Path(params_path).read_bytes()).hexdigest()
    return Provenance(commit=git_commit(Path(params_path).resolve().parent), params_sha256=digest, budget=budget)


# The names of this stage's files in results/tables and results/figures (dvc.yaml's outs: the folders).
OWN_STEMS = ("table", "figure5", "figure6", "comparison_with_paper", "learning_curves", "convergence")


def main(argv: list[str] | None = None) -> int:
    p = parser((__doc__ or "").splitlines()[0])
    p.add_argument("--runs", required=True, type=Path, help="results/runs")
    p.add_argument("--complexity", required=True, type=Path, help="results/complexity/complexity.csv (may be absent)")
    p.add_argument("--tables", required=True, type=Path, help="results/tables")
    p.add_argument("--figures", required=True, type=Path, help="results/figures")
    p.add_argument("--plots", required=True, type=Path, help="results/plots (data series for dvc plots)")
    p.add_argument("--metrics", required=True, type=Path, help="results/metrics.json (for dvc metrics)")
    p.add_argument("--report", required=True, type=Path, help="results/report.md")
    p.add_argument("--html", type=Path, default=None,
                   help="results/report.html: the report as a page, in --report's folder (default: not written)")
    p.add_argument("--index", required=True, type=Path, help="results/index.html (the entry page)")
    p.add_argument("--study", type=Path, default=None,
                   help="results/study: the committed study records; the entry page opens with the newest complete "
                        "record's answer (default: none)")
    p.add_argument("--study-html", type=Path, default=None,
                   help="results/study_html: the records' Markdown as pages, with --study (default: not written)")
    p.add_argument("--icl", type=Path, default=None,
                   help="results/icl: the pretrained in-context models' records, rows of Table 3 (default: none)")
    a = p.parse_args(argv)
    if a.html is not None and a.html.resolve().parent != a.report.resolve().parent:
        p.error(f"--html {a.html} must be in the folder of --report {a.report} (the report's figure paths are "
                "relative to it)")
    if a.study_html is not None and a.study is None:
        p.error("--study-html needs --study (the records it renders)")
    return run("aggregate", lambda: aggregate(a))


if __name__ == "__main__":
    raise SystemExit(main())
