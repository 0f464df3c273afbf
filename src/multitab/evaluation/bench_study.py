"""The MultiTab-Bench study (Figures 5 and 6): per-run metrics → Δm per seed → figures, tables, the claim.

Everything is built from two CSV files, so a committed record regenerates its own figures and tables:

- `metrics.csv`: one row per (configuration, model, seed, task) with the test and validation explained
  variance, the configuration's generator settings (groups, p, PD) and the run's cost (epochs, seconds);
- `curves.csv`: one row per (configuration, model, seed, epoch) with the validation mean EV and the
  training loss (the dvclive logs), for the learning curves.

`collect(runs_dir, ...)` writes those rows from the runs' metrics.json and dvclive logs; `write_study(...)`
writes everything else from them; `regenerate(folder)` does the same for a record folder.

Δm (Equation 5, in %) of a seed is taken against the STL seed mean (the paper's pairing). The claim of the
paper's section "Experiments with MultiTab-Bench", per configuration: MultiTab-Net's Δm is above each of
MMoE's, PLE's and STEM's. Checked by a one-sided Student's t-test over the per-seed Δm (H1: MultiTab-Net's
mean is greater), at level `alpha`. Verdicts: `holds` (every rival below, every p < alpha), `holds in the
means` (every rival's mean below but some p >= alpha, or one seed: no test), `does not hold` (some rival's
mean at or above MultiTab-Net's), `missing`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from multitab.config.aggregate import SyntheticConfig
from multitab.evaluation import figures
from multitab.evaluation.curves import read_curve
from multitab.evaluation.delta_m import UndefinedDeltaM, delta_m_per_seed
from multitab.evaluation.significance import t_test_greater
from multitab.io import atomic_path

log = logging.getLogger(__name__)

METRICS_COLUMNS = ["config", "groups", "correlation", "degrees", "model", "seed", "task", "test_ev", "val_ev",
                   "best_epoch", "epochs", "max_epochs", "stopped_early", "train_seconds", "samples_per_second",
                   "n_train", "device"]
CURVES_COLUMNS = ["config", "model", "seed", "epoch", "val_mean", "train_loss"]
FIGURE5_GROUPS = ("correlation", "complexity", "count")
FIGURE6_GROUPS = ("nonuniform",)
DEFAULT_LABELS = {"stl_mlp": "STL", "mmoe": "MMoE", "ple": "PLE", "stem": "STEM", "multitab_net": "MultiTab-Net"}


class StudyError(ValueError):
    """A study input (metrics CSV, runs) is malformed; the message names the file and what to do."""


@dataclass(frozen=True)
class StudySettings:
    baseline: str = "stl_mlp"
    model: str = "multitab_net"  # the claim's model
    rivals: tuple[str, ...] = ("mmoe", "ple", "stem")
    alpha: float = 0.05
    labels: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_LABELS))
    dpi: int = 150

    def label(self, model: str) -> str:
        return self.labels.get(model, model)


# ------------------------------------------------------------------------------------------ collect
def collect(runs_dir: str | Path, configs: Mapping[str, SyntheticConfig], models: Sequence[str],
            seeds: Sequence[int] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(metrics rows, curve rows) of the runs <runs_dir>/<config>/<model>/seed<S>/ of `configs` x `models`
    (x `seeds`; None = every seed folder found). Absent runs are simply absent (the outputs say `missing`)."""
    runs_dir = Path(runs_dir)
    metric_rows: list[dict[str, Any]] = []
    curve_rows: list[dict[str, Any]] = []
    for name, conf in configs.items():
        for model in models:
            folder = runs_dir / name / model
            found = sorted(int(p.name[4:]) for p in folder.glob("seed*") if p.name[4:].isdigit())
            for seed in found if seeds is None else [s for s in seeds if s in found]:
                run_dir = folder / f"seed{seed}"
                path = run_dir / "metrics.json"
                if not path.is_file():
                    continue
                try:
                    rec = json.loads(path.read_text())
                except json.JSONDecodeError as e:
                    raise StudyError(f"{path}: not valid JSON ({e}); delete it and re-run its train stage") from None
                for task, value in (rec.get("test") or {}).items():
                    metric_rows.append({
                        "config": name, "groups": ";".join(conf.groups),
                        "correlation": conf.correlation,
                        "degrees": "-".join(map(str, conf.degrees or ())),
                        "model": model, "seed": seed, "task": task,
                        "test_ev": value, "val_ev": (rec.get("val") or {}).get(task),
                        "best_epoch": rec.get("best_epoch"), "epochs": rec.get("epochs"),
                        "max_epochs": rec.get("max_epochs"), "stopped_early": rec.get("stopped_early"),
                        "train_seconds": rec.get("train_seconds"),
                        "samples_per_second": rec.get("samples_per_second"),
                        "n_train": (rec.get("n_rows") or {}).get("train"), "device": rec.get("device"),
                    })
                val = read_curve(run_dir, "val_mean")
                loss = read_curve(run_dir, "train_loss")
                if val is not None:
                    for step, v in val.items():
                        curve_rows.append({"config": name, "model": model, "seed": seed, "epoch": int(step) + 1,
                                           "val_mean": v,
                                           "train_loss": loss.get(step, math.nan) if loss is not None else math.nan})
    return (pd.DataFrame.from_records(metric_rows, columns=METRICS_COLUMNS),
            pd.DataFrame.from_records(curve_rows, columns=CURVES_COLUMNS))


