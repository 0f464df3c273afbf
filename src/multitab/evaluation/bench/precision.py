"""The paired fp32/bf16 comparison (`make precision-pair`; docs/study.md, "bf16"): does bf16 autocast leave
the MultiTab-Bench numbers unchanged?

The same configurations, models and seeds are trained twice, everything equal but the precision: in fp32 by
the study's run group (`study`, `results/study_runs`) and in bf16 by run group `study_bf16` (params.yaml: its
data names the configurations, Figure 6's two by default; its `train` is the study's plus `precision:
bf16`). `check_pairs` refuses a pair whose recorded settings (metrics.json `settings`: hyperparameters,
optimiser, epochs, patience, batch, data hashes, code hash, ...) differ in anything but the precision.

Everything below is built from one CSV, `metrics.csv` (the study's metrics rows with a leading `precision`
column), so a committed record regenerates its own table (`regenerate`). Per configuration and model:

- Δm (%, against the same precision's STL seed mean, as the study computes it) in fp32 and in bf16: mean and
  standard error over seeds;
- the paired difference bf16 - fp32 over the seeds both have: mean and its standard error;
- `within_one_se`: |bf16 mean - fp32 mean| <= the fp32 standard error, the bar of issue 27 ("every model's Δm
  within one standard error of its fp32 value"); for the STL baseline, whose Δm is zero by construction in
  each precision, the same test on its mean test explained variance (in points of EV x 100);
- and per configuration the claim's three-valued verdict in each precision.

`passes` is true when every configuration x model has both precisions' runs and is within one SE.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from multitab.config.aggregate import SyntheticConfig
from multitab.evaluation.bench.numbers import (
    METRICS_COLUMNS,
    StudyError,
    StudySettings,
    claims,
    collect,
    delta_m_runs,
    read_metrics_csv,
    read_record,
)
from multitab.evaluation.bench.render import plus_minus

PRECISIONS = ("fp32", "bf16")
PAIR_COLUMNS = ["config", "model", "n_fp32", "n_bf16", "quantity", "fp32_mean", "fp32_se", "bf16_mean", "bf16_se",
                "paired_diff", "paired_diff_se", "within_one_se"]
VERDICT_COLUMNS = ["config", "verdict_fp32", "verdict_bf16"]


# ------------------------------------------------------------------------------------------ collect
def check_pairs(fp32_dir: str | Path, bf16_dir: str | Path, configs: Sequence[str], models: Sequence[str],
                seeds: Sequence[int]) -> list[str]:
    """Raise StudyError for a pair of runs (<dir>/<config>/<model>/seed<S>/metrics.json) whose `settings`
    differ in anything but `precision`, or whose precisions are not fp32 and bf16; return the runs one side
    lacks ("<config>/<model>/seed<S>: no bf16 run")."""
    missing = []
    for config in configs:
        for model in models:
            for seed in seeds:
                run = f"{config}/{model}/seed{seed}"
                settings = {}
                for precision, folder in zip(PRECISIONS, (fp32_dir, bf16_dir), strict=True):
                    path = Path(folder) / run / "metrics.json"
                    if not path.is_file():
                        missing.append(f"{run}: no {precision} run")
                        continue
                    record = read_record(path)
                    settings[precision] = dict(record.get("settings") or {})
                    if settings[precision].get("precision") != precision:
                        raise StudyError(f"{path}: trained in {settings[precision].get('precision')!r}, expected "
                                         f"{precision}: the {precision} side of the pair reads {folder}")
                if len(settings) == 2:
                    a, b = ({k: v for k, v in s.items() if k != "precision"} for s in settings.values())
                    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
                    if differ:
                        raise StudyError(f"{run}: the fp32 run ({fp32_dir}) and the bf16 run ({bf16_dir}) differ in "
                                         f"{differ}, not only in the precision: retrain one side with the other's "
                                         "settings (same commit, same params.yaml but the precision)")
    return missing


def collect_pair(fp32_dir: str | Path, bf16_dir: str | Path, configs: Mapping[str, SyntheticConfig],
                 models: Sequence[str], seeds: Sequence[int]) -> pd.DataFrame:
    """The study's metrics rows of both sides, `precision` first."""
    frames = []
    for precision, folder in zip(PRECISIONS, (fp32_dir, bf16_dir), strict=True):
        metrics, _ = collect(folder, configs, models, seeds)
        frames.append(metrics.assign(precision=precision)[["precision", *METRICS_COLUMNS]])
    return pd.concat(frames, ignore_index=True)


