"""The MultiTab-Bench study's numbers: the runs' metrics and curves as rows, Δm per seed, its summary over
seeds, the paper's claim checked per configuration, and convergence (see study.py)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from multitab.config.aggregate import SyntheticConfig
from multitab.evaluation.bench.verdict import holm, one_sided_tests, verdicts
from multitab.evaluation.curves import read_curve
from multitab.evaluation.delta_m import UndefinedDeltaM, delta_m_per_seed
from multitab.registry import REGISTRY

METRICS_COLUMNS = ["config", "groups", "correlation", "degrees", "model", "seed", "task", "test_ev", "val_ev",
                   "best_epoch", "epochs", "max_epochs", "stopped_early", "train_seconds", "samples_per_second",
                   "n_train", "device"]
CURVES_COLUMNS = ["config", "model", "seed", "epoch", "val_mean", "train_loss"]
# The configuration groups of the paper's Figures 5 and 6: the study records' and the paper report's (paper/report.py)
FIGURE5_GROUPS = ("correlation", "complexity", "count")
FIGURE6_GROUPS = ("nonuniform",)


def figure_number(conf: SyntheticConfig) -> str:
    """The paper's figure a configuration belongs to: "6" (non-uniform complexities), "5" (correlation,
    complexity, count), or "" for neither."""
    groups = set(conf.groups)
    return "6" if groups & set(FIGURE6_GROUPS) else "5" if groups & set(FIGURE5_GROUPS) else ""


class StudyError(ValueError):
    """A study input (metrics CSV, runs) is malformed; the message names the file and what to do."""


BELOW_BUDGET = "not tested at this budget"


@dataclass(frozen=True)
class Budget:
    """The scale below which runs give no verdict on the paper's claim: the study's seeds and training rows
    per run (params `study`: its seeds, and `study.data.n_samples` split as `bench.data.split` says)."""

    n_seeds: int
    n_train: int

    def describe(self) -> str:
        return f"{self.n_seeds} seeds, {self.n_train:,} training rows per run"

    def shortfall(self, n_seeds: int, min_train: int | None) -> str:
        """What runs of `n_seeds` seeds and at least `min_train` training rows (None: unknown) lack of this
        budget ("1 of 3 seeds, 14,000 of 70,000 training rows"); empty when nothing."""
        short = []
        if n_seeds < self.n_seeds:
            short.append(f"{n_seeds} of {self.n_seeds} seeds")
        if min_train is not None and min_train < self.n_train:
            short.append(f"{min_train:,} of {self.n_train:,} training rows")
        return ", ".join(short)


@dataclass(frozen=True)
class StudySettings:
    baseline: str = "stl_mlp"
    model: str = "multitab_net"  # the claim's model
    rivals: tuple[str, ...] = ("mmoe", "ple", "stem")
    alpha: float = 0.05
    dpi: int = 150
    budget: Budget | None = None  # None: every verdict stands (a study's own report, a committed record)
    patience: int = 5  # early stopping's patience (params train.patience.default): the convergence rule
    val_drop: float = 3.0  # a run's validation mean more than this % below its siblings' median: flagged
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)  # a record's own (bench/claim.py)

    def label(self, model: str) -> str:
        """A record's label of `model`, else a registered model's (multitab.registry); any other name as it is."""
        if model in self.labels:
            return self.labels[model]
        return REGISTRY[model].label if model in REGISTRY else model


# ------------------------------------------------------------------------------------------ collect
def read_record(path: Path) -> dict[str, Any]:
    """A run's metrics.json, or StudyError naming it when it is not JSON."""
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise StudyError(f"{path}: not valid JSON ({e}); delete it and re-run its train stage") from None