def read_metrics_csv(path: str | Path) -> pd.DataFrame:
    path = Path(path)
    if not path.is_file():
        raise StudyError(f"{path}: metrics CSV not found (written by `aggregate_study` or `collect`)")
    frame = pd.read_csv(path, dtype={"config": str, "model": str, "task": str, "groups": str, "degrees": str})
    missing = [c for c in ("config", "groups", "correlation", "degrees", "model", "seed", "task", "test_ev")
               if c not in frame.columns]
    if missing:
        raise StudyError(f"{path}: columns {missing} are missing; expected {METRICS_COLUMNS}")
    return frame


def configs_from_metrics(metrics: pd.DataFrame) -> dict[str, SyntheticConfig]:
    """The configurations named in a metrics table, with the groups / p / PD it records."""
    out: dict[str, SyntheticConfig] = {}
    for name, part in metrics.groupby("config", sort=False):
        row = part.iloc[0]
        degrees = str(row["degrees"]) if isinstance(row["degrees"], str) and row["degrees"] else ""
        corr = row["correlation"]
        out[str(name)] = SyntheticConfig(
            name=str(name), groups=tuple(str(row["groups"]).split(";")),
            correlation=None if pd.isna(corr) else float(corr),
            degrees=tuple(int(d) for d in degrees.split("-")) if degrees else None)
    return out


# ------------------------------------------------------------------------------------------ numbers
def delta_m_runs(metrics: pd.DataFrame, baseline: str = "stl_mlp") -> pd.DataFrame:
    """Per-seed Δm (%) of every (config, model) against the baseline's seed mean: columns config, model,
    seed, delta_m. A (config, model) without a complete baseline gets no rows."""
    rows = []
    for conf, part in metrics.groupby("config", sort=False):
        wide = part.pivot_table(index=["model", "seed"], columns="task", values="test_ev", aggfunc="first")
        if baseline not in wide.index.get_level_values("model"):
            continue
        base = wide.loc[baseline]
        if base.isna().any().any():
            continue
        for model in dict.fromkeys(wide.index.get_level_values("model")):
            runs = wide.loc[model]
            runs = runs[runs.notna().all(axis=1)]
            if runs.empty:
                continue
            try:
                per_seed = delta_m_per_seed(runs, base, pairing="mean")
            except UndefinedDeltaM:
                continue
            rows += [{"config": conf, "model": model, "seed": int(s), "delta_m": float(v)} for s, v in per_seed.items()]
    return pd.DataFrame.from_records(rows, columns=["config", "model", "seed", "delta_m"])


