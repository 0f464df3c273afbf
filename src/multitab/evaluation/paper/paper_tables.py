"""The paper's tables (2, 3, 4, 5–7, 8, 9, 10) and the Figure 5/6 data, laid out from `PaperResults`, with
the published value in each cell that has one."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from multitab.evaluation.delta_m import delta_m
from multitab.evaluation.paper.results import METRIC_LABEL, PaperResults
from multitab.evaluation.significance import t_test_greater, wilcoxon_greater
from multitab.evaluation.tables import MISSING, ONE_SEED, Cell, Table, undefined_text
from multitab.icl.records import LABELS as ICL_LABELS
from multitab.icl.records import PRETRAINED

log = logging.getLogger(__name__)


def _pct(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def _models(results: PaperResults) -> list[str]:
    return list(results.config.rows)


IclRecords = Mapping[tuple[str, str], Sequence[Mapping[str, Any]]]


def icl_rows(results: PaperResults, icl: IclRecords) -> tuple[list[list[Cell | str]], list[str]]:
    """Table 3's rows of the pretrained in-context models (multitab.icl.records) and their notes: a task's
    seed-mean test metric where every seed's record has one, else the record's own words ("not run: no
    checkpoint", "not applicable"); Δm against the baseline's seed mean when every task has a metric."""
    cfg = results.config
    rows: list[list[Cell | str]] = []
    notes: list[str] = []
    for model, label in ICL_LABELS.items():
        if not any(m == model for _, m in icl):
            continue
        row: list[Cell | str] = [f"{label} ({PRETRAINED})"]
        shas = set()
        for d in cfg.datasets:
            records = list(icl.get((d, model), []))
            tasks = results.tasks(d)
            means: dict[str, float] = {}
            for t in tasks:
                values = [float(r["test"][t]) for r in records if r["status"].get(t) == "ok"]
                if records and len(values) == len(records):
                    means[t] = float(np.mean(values))
                    row.append(Cell(_pct(means[t]), 2))
                else:
                    words = next((r["status"][t] for r in records if r["status"].get(t, "ok") != "ok"), MISSING)
                    row.append(Cell(None, 2, missing=words))
            base = results.delta_inputs(d, cfg.baseline)
            dm: float | None = None
            if len(means) == len(tasks) and base is not None and not results.lower_is_better(d):
                try:
                    dm = delta_m(means, base.mean(axis=0).to_dict())
                except ValueError:
                    dm = math.nan
            row.append(Cell(dm, 4, missing=f"{MISSING} (STL)" if len(means) == len(tasks) else "n/a"))
            shas |= {f"{name} sha256 {c['sha256']}" for r in records for name, c in r["checkpoints"].items()}
        rows.append(row)
        notes.append(f"{label}: {PRETRAINED}; " + (f"produced with the checkpoint(s) {', '.join(sorted(shas))}"
                                                    if shas else "not run: no checkpoint (docs/icl.md)") + ".")
    return rows, notes


def table3(results: PaperResults, icl: IclRecords | None = None) -> Table:
    """Table 3: test metrics (percent, seed means) and Δm per dataset, with the published values; with
    `icl`, rows for the pretrained in-context models after the trained ones."""
    cfg, pub = results.config, results.published
    header = ["Model"]
    for d in cfg.datasets:
        header += [f"{d} {t} {METRIC_LABEL[tt]}" for t, tt in results.tasks(d).items()] + [f"{d} Δm"]
    rows: list[list[Cell | str]] = []
    for model in _models(results):
        label = cfg.label(model)
        row: list[Cell | str] = [label]
        for d in cfg.datasets:
            mean = results.mean(d, model)
            miss = results.missing_text(d, model)
            for t in results.tasks(d):
                row.append(Cell(None if mean is None else _pct(float(mean[t])), 2,
                                pub.table3.get((d, t, label)), missing=miss))
            dm = results.delta_m(d, model)
            row.append(Cell(dm, 4, pub.table3.get((d, "delta_m", label)),
                            missing=miss if mean is None else f"{MISSING} (STL)"))
        rows.append(row)
    extra_rows, extra_notes = icl_rows(results, icl) if icl else ([], [])
    return Table("table3_test_results", "Table 3: test results (AUC / EV in %, mean over seeds) and Δm (%)",
                 header, rows + extra_rows, results.standin(cfg.datasets),
                 notes=[f"Δm (Equation 5) of seed-mean metrics against the {cfg.label(cfg.baseline)} seed-mean; "
                        f"regression metric for Δm: {cfg.regression_metric.upper()}.", *extra_notes])


def table_std(results: PaperResults, dataset: str, number: int) -> Table:
    """Tables 5–7: mean and standard deviation over seeds per task, and of the per-seed Δm."""
    cfg, pub = results.config, results.published
    tasks = results.tasks(dataset)
    header = ["Model"]
    for t, tt in tasks.items():
        header += [f"{t} {METRIC_LABEL[tt]} μ", f"{t} {METRIC_LABEL[tt]} σ"]
    header += ["Δm μ", "Δm σ"]
    rows: list[list[Cell | str]] = []
    na = undefined_text(len(results.runs.seeds(dataset)))  # σ of one seed
    for model in _models(results):
        label = cfg.label(model)
        mean, std = results.mean(dataset, model), results.std(dataset, model)
        miss = results.missing_text(dataset, model)
        row: list[Cell | str] = [label]
        for t in tasks:
            p = pub.tables5to7.get((dataset, t, label))
            row.append(Cell(None if mean is None else _pct(float(mean[t])), 2, p[0] if p else None, miss))
            row.append(Cell(None if std is None else _pct(float(std[t])), 2, p[1] if p else None, miss, na))
        p = pub.tables5to7.get((dataset, "delta_m", label))
        spread = results.delta_m_spread(dataset, model)
        dm_miss = miss if mean is None else f"{MISSING} (STL)"
        row.append(Cell(results.delta_m(dataset, model), 4, p[0] if p else None, dm_miss))
        row.append(Cell(None if spread is None else spread[0], 4, p[1] if p else None, dm_miss, na))
        rows.append(row)
    pairing = "the STL seed-mean" if cfg.pairing == "mean" else "the STL run of the same seed"
    notes = [f"σ with ddof={cfg.std_ddof}; Δm σ: spread of the per-seed Δm, each seed against {pairing}."]
    if dataset == "higgs":
        notes.append("The paper's Tables 3 and 7 differ in the last printed digit for a few Higgs cells (e.g. "
                     "MultiTab-Net Δm 1.2337 in Table 3, 1.2327 in Table 7); each table is compared with its own "
                     "printed values.")
    return Table(f"table{number}_{dataset}_std",
                 f"Table {number}: {dataset}, mean (μ) and standard deviation (σ) over seeds",
                 header, rows, results.standin([dataset]), notes=notes)


def table10(results: PaperResults, dataset: str = "higgs") -> Table:
    """Table 10: Higgs regression MSE per task (mean, σ over seeds) and the average of the task means."""
    cfg, pub = results.config, results.published
    reg = [t for t, tt in results.tasks(dataset).items() if tt == "regression"]
    header = ["Model"] + [h for t in reg for h in (f"{t} MSE μ", f"{t} MSE σ")] + ["Avg. MSE"]
    rows: list[list[Cell | str]] = []
    na = undefined_text(len(results.runs.seeds(dataset)))  # σ of one seed
    for model in _models(results):
        label = cfg.label(model)
        mean, std = results.mean(dataset, model, "test_mse"), results.std(dataset, model, "test_mse")
        miss = results.missing_text(dataset, model)
        row: list[Cell | str] = [label]
        for t in reg:
            p = pub.table10.get((label, t))
            row.append(Cell(None if mean is None else float(mean[t]), 4, p[0] if p else None, miss))
            row.append(Cell(None if std is None else float(std[t]), 4, p[1] if p else None, miss, na))
        p = pub.table10.get((label, "average"))
        row.append(Cell(None if mean is None else float(mean.mean()), 4, p[0] if p else None, miss))
        rows.append(row)
    return Table("table10_higgs_mse", f"Table 10: {dataset} regression MSE (target units), mean and σ over seeds",
                 header, rows, results.standin([dataset]))


def table2(results: PaperResults) -> Table:
    """Table 2: Δm of the MultiTab-Net ablation rows (task tokens × attention mask) per dataset."""
    cfg, pub = results.config, results.published
    header = ["Task tokens", "Attention mask", "Run"] + [f"{d} Δm" for d in cfg.datasets]
    rows: list[list[Cell | str]] = []
    for r in cfg.ablation:
        row: list[Cell | str] = [r.task_tokens, r.attention_mask, r.model]
        for d in cfg.datasets:
            has_runs = results.runs.matrix(d, r.model) is not None
            row.append(Cell(results.delta_m(d, r.model), 4, pub.table2.get((r.task_tokens, r.attention_mask, d)),
                            missing=results.missing_text(d, r.model) if not has_runs else f"{MISSING} (STL)"))
        rows.append(row)
    return Table("table2_ablation", "Table 2: MultiTab-Net ablation of task tokens and attention masks (Δm, %)",
                 header, rows, results.standin(cfg.datasets),
                 notes=["Run names `<model>@<variant>` (params.yaml aggregate.ablation); every row is its own "
                        "variant with explicit task tokens and mask, so it is what it says under either protocol "
                        "(docs/deviations.md); the last row is the configuration the paper selects."])


def table4(results: PaperResults, complexity_csv: str | Path) -> Table:
    """Table 4: parameters and FLOPs per sample (millions) from the complexity stage's CSV."""
    cfg, pub = results.config, results.published
    path = Path(complexity_csv)
    header = ["Model"] + [h for d in cfg.datasets for h in (f"{d} params (M)", f"{d} FLOPs (M)")]
    frame: pd.DataFrame | None = None
    notes = []
    if path.exists():
        frame = pd.read_csv(path, comment="#")
        need = {"dataset", "model", "params", "flops"}
        if not need <= set(frame.columns):
            raise ValueError(f"{path}: columns {sorted(frame.columns)} lack {sorted(need - set(frame.columns))}; "
                             "re-run the complexity stage")
    else:
        notes.append(f"{path} is missing (the complexity stage has not run): every cell is missing.")
    standin = []
    rows: list[list[Cell | str]] = []
    for model in _models(results):
        label = cfg.label(model)
        row: list[Cell | str] = [label]
        for d in cfg.datasets:
            # the complexity stage names models by registry name; the paper's label is accepted too
            hit = None if frame is None else frame[(frame.dataset == d) & frame.model.isin([model, label])]
            p = pub.table4.get((label, d))
            if hit is None or hit.empty:
                row += [Cell(None, 2, p[0] if p else None), Cell(None, 2, p[1] if p else None)]
                continue
            rec = hit.iloc[0]
            row += [Cell(float(rec["params"]) / 1e6, 2, p[0] if p else None),
                    Cell(float(rec["flops"]) / 1e6, 2, p[1] if p else None)]
            stand = bool(rec["standin"]) if "standin" in hit.columns else bool(results.runs.standin(d))
            if stand and d not in standin:
                standin.append(d)
        rows.append(row)
    notes.append("FLOPs per sample (2 × multiply–accumulate), as counted by the complexity stage.")
    return Table("table4_params_flops", "Table 4: parameters and FLOPs per sample (millions)",
                 header, rows, standin, notes)


def _significance_rows(results: PaperResults, kind: str) -> tuple[list[str], list[list[Cell | str]]]:
    cfg, pub = results.config, results.published
    sig = cfg.significance
    header = ["Dataset"] + [cfg.label(b) for b in sig.baselines]
    rows: list[list[Cell | str]] = []
    scopes = list(cfg.datasets) + (["global"] if kind == "wilcoxon" else [])
    for scope in scopes:
        row: list[Cell | str] = [scope]
        for b in sig.baselines:
            published = (pub.table8 if kind == "t" else pub.table9).get((scope, cfg.label(b)))
            p, why = _p_value(results, kind, scope, sig.model, b)
            row.append(Cell(p, 4, published, na=why or "n/a"))
        rows.append(row)
    return header, rows


def _p_value(results: PaperResults, kind: str, scope: str, model: str, baseline: str) -> tuple[float | None, str]:
    """(p, why): p None when a run set is missing; NaN (printed n/a, or `why` where it says why) when it cannot
    be computed."""
    try:
        return _p_value_of(results, kind, scope, model, baseline), ""
    except _Undefined as e:
        return math.nan, str(e)


class _Undefined(Exception):
    """A p-value the runs cannot give; the message, when there is one, is the cell's text."""


def _finite(values: np.ndarray) -> np.ndarray:
    if not np.all(np.isfinite(values)):
        raise _Undefined
    return values


def _p_value_of(results: PaperResults, kind: str, scope: str, model: str, baseline: str) -> float | None:
    cfg = results.config
    if kind == "t":
        a, b = results.delta_m_per_seed(scope, model), results.delta_m_per_seed(scope, baseline)
        if a is None or b is None:
            return None
        if len(a) < 2 or len(b) < 2:
            raise _Undefined(ONE_SEED)  # one seed: no spread to test (the paper uses five seeds)
        return t_test_greater(_finite(a.to_numpy()), _finite(b.to_numpy()),
                              equal_var=cfg.significance.equal_var).pvalue
    if scope == "global":
        xs, ys = [], []
        for d in cfg.datasets:
            a, b = results.delta_m_per_seed(d, model), results.delta_m_per_seed(d, baseline)
            if a is None or b is None:
                return None
            xs.append(a.to_numpy())
            ys.append(b.loc[a.index].to_numpy())  # paired by (dataset, seed)
        return wilcoxon_greater(_finite(np.concatenate(xs)), _finite(np.concatenate(ys))).pvalue
    ga, gb = results.task_gains_per_seed(scope, model), results.task_gains_per_seed(scope, baseline)
    if ga is None or gb is None:
        return None
    gb = gb.loc[ga.index, ga.columns]  # paired by (task, seed)
    return wilcoxon_greater(_finite(ga.to_numpy().ravel()), _finite(gb.to_numpy().ravel())).pvalue


def table8(results: PaperResults) -> Table:
    header, rows = _significance_rows(results, "t")
    sig = results.config.significance
    kind = "Student's" if sig.equal_var else "Welch's"
    notes = [f"{kind} independent two-sample t-test over the per-seed Δm of each dataset; "
             "p < 0.05 marks a significant improvement."]
    if any(isinstance(c, Cell) and c.na == ONE_SEED for row in rows for c in row):
        notes.append(f"`{ONE_SEED}`: a t-test needs at least two seeds of each model; these runs have one.")
    return Table("table8_t_test",
                 f"Table 8: one-sided t-test p-values, {results.config.label(sig.model)} Δm > baseline Δm",
                 header, rows, results.standin(results.config.datasets), notes=notes)


def table9(results: PaperResults) -> Table:
    header, rows = _significance_rows(results, "wilcoxon")
    sig = results.config.significance
    return Table("table9_wilcoxon",
                 f"Table 9: one-sided Wilcoxon signed-rank p-values, {results.config.label(sig.model)} "
                 "against each baseline",
                 header, rows, results.standin(results.config.datasets),
                 notes=["Per dataset: per-task, per-seed gains paired by (task, seed); global: per-seed Δm of every "
                        "dataset paired by (dataset, seed)."])


def synthetic_delta_m(results: PaperResults) -> pd.DataFrame:
    """One row per (group, configuration, model) of Figures 5–6: Δm, its standard error and n seeds.
    Missing values are NaN with `missing` True."""
    cfg = results.config
    records = []
    for group in ("correlation", "complexity", "count", "nonuniform", "other"):
        members = sorted((c for c in results.synthetic.values() if group in c.groups), key=lambda c: c.sort_key(group))
        for conf in members:
            for model in cfg.figures.models:
                dm = results.delta_m(conf.name, model)
                spread = results.delta_m_spread(conf.name, model)
                records.append({
                    "group": group, "config": conf.name, "level": conf.level(group), "model": cfg.label(model),
                    "delta_m": math.nan if dm is None else dm,
                    "se": math.nan if spread is None else spread[1],
                    "n_seeds": 0 if spread is None else spread[2],
                    "missing": dm is None, "standin": bool(results.runs.standin(conf.name)),
                    "data": _data_kind(results.runs.standin(conf.name)),
                })
    return pd.DataFrame.from_records(records, columns=["group", "config", "level", "model", "delta_m", "se",
                                                       "n_seeds", "missing", "standin", "data"])


def _data_kind(standin: bool | None) -> str:
    return MISSING if standin is None else ("stand-in data" if standin else "real")


def table_synthetic(results: PaperResults, frame: pd.DataFrame, groups: Sequence[str], name: str, title: str) -> Table:
    cfg = results.config
    labels = [cfg.label(m) for m in cfg.figures.models]
    header = ["Group", "Configuration", "Level"] + [h for lab in labels for h in (f"{lab} Δm", f"{lab} SE")]
    rows: list[list[Cell | str]] = []
    sub = frame[frame.group.isin(groups)]
    for (group, conf, level), part in sub.groupby(["group", "config", "level"], sort=False):
        row: list[Cell | str] = [str(group), str(conf), str(level)]
        for lab in labels:
            hit = part[part.model == lab]
            rec = hit.iloc[0] if not hit.empty else None
            missing = rec is None or bool(rec["missing"])
            row.append(Cell(None if missing else float(rec["delta_m"]), 4))  # type: ignore[index]
            row.append(Cell(None if missing else float(rec["se"]), 4,  # type: ignore[index]
                            na=undefined_text(0 if missing else int(rec["n_seeds"]))))  # type: ignore[index]
        rows.append(row)
    standin = sorted(set(sub.loc[sub.standin, "config"]))
    notes = [] if rows else ["No MultiTab-Bench configuration of these groups in params.yaml (bench.configs)."]
    return Table(name, title, header, rows, standin, notes)