def run_rows(run_dir: Path, conf: SyntheticConfig, config: str, model: str,
             seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """(metrics rows, curve rows) of one run folder, in METRICS_COLUMNS / CURVES_COLUMNS; None if it has no
    metrics.json (a run not trained yet)."""
    path = run_dir / "metrics.json"
    if not path.is_file():
        return None
    rec = read_record(path)
    metric_rows = [{
        "config": config, "groups": ";".join(conf.groups), "correlation": conf.correlation,
        "degrees": "-".join(map(str, conf.degrees or ())), "model": model, "seed": seed, "task": task,
        "test_ev": value, "val_ev": (rec.get("val") or {}).get(task),
        "best_epoch": rec.get("best_epoch"), "epochs": rec.get("epochs"),
        "max_epochs": rec.get("max_epochs"), "stopped_early": rec.get("stopped_early"),
        "train_seconds": rec.get("train_seconds"), "samples_per_second": rec.get("samples_per_second"),
        "n_train": (rec.get("n_rows") or {}).get("train"), "device": rec.get("device"),
    } for task, value in (rec.get("test") or {}).items()]
    val, loss = read_curve(run_dir, "val_mean"), read_curve(run_dir, "train_loss")
    curve_rows = [] if val is None else [
        {"config": config, "model": model, "seed": seed, "epoch": int(step) + 1, "val_mean": v,
         "train_loss": loss.get(step, math.nan) if loss is not None else math.nan}
        for step, v in val.items()]
    return metric_rows, curve_rows


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
                rows = run_rows(folder / f"seed{seed}", conf, name, model, seed)
                if rows is not None:
                    metric_rows += rows[0]
                    curve_rows += rows[1]
    return (pd.DataFrame.from_records(metric_rows, columns=METRICS_COLUMNS),
            pd.DataFrame.from_records(curve_rows, columns=CURVES_COLUMNS))


ARMS_COLUMNS = ["arm", "source", "changed"]  # an attribution record's arms.csv


def read_arms_csv(path: str | Path) -> pd.DataFrame:
    path = Path(path)
    if not path.is_file():
        raise StudyError(f"{path}: arms CSV not found (written by stage `group_report@attribution`)")
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    if list(frame.columns) != ARMS_COLUMNS:
        raise StudyError(f"{path}: columns {list(frame.columns)}; expected {ARMS_COLUMNS}")
    return frame


def read_metrics_csv(path: str | Path) -> pd.DataFrame:
    path = Path(path)
    if not path.is_file():
        raise StudyError(f"{path}: metrics CSV not found (written by stage `group_report@study` or `collect`)")
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


def short_of(rows: pd.DataFrame, settings: StudySettings) -> str:
    """Which rivals keep `holds` from a configuration whose claim's model is significantly above some rivals but
    not all (`claims` rows of one configuration): "PLE p 0.071" (each such rival with its one-sided p, rivals'
    order); "" when it is above every rival or above none (the gap to the best rival then tells it all)."""
    tested = rows[rows["status"] != "missing"]
    behind = tested[~(tested["p_value"] < settings.alpha)]
    if tested.empty or behind.empty or len(behind) == len(tested):
        return ""
    return ", ".join(f"{settings.label(r.rival)} p {r.p_value:.3f}" for r in behind.itertuples())


VERDICTS = ("holds", "does not hold", "inconclusive", "missing")


def claims(dm: pd.DataFrame, configs: Sequence[str], settings: StudySettings) -> pd.DataFrame:
    """One row per (config, rival): the means, their difference and two one-sided tests over the seeds
    (Welch's statistic, min(n) − 1 degrees of freedom: bench/verdict.py `one_sided_tests`), `p_value` (H1: the
    claim's model above the rival) and `p_below` (H1: below), and `p_below_holm` (`p_below` Holm-adjusted over
    the configuration's rivals). `status` per rival: `above (significant)` (p_value < alpha), `below
    (significant)` (p_below_holm < alpha), `not significant`, `untested: one seed` or `missing`. `verdict`, the
    configuration's (same on each of its rows; bench/verdict.py states the rule and its error rates): `holds`
    (significantly above every rival), `does not hold` (significantly below at least one after the Holm
    correction), `inconclusive` (otherwise: a difference of means alone decides nothing); `missing` while a run
    set is absent."""
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
                                   "p_value": math.nan, "p_below": math.nan, "p_below_holm": math.nan,
                                   "status": "missing"}
            if ours.size and theirs.size:
                row.update(mean_model=float(ours.mean()), mean_rival=float(theirs.mean()),
                           difference=float(ours.mean() - theirs.mean()), status="untested: one seed")
                if ours.size >= 2 and theirs.size >= 2:
                    t, above, below = one_sided_tests(ours, theirs)
                    row.update(t=float(t), p_value=float(above), p_below=float(below))
            conf_rows.append(row)
        p_above = np.array([r["p_value"] for r in conf_rows])
        p_below = np.array([r["p_below"] for r in conf_rows])
        for r, adjusted in zip(conf_rows, holm(p_below)):
            if r["n_model"] >= 2 and r["n_rival"] >= 2:
                r["p_below_holm"] = float(adjusted)
                r["status"] = ("above (significant)" if r["p_value"] < settings.alpha else
                               "below (significant)" if adjusted < settings.alpha else "not significant")
        missing = any(r["status"] == "missing" for r in conf_rows)
        verdict = "missing" if missing else str(verdicts(p_above, p_below, settings.alpha))
        for r in conf_rows:
            r["verdict"] = verdict
        rows += conf_rows
    return pd.DataFrame.from_records(rows, columns=["config", "model", "rival", "n_model", "n_rival", "mean_model",
                                                    "mean_rival", "difference", "t", "p_value", "p_below",
                                                    "p_below_holm", "status", "verdict"])