def summarise(dm: pd.DataFrame) -> pd.DataFrame:
    """Mean, σ (ddof 1; NaN for one seed), standard error and n over seeds per (config, model)."""
    rows = []
    for (conf, model), part in dm.groupby(["config", "model"], sort=False):
        v = part["delta_m"].to_numpy(dtype=float)
        std = float(np.std(v, ddof=1)) if v.size > 1 else math.nan
        rows.append({"config": conf, "model": model, "n_seeds": int(v.size), "mean": float(v.mean()),
                     "std": std, "se": std / math.sqrt(v.size) if v.size > 1 else math.nan})
    return pd.DataFrame.from_records(rows, columns=["config", "model", "n_seeds", "mean", "std", "se"])


def claims(dm: pd.DataFrame, configs: Sequence[str], settings: StudySettings) -> pd.DataFrame:
    """One row per (config, rival): the means, their difference, the one-sided t-test and whether the
    paper's claim holds against that rival; `verdict` is the configuration's (same on each of its rows)."""
    rows = []
    for conf in configs:
        part = dm[dm.config == conf]
        ours = part.loc[part.model == settings.model, "delta_m"].to_numpy(dtype=float)
        conf_rows = []
        for rival in settings.rivals:
            theirs = part.loc[part.model == rival, "delta_m"].to_numpy(dtype=float)
            row: dict[str, Any] = {"config": conf, "model": settings.model, "rival": rival,
                                   "n_model": ours.size, "n_rival": theirs.size, "mean_model": math.nan,
                                   "mean_rival": math.nan, "difference": math.nan, "t": math.nan,
                                   "p_value": math.nan, "status": "missing"}
            if ours.size and theirs.size:
                row.update(mean_model=float(ours.mean()), mean_rival=float(theirs.mean()),
                           difference=float(ours.mean() - theirs.mean()))
                if ours.size >= 2 and theirs.size >= 2:
                    test = t_test_greater(ours, theirs, equal_var=True)
                    row.update(t=test.statistic, p_value=test.pvalue)
                if row["difference"] <= 0:
                    row["status"] = "rival not below"
                elif not math.isnan(row["p_value"]) and row["p_value"] < settings.alpha:
                    row["status"] = "above (significant)"
                else:
                    row["status"] = "above (not significant)" if ours.size >= 2 and theirs.size >= 2 \
                        else "above (untested: one seed)"
            conf_rows.append(row)
        statuses = [r["status"] for r in conf_rows]
        if any(s == "missing" for s in statuses):
            verdict = "missing"
        elif any(s == "rival not below" for s in statuses):
            verdict = "does not hold"
        elif all(s == "above (significant)" for s in statuses):
            verdict = "holds"
        else:
            verdict = "holds in the means only"
        for r in conf_rows:
            r["verdict"] = verdict
        rows += conf_rows
    return pd.DataFrame.from_records(rows, columns=["config", "model", "rival", "n_model", "n_rival", "mean_model",
                                                    "mean_rival", "difference", "t", "p_value", "status",
                                                    "verdict"])