# ------------------------------------------------------------------------------------------ numbers
def _mean_se(values: np.ndarray) -> tuple[float, float]:
    if values.size == 0:
        return math.nan, math.nan
    se = float(np.std(values, ddof=1) / math.sqrt(values.size)) if values.size > 1 else math.nan
    return float(values.mean()), se


def compare(metrics: pd.DataFrame, settings: StudySettings) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the pair table, PAIR_COLUMNS; the verdicts per configuration, VERDICT_COLUMNS) from a pair's
    metrics rows (the docstring says what each holds)."""
    if "precision" not in metrics.columns:
        raise StudyError("metrics: no `precision` column; a precision pair's metrics have one")
    per_seed: dict[str, pd.DataFrame] = {}
    ev: dict[str, pd.DataFrame] = {}
    for precision in PRECISIONS:
        part = metrics[metrics.precision == precision]
        per_seed[precision] = delta_m_runs(part.drop(columns="precision"), settings.baseline)
        ev[precision] = (part.groupby(["config", "model", "seed"], sort=False)["test_ev"].mean() * 100).rename(
            "value").reset_index()
    rows = []
    for (config, model), _ in metrics.groupby(["config", "model"], sort=False):
        baseline = model == settings.baseline
        quantity = "test EV x 100" if baseline else "Δm %"
        sides = {}
        for precision in PRECISIONS:
            frame = ev[precision] if baseline else per_seed[precision].rename(columns={"delta_m": "value"})
            sides[precision] = frame[(frame.config == config) & (frame.model == model)].set_index("seed")["value"]
        fp32, bf16 = sides["fp32"], sides["bf16"]
        common = fp32.index.intersection(bf16.index)
        f_mean, f_se = _mean_se(fp32.to_numpy(dtype=float))
        b_mean, b_se = _mean_se(bf16.to_numpy(dtype=float))
        d_mean, d_se = _mean_se((bf16[common] - fp32[common]).to_numpy(dtype=float))
        within: Any = (abs(b_mean - f_mean) <= f_se) if not (math.isnan(f_se) or math.isnan(b_mean)) else None
        rows.append({"config": config, "model": model, "n_fp32": int(fp32.size), "n_bf16": int(bf16.size),
                     "quantity": quantity, "fp32_mean": f_mean, "fp32_se": f_se, "bf16_mean": b_mean, "bf16_se": b_se,
                     "paired_diff": d_mean, "paired_diff_se": d_se, "within_one_se": within})
    table = pd.DataFrame.from_records(rows, columns=PAIR_COLUMNS)
    configs = list(dict.fromkeys(metrics["config"]))
    verdicts = {p: claims(per_seed[p], configs, settings).drop_duplicates("config").set_index("config")["verdict"]
                for p in PRECISIONS}
    verdict_table = pd.DataFrame({"config": configs,
                                  "verdict_fp32": [verdicts["fp32"].get(c, "missing") for c in configs],
                                  "verdict_bf16": [verdicts["bf16"].get(c, "missing") for c in configs]},
                                 columns=VERDICT_COLUMNS)
    return table, verdict_table


def _within(v: Any) -> bool:
    """A pair's `within_one_se`: None (untested: a side missing) counts as not within."""
    return v is not None and bool(v)