def below_budget(metrics: pd.DataFrame, budget: Budget | None) -> dict[str, str]:
    """The configurations whose runs are below `budget`, each with what fell short ("1 of 3 seeds",
    "14,000 of 70,000 training rows")."""
    if budget is None or metrics.empty:
        return {}
    out = {}
    for conf, part in metrics.groupby("config", sort=False):
        rows = part["n_train"].dropna()
        short = budget.shortfall(part["seed"].nunique(), int(rows.min()) if len(rows) else None)
        if short:
            out[str(conf)] = short
    return out


def apply_budget(claim: pd.DataFrame, metrics: pd.DataFrame, budget: Budget | None) -> pd.DataFrame:
    """`claim` with the verdict of every configuration below `budget` replaced by BELOW_BUDGET (a missing
    run stays `missing`): a verdict from fewer seeds or rows than the study's is not read as one."""
    short = below_budget(metrics, budget)
    if not short:
        return claim
    claim = claim.copy()
    hit = claim["config"].isin(list(short)) & (claim["verdict"] != "missing")
    claim.loc[hit, "verdict"] = BELOW_BUDGET
    return claim


def convergence(metrics: pd.DataFrame, settings: StudySettings | None = None) -> pd.DataFrame:
    """Per (config, model): runs, runs ended by early stopping, runs whose best epoch was their last at the
    epoch cap, and the runs flagged as not converged (`not_converged`), by either rule:
    - `improving_at_end`: not ended by early stopping and its best epoch within its last `patience` epochs
      (epochs - best_epoch < patience): it was still improving when the cap ended it;
    - `val_outliers`: its validation mean (the mean over tasks of `val_ev`, the tested epoch's validation
      metric) is more than `val_drop` % below the median of its siblings' (the same model's other seeds on the
      configuration, at least two of them), whatever its training loss: a seed left far behind the others
      (early stopping ended it on a noisy validation curve, or it never left a plateau). `val_drop` % of the
      validation metric is about as many points of Δm on validation.
    And the median epochs and mean training seconds."""
    settings = settings or StudySettings()
    outliers = val_outliers(metrics, settings.val_drop)
    runs = metrics.drop_duplicates(["config", "model", "seed"])
    rows = []
    for (conf, model), part in runs.groupby(["config", "model"], sort=False):
        stopped = part["stopped_early"].astype(str).str.lower().eq("true")
        capped = (~stopped) & (part["best_epoch"] == part["epochs"])
        improving = (~stopped) & ((part["epochs"] - part["best_epoch"]) < settings.patience)
        behind = part["seed"].map(lambda s, c=conf, m=model: (c, m, int(s)) in outliers)
        rows.append({"config": conf, "model": model, "runs": len(part), "stopped_early": int(stopped.sum()),
                     "best_at_cap": int(capped.sum()), "improving_at_end": int(improving.sum()),
                     "val_outliers": int(behind.sum()), "not_converged": int((improving | behind).sum()),
                     "median_epochs": float(part["epochs"].median()),
                     "train_seconds_mean": float(part["train_seconds"].mean())})
    return pd.DataFrame.from_records(rows, columns=["config", "model", "runs", "stopped_early", "best_at_cap",
                                                    "improving_at_end", "val_outliers", "not_converged",
                                                    "median_epochs", "train_seconds_mean"])


def val_outliers(metrics: pd.DataFrame, drop: float) -> dict[tuple[str, str, int], float]:
    """(config, model, seed) -> how far (in % of the siblings' median) the run's validation mean lies below its
    siblings' median, for the runs where that exceeds `drop` (the same (config, model)'s other seeds, at least
    two with a validation mean; runs without `val_ev` are never flagged)."""
    if "val_ev" not in metrics.columns or metrics.empty:
        return {}
    val = (metrics.assign(val_ev=pd.to_numeric(metrics["val_ev"], errors="coerce"))
           .groupby(["config", "model", "seed"], sort=False)["val_ev"].mean().dropna())
    out: dict[tuple[str, str, int], float] = {}
    for (conf, model), part in val.groupby(level=[0, 1], sort=False):
        for (_, _, seed), value in part.items():
            others = part.drop(index=(conf, model, seed)).to_numpy(dtype=float)
            if others.size < 2:
                continue
            median = float(np.median(others))
            below = 100.0 * (median - float(value)) / abs(median) if median else math.nan
            if below > drop:
                out[(str(conf), str(model), int(seed))] = below
    return out