def convergence(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per (config, model): runs, runs stopped by early stopping, runs whose best epoch was their last at
    the epoch cap (still improving: not converged), and the median epochs."""
    runs = metrics.drop_duplicates(["config", "model", "seed"])
    rows = []
    for (conf, model), part in runs.groupby(["config", "model"], sort=False):
        stopped = part["stopped_early"].astype(str).str.lower().eq("true")
        capped = (~stopped) & (part["best_epoch"] == part["epochs"])
        rows.append({"config": conf, "model": model, "runs": len(part), "stopped_early": int(stopped.sum()),
                     "best_at_cap": int(capped.sum()), "median_epochs": float(part["epochs"].median()),
                     "train_seconds_mean": float(part["train_seconds"].mean())})
    return pd.DataFrame.from_records(rows, columns=["config", "model", "runs", "stopped_early", "best_at_cap",
                                                    "median_epochs", "train_seconds_mean"])


# ------------------------------------------------------------------------------------------ outputs
def _ordered(configs: Mapping[str, SyntheticConfig], groups: Sequence[str]) -> list[tuple[str, SyntheticConfig]]:
    out = []
    for group in groups:
        members = sorted((c for c in configs.values() if group in c.groups), key=lambda c: c.sort_key(group))
        out += [(group, c) for c in members]
    return out


def figure_frame(summary: pd.DataFrame, configs: Mapping[str, SyntheticConfig], models: Sequence[str],
                 settings: StudySettings) -> pd.DataFrame:
    """Rows for `figures.delta_m_figure` (group, config, level, model label, delta_m, se, ...)."""
    records = []
    index = summary.set_index(["config", "model"])
    for group, conf in _ordered(configs, (*FIGURE5_GROUPS, *FIGURE6_GROUPS, "other")):
        for model in models:
            hit = index.loc[(conf.name, model)] if (conf.name, model) in index.index else None
            records.append({"group": group, "config": conf.name, "level": conf.level(group),
                            "model": settings.label(model),
                            "delta_m": math.nan if hit is None else float(hit["mean"]),
                            "se": math.nan if hit is None else float(hit["se"]),
                            "n_seeds": 0 if hit is None else int(hit["n_seeds"]),
                            "missing": hit is None, "standin": False, "data": "synthetic"})
    return pd.DataFrame.from_records(records, columns=["group", "config", "level", "model", "delta_m", "se",
                                                       "n_seeds", "missing", "standin", "data"])


def _fmt(x: float, decimals: int = 2) -> str:
    return "missing" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.{decimals}f}"


def _p(x: float) -> str:
    return "n/a" if math.isnan(x) else (f"{x:.2g}" if x < 0.001 else f"{x:.3f}")


def delta_m_markdown(summary: pd.DataFrame, configs: Mapping[str, SyntheticConfig], models: Sequence[str],
                     settings: StudySettings) -> str:
    index = summary.set_index(["config", "model"])
    header = ["Configuration", "Figure", "Setting"] + [settings.label(m) for m in models]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    seen = set()
    for _group, conf in _ordered(configs, (*FIGURE5_GROUPS, *FIGURE6_GROUPS, "other")):
        if conf.name in seen:
            continue
        seen.add(conf.name)
        figure = "6" if "nonuniform" in conf.groups else ("5" if set(conf.groups) & set(FIGURE5_GROUPS) else "-")
        cells = []
        for model in models:
            if (conf.name, model) not in index.index:
                cells.append("missing")
                continue
            hit = index.loc[(conf.name, model)]
            sd = "" if math.isnan(float(hit["std"])) else f" ± {float(hit['std']):.2f}"
            cells.append(f"{float(hit['mean']):+.2f}{sd} (n={int(hit['n_seeds'])})")
        lines.append("| " + " | ".join([conf.name, figure, conf.level("nonuniform")] + cells) + " |")
    return "\n".join(lines)


def claims_markdown(table: pd.DataFrame, settings: StudySettings) -> str:
    header = ["Configuration", "Verdict"] + [f"vs {settings.label(r)}: Δ (p)" for r in settings.rivals]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for conf, part in table.groupby("config", sort=False):
        cells = []
        for rival in settings.rivals:
            r = part[part.rival == rival].iloc[0]
            cells.append("missing" if r["status"] == "missing" else f"{_fmt(float(r['difference']))} ({_p(float(r['p_value']))})")
        lines.append("| " + " | ".join([str(conf), f"**{part.iloc[0]['verdict']}**"] + cells) + " |")
    return "\n".join(lines)


def curves_figure(curves: pd.DataFrame, configs: Sequence[str], models: Sequence[str],
                  settings: StudySettings) -> Any:
    """A grid with one panel per configuration: the seed-mean validation EV per epoch of every model."""
    import matplotlib.pyplot as plt

    n = max(len(configs), 1)
    cols = min(3, n)
    rows_ = math.ceil(n / cols)
    fig, axes = plt.subplots(rows_, cols, figsize=(max(4.0 * cols, 7.5), 3.0 * rows_ + 1.2), squeeze=False, layout="constrained")
    for k, conf in enumerate(configs):
        ax = axes[k // cols][k % cols]
        part = curves[curves.config == conf]
        for i, model in enumerate(models):
            series = part[part.model == model].groupby("epoch")["val_mean"].mean()
            if not series.empty:
                ax.plot(series.index, series.to_numpy(), color=f"C{i}", label=settings.label(model), linewidth=1.2)
        if part.empty:
            ax.text(0.5, 0.5, "missing: no learning-curve log", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(conf, fontsize=9)
        ax.set_xlabel("epoch", fontsize=8)
        ax.set_ylabel("val. mean EV", fontsize=8)
    for k in range(n, rows_ * cols):
        axes[k // cols][k % cols].set_axis_off()
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=len(labels), fontsize=8)
    figures.mark_figure(fig, "Learning curves: validation mean EV per epoch (seed mean)", False)
    return fig


def write_csv(frame: pd.DataFrame, path: Path) -> Path:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.6g")
    return path


def write_text(text: str, path: Path) -> Path:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)
    return path


def write_study(metrics: pd.DataFrame, curves: pd.DataFrame, out: str | Path,
                settings: StudySettings | None = None, *, header: Sequence[str] = (),
                models: Sequence[str] | None = None, figure_prefix: str = "figures/") -> tuple[list[Path], str]:
    """Write into `out`: delta_m_per_seed.csv, delta_m.csv + .md (mean ± σ), claims.csv + .md,
    convergence.csv, figures/figure5_delta_m.{png,svg}, figures/figure6_delta_m.*,
    figures/learning_curves.*, and section.md (the report section, `header` lines first). Everything
    comes from `metrics` and `curves` only. Returns (paths, section markdown)."""
    settings = settings or StudySettings()
    out = Path(out)
    configs = configs_from_metrics(metrics)
    if models is None:
        models = list(dict.fromkeys(metrics["model"]))
    plotted = [m for m in models if m != settings.baseline]
    dm = delta_m_runs(metrics, settings.baseline)
    summary = summarise(dm)
    claim = claims(dm, list(configs), settings)
    conv = convergence(metrics)
    written = [write_csv(dm, out / "delta_m_per_seed.csv"), write_csv(summary, out / "delta_m.csv"),
               write_csv(claim, out / "claims.csv"), write_csv(conv, out / "convergence.csv")]
    frame = figure_frame(summary, configs, plotted, settings)
    labels = [settings.label(m) for m in plotted]
    fig_paths = {}
    for name, groups, title in (
        ("figure5_delta_m", FIGURE5_GROUPS, "Figure 5: Δm (%) vs STL as task correlation, complexity and count vary"),
        ("figure6_delta_m", FIGURE6_GROUPS, "Figure 6: Δm (%) vs STL with non-uniform task complexities"),
    ):
        fig = figures.delta_m_figure(frame[frame.group.isin(groups)], groups, labels, title)
        paths = figures.save_figure(fig, out / "figures", name, settings.dpi)
        fig_paths[name] = paths[0]
        written += paths
    fig = curves_figure(curves, list(configs), models, settings)
    paths = figures.save_figure(fig, out / "figures", "learning_curves", settings.dpi)
    written += paths
    dm_md = delta_m_markdown(summary, configs, models, settings)
    claims_md = claims_markdown(claim, settings)
    written += [write_text(dm_md + "\n", out / "delta_m.md"), write_text(claims_md + "\n", out / "claims.md")]
    section = render_section(metrics, claim, conv, dm_md, claims_md, settings, header, figure_prefix)
    written.append(write_text(section, out / "section.md"))
    return written, section


def section_only(metrics: pd.DataFrame, settings: StudySettings, models: Sequence[str], *,
                 header: Sequence[str] = (), figure_prefix: str = "figures/", curves: bool = False) -> str:
    """The report section of `metrics` without writing any file (the default report, whose Figures 5-6
    are drawn by `aggregate`): `figure_prefix` points at those figures; `curves`: link a
    learning_curves.png there too."""
    configs = configs_from_metrics(metrics)
    dm = delta_m_runs(metrics, settings.baseline)
    summary = summarise(dm)
    claim = claims(dm, list(configs), settings)
    return render_section(metrics, claim, convergence(metrics), delta_m_markdown(summary, configs, models, settings),
                          claims_markdown(claim, settings), settings, header, figure_prefix, curves=curves)


def _not_converged_warning(conv: pd.DataFrame, settings: StudySettings) -> list[str]:
    """A warning ahead of the verdicts when runs of the compared models were still improving at their epoch
    cap: a verdict on them compares under-trained models, not the models the paper compares."""
    compared = conv[conv["model"].isin([settings.model, *settings.rivals]) & (conv["best_at_cap"] > 0)]
    if compared.empty:
        return []
    where = "; ".join(f"{settings.label(m)} on {', '.join(part['config'])}"
                      for m, part in compared.groupby("model", sort=False))
    return [f"> **NOT CONVERGED**: {int(compared['best_at_cap'].sum())} run(s) of the compared models were still "
            f"improving at their epoch cap ({where}); the verdicts below compare under-trained models and say "
            "nothing yet about the paper's claim. Train longer (`make study`) before reading them.", ""]


def render_section(metrics: pd.DataFrame, claim: pd.DataFrame, conv: pd.DataFrame, dm_md: str, claims_md: str,
                   settings: StudySettings, header: Sequence[str], figure_prefix: str, *, curves: bool = True) -> str:
    verdicts = claim.drop_duplicates("config")[["config", "verdict"]]
    counts = verdicts["verdict"].value_counts()
    n_runs = len(metrics.drop_duplicates(["config", "model", "seed"]))
    seeds = sorted(int(s) for s in metrics["seed"].unique()) if len(metrics) else []
    rows = sorted({int(x) for x in metrics["n_train"].dropna()}) if "n_train" in metrics else []
    capped = int(conv["best_at_cap"].sum()) if len(conv) else 0
    stopped = int(conv["stopped_early"].sum()) if len(conv) else 0
    rivals = ", ".join(settings.label(r) for r in settings.rivals)
    lines = ["## MultiTab-Bench: Figures 5 and 6, and the paper's claim checked", "", *header]
    lines += [
        f"Runs: {n_runs} (seeds {seeds}; training rows per run {rows}). The paper's claim: "
        f"{settings.label(settings.model)}'s Δm is above each of {rivals} on every configuration. Per "
        f"configuration, a one-sided Student's t-test over the seeds' Δm at α = {settings.alpha}.", "",
        "**Claim per configuration: " + ", ".join(f"{k} {v}" for k, v in counts.items()) + ".**", "",
        *_not_converged_warning(conv, settings),
        claims_md, "",
        "Cells: Δm difference (ours − rival, percentage points) and the one-sided p-value. `holds in the means "
        "only`: every rival's mean is below but not significantly so (or one seed: no test).", "",
        "### Δm (%) vs STL, mean ± σ over seeds", "", dm_md, "",
        f"![Figure 5]({figure_prefix}figure5_delta_m.png)", "",
        f"![Figure 6]({figure_prefix}figure6_delta_m.png)", "",
        "Error bars: standard error of the per-seed Δm (each seed against the STL seed mean).", "",
        "### Convergence", "",
        *([f"![Learning curves]({figure_prefix}learning_curves.png)", ""] if curves else []),
        f"{stopped} of {n_runs} runs were ended by early stopping; {capped} reached their epoch cap with the best "
        "validation EV at the last epoch (still improving: not converged)"
        + (" — listed in convergence.csv." if capped else "."), "",
    ]
    return "\n".join(lines)


def regenerate(folder: str | Path, settings: StudySettings | None = None) -> list[Path]:
    """Re-write a record folder's figures and tables from its own metrics.csv and curves.csv (the
    record's header.md, when present, heads its section.md)."""
    folder = Path(folder)
    metrics = read_metrics_csv(folder / "metrics.csv")
    curves_path = folder / "curves.csv"
    curves = pd.read_csv(curves_path) if curves_path.is_file() else pd.DataFrame(columns=CURVES_COLUMNS)
    header_path = folder / "header.md"
    header = header_path.read_text().splitlines() + [""] if header_path.is_file() else []
    paths, _ = write_study(metrics, curves, folder, settings, header=header)
    return paths


def record_header(metrics: pd.DataFrame, *, commit: str, machine: str, note: str,
                  flow_wall_seconds: float | None = None) -> list[str]:
    """header.md lines of a committed record: what was run, where, at which commit, and the training time
    per model (from the runs' own train_seconds)."""
    runs = metrics.drop_duplicates(["config", "model", "seed"])
    rows = sorted({int(x) for x in runs["n_train"].dropna()})
    lines = [f"> {note}", "",
             f"- Commit: `{commit}`; machine: {machine}.",
             f"- Scale: configurations {list(dict.fromkeys(runs['config']))}, seeds "
             f"{sorted(int(s) for s in runs['seed'].unique())}, {rows} training rows per run.",
             "- Training time per model (train_seconds of the runs, epochs and validation included; sum over "
             "runs, and per run):"]
    for model, part in runs.groupby("model", sort=False):
        lines.append(f"  - {model}: {part['train_seconds'].sum():.0f} s in {len(part)} runs "
                     f"({part['train_seconds'].mean():.0f} s per run, median {part['epochs'].median():g} epochs)")
    if flow_wall_seconds is not None:
        lines.append(f"- Wall time of the whole `flows.pipeline` run (every stage, 2 at once): {flow_wall_seconds:.0f} s.")
    return lines + [""]


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m multitab.evaluation.bench_study record --from results/study_report --to results/study/<name>
    --note "..."`: copy a study's metrics.csv and curves.csv into a record folder, write its header.md and
    regenerate its figures and tables from them. `regenerate FOLDER`: only the last step."""
    import argparse
    import platform
    import shutil
    import subprocess

    p = argparse.ArgumentParser(prog="python -m multitab.evaluation.bench_study")
    sub = p.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--from", dest="source", required=True, type=Path)
    rec.add_argument("--to", dest="target", required=True, type=Path)
    rec.add_argument("--note", required=True, help="what this record is (e.g. its scale against the paper's)")
    rec.add_argument("--flow-wall-seconds", type=float, default=None)
    reg = sub.add_parser("regenerate")
    reg.add_argument("folder", type=Path)
    a = p.parse_args(argv)
    try:
        if a.command == "regenerate":
            regenerate(a.folder)
            return 0
        a.target.mkdir(parents=True, exist_ok=True)
        for name in ("metrics.csv", "curves.csv"):
            if not (a.source / name).is_file():
                raise StudyError(f"{a.source / name}: not found; run `make study` (aggregate_study) first")
            shutil.copy(a.source / name, a.target / name)
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=a.source).stdout.strip() or "unknown"
        machine = f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} CPUs, {platform.system()}"
        header = record_header(read_metrics_csv(a.target / "metrics.csv"), commit=commit, machine=machine,
                               note=a.note, flow_wall_seconds=a.flow_wall_seconds)
        write_text("\n".join(header) + "\n", a.target / "header.md")
        regenerate(a.target)
    except (StudyError, OSError) as e:
        print(f"bench_study: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