def passes(table: pd.DataFrame) -> bool:
    """Every configuration x model has both sides and is within one fp32 standard error."""
    return bool(len(table)) and all(_within(v) for v in table["within_one_se"])


# ------------------------------------------------------------------------------------------ render
def markdown(table: pd.DataFrame, verdicts: pd.DataFrame, settings: StudySettings, header: Sequence[str] = ()) -> str:
    lines = ["## bf16 autocast against fp32: the paired comparison", "", *header,
             "Per configuration and model: the quantity in each precision (mean ± SE over seeds), the paired "
             "difference bf16 − fp32 over the seeds both have (mean ± SE), and whether bf16's mean lies within one "
             "standard error of fp32's (the bar). Δm against each precision's own STL; for STL itself, its mean test "
             "EV × 100.", ""]
    ok = passes(table)
    outside = table[[not _within(v) for v in table["within_one_se"]]]
    if ok:
        lines.append(f"**bf16 passes**: all {len(table)} configuration × model pairs within one fp32 standard error.")
    else:
        which = ", ".join(f"{r.config} {settings.label(r.model)}" for r in outside.itertuples(index=False))
        lines.append(f"**bf16 does not pass**: {len(outside)} of {len(table)} pairs are outside one fp32 standard "
                     f"error or untested ({which}).")
    lines += ["", "| Configuration | Model | Quantity | fp32 | bf16 | bf16 − fp32 (paired) | Within one SE |",
              "|---|---|---|---|---|---|---|"]
    for r in table.itertuples(index=False):
        within = "untested" if r.within_one_se is None else "yes" if r.within_one_se else "**no**"
        lines.append(f"| {r.config} | {settings.label(r.model)} | {r.quantity} | {plus_minus(r.fp32_mean, r.fp32_se)} "
                     f"({r.n_fp32}) | {plus_minus(r.bf16_mean, r.bf16_se)} ({r.n_bf16}) | "
                     f"{plus_minus(r.paired_diff, r.paired_diff_se)} | {within} |")
    lines += ["", f"The claim ({settings.label(settings.model)} significantly above every rival at α "
              f"{settings.alpha:g}) in each precision:", "", "| Configuration | fp32 | bf16 |", "|---|---|---|"]
    lines += [f"| {r.config} | {r.verdict_fp32} | {r.verdict_bf16} |" for r in verdicts.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def write_pair(metrics: pd.DataFrame, out: str | Path, settings: StudySettings | None = None,
               header: Sequence[str] = ()) -> list[Path]:
    """pair.csv, verdicts.csv and section.md into `out`, from `metrics` (the folder's metrics.csv)."""
    from multitab.evaluation.bench.study import write_csv, write_text

    settings = settings or StudySettings()
    out = Path(out)
    table, verdicts = compare(metrics, settings)
    return [write_csv(table, out / "pair.csv"), write_csv(verdicts, out / "verdicts.csv"),
            write_text(markdown(table, verdicts, settings, header), out / "section.md")]


def regenerate(folder: str | Path, settings: StudySettings | None = None) -> list[Path]:
    """Re-write a record folder's pair.csv, verdicts.csv and section.md from its own metrics.csv (its header.md,
    when present, heads section.md)."""
    folder = Path(folder)
    metrics = read_metrics_csv(folder / "metrics.csv")
    header_path = folder / "header.md"
    header = header_path.read_text().splitlines() + [""] if header_path.is_file() else []
    return write_pair(metrics, folder, settings, header)


# ------------------------------------------------------------------------------------------ command line
def pair_groups(params: Any, group: str) -> tuple[Any, Any, list[str]]:
    """(the bf16 group, the fp32 group: the study's, the configurations) of run group `group`."""
    from multitab.config import ConfigError

    if group not in params.runs:
        raise ConfigError(f"{params.source}: no run group {group!r} (runs.*); the bf16 side of the pair is one")
    bf16 = params.runs[group]
    data = bf16.data
    if not isinstance(data, dict) or list(data) != ["study"]:
        raise ConfigError(f"{params.source}: runs.{group}.data must name study configurations ({{study: [...]}}), "
                          f"not {data!r}: the fp32 side is the study's runs of the same")
    return bf16, params.group(params.study.group), list(data["study"])


def main(argv: Sequence[str] | None = None) -> int:
    """`compare` (the pair from the two groups' run folders into --out), `record` (a report into a record folder
    with its header.md), `regenerate FOLDER`, `targets` (the flow targets `make precision-pair` trains)."""
    import argparse

    from multitab.config import ConfigError, load_params
    from multitab.config.aggregate import synthetic_configs
    from multitab.evaluation.bench.generator import generator_line
    from multitab.evaluation.bench.study import (
        add_record_commands,
        copy_into_record,
        write_csv,
        write_text,
    )
    from multitab.runtime.provenance import git_commit, machine

    p = argparse.ArgumentParser(prog="python -m multitab.evaluation.bench.precision")
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("compare", "targets"):
        one = sub.add_parser(name)
        one.add_argument("--params", default="params.yaml")
        one.add_argument("--group", default="study_bf16", help="the bf16 run group (default study_bf16)")
    sub.choices["compare"].add_argument("--out", type=Path, default=Path("results/precision_pair"))
    add_record_commands(sub)
    a = p.parse_args(argv)
    try:
        if a.command in ("compare", "targets"):
            params = load_params(a.params)
            bf16, fp32, configs = pair_groups(params, a.group)
            if a.command == "targets":
                print(" ".join([f"train@{params.study.group}-{c}-*" for c in configs] + [f"train@{a.group}-*"]))
                return 0
            models = [m for m in bf16.models if m in fp32.models]
            seeds = [s for s in bf16.seeds if s in fp32.seeds]
            missing = check_pairs(fp32.out, bf16.out, configs, models, seeds)
            for line in missing:
                print(f"bench.precision: {line}", file=sys.stderr)
            metrics = collect_pair(fp32.out, bf16.out, synthetic_configs(
                {c: params.bench.configs[c] for c in configs}), models, seeds)
            if metrics.empty:
                raise StudyError(f"{fp32.out}, {bf16.out}: no run of the pair yet; `make precision-pair` trains them")
            settings = StudySettings(model=params.study.claim.model, rivals=params.study.claim.rivals,
                                     alpha=params.study.claim.alpha)
            a.out.mkdir(parents=True, exist_ok=True)
            write_csv(metrics, a.out / "metrics.csv")
            write_pair(metrics, a.out, settings)
            print(f"bench.precision: {a.out / 'section.md'}")
            return 0
        if a.command == "record":
            copy_into_record(a.source, a.target, ("metrics.csv",), "make precision-pair")
            runs = read_metrics_csv(a.target / "metrics.csv").drop_duplicates(["precision", "config", "model", "seed"])
            commit = git_commit(a.source)
            lines = [f"> {a.note}", "", f"- Commit: `{commit}`; machine: {machine()}.", generator_line(commit),
                     f"- Scale: configurations {list(dict.fromkeys(runs['config']))}, seeds "
                     f"{sorted(int(s) for s in runs['seed'].unique())}, "
                     f"{sorted({int(x) for x in runs['n_train'].dropna()})} training rows per run.",
                     "- Training time per precision (train_seconds of the runs): " + ", ".join(
                         f"{prec} {part['train_seconds'].sum():.0f} s in {len(part)} runs"
                         for prec, part in runs.groupby("precision", sort=False)) + "."]
            if a.flow_wall_seconds is not None:
                lines.append(f"- Wall time of the `flows.pipeline` runs: {a.flow_wall_seconds:.0f} s.")
            write_text("\n".join(lines) + "\n\n", a.target / "header.md")
        regenerate(a.target if a.command == "record" else a.folder)
    except (StudyError, ConfigError, OSError) as e:
        print(f"bench.precision: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
