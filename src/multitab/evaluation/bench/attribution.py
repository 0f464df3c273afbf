"""The attribution study's report (params.yaml `attribution`; multitab.config.attribution): per configuration,
the paper's claim checked under each arm, from the authors' exact setup to this project's `paper` study.

A record holds three CSV files, and everything else is built from the first and the last of them, so a
committed record regenerates its own figures and tables (`regenerate(folder)`, byte for byte):

- `metrics.csv`: the study's metrics rows (bench/numbers.py, METRICS_COLUMNS) after `arm` and `run` (the run's
  folder under the runs directory); a run that two arms share appears under both, with the same `run`;
- `curves.csv`: the learning-curve rows, likewise with `arm` (data: the convergence flags read the validation
  metrics of `metrics.csv`);
- `arms.csv`: the arms in order: `arm`, `source` (authors_code | paper | ours), `changed` (the factor the arm
  changes from the one before, `factor=value`; the first arm lists every factor).

Per arm and configuration: Δm per seed against that arm's own STL, the three-valued verdict (bench/numbers.py
`claims`), and the ladder's rung: MultiTab-Net's mean Δm minus the best rival's (the rival with the highest mean
Δm), with the standard error of that difference, sqrt(SE_model² + SE_rival²). The flip arm is the first arm
whose verdict differs from the arm before it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from multitab.config.aggregate import SyntheticConfig
from multitab.evaluation.bench.claim import CLAIM_FILE, read_claim
from multitab.evaluation.bench.continued import at_cap
from multitab.evaluation.bench.layers import arm_layers, figure_answer, layer_figures
from multitab.evaluation.bench.numbers import (
    CURVES_COLUMNS,
    METRICS_COLUMNS,
    StudyError,
    StudySettings,
    claims,
    convergence,
    delta_m_runs,
    read_arms_csv,
    read_metrics_csv,
    run_rows,
    short_of,
    summarise,
)
from multitab.evaluation.bench.power import seeds_needed
from multitab.evaluation.bench.render import convergence_rule, ladder_figure, not_above, plus_minus

LADDER_COLUMNS = ["config", "arm", "source", "changed", "model_mean", "model_se", "best_rival", "rival_mean",
                  "rival_se", "gap", "gap_se", "verdict", "short_of", "not_converged", "seeds_80", "power_now"]
SOURCE_LABELS = {"authors_code": "the authors' code", "paper": "the paper's text", "ours": "ours"}


# ------------------------------------------------------------------------------------------ collect
def collect_arms(runs_dir: str | Path, configs: Mapping[str, SyntheticConfig],
                 arms: Mapping[str, Sequence[tuple[str, str, int, str, str]]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(metrics rows, curve rows), each with `arm` first, of every arm's runs: arm -> (config, model, seed,
    data name, point folder) with run folder <runs_dir>/<data>/<model>/<point folder>/seed<S>. Absent runs
    are absent (the report says `missing`)."""
    runs_dir = Path(runs_dir)
    metric_rows: list[dict[str, Any]] = []
    curve_rows: list[dict[str, Any]] = []
    for arm, members in arms.items():
        for config, model, seed, data, point in members:
            rows = run_rows(runs_dir / data / model / point / f"seed{seed}", configs[config], config, model, seed)
            if rows is None:
                continue
            metric_rows += [{"arm": arm, "run": f"{data}/{model}/{point}/seed{seed}", **r} for r in rows[0]]
            curve_rows += [{"arm": arm, **r} for r in rows[1]]
    return (pd.DataFrame.from_records(metric_rows, columns=["arm", "run", *METRICS_COLUMNS]),
            pd.DataFrame.from_records(curve_rows, columns=["arm", *CURVES_COLUMNS]))


# ------------------------------------------------------------------------------------------ numbers
# What a factor's value changes besides its name says: held-out evaluation also moves early stopping off the
# training rows (the authors' loader validates and tests on the rows it trains on).
IMPLIED = {"evaluation=held_out": "early stopping on held-out validation rows and the test on held-out test "
                                  "rows, not on the training rows"}


def all_changes(metrics: pd.DataFrame, arms: pd.DataFrame) -> dict[str, str]:
    """arm -> everything it changes from the arm before: arms.csv's `changed`, what those values imply
    (IMPLIED), and the training rows per run when they differ from the arm before's (from the runs' n_train)."""
    out = {}
    before: list[int] = []
    for arm in arms.itertuples(index=False):
        rows = sorted({int(x) for x in metrics.loc[metrics.arm == arm.arm, "n_train"].dropna()})
        text = arm.changed
        implied = [IMPLIED[c.strip()] for c in str(arm.changed).split(",") if c.strip() in IMPLIED]
        if before and rows and rows != before:
            implied.insert(0, "training rows per run " + "/".join(f"{r:,}" for r in before) + " → "
                           + "/".join(f"{r:,}" for r in rows))
        if implied:
            text += " (" + "; ".join(implied) + ")"
        out[arm.arm] = text
        before = rows or before
    return out


def ladder(metrics: pd.DataFrame, arms: pd.DataFrame, settings: StudySettings) -> pd.DataFrame:
    """One row per (configuration, arm) in the arms' order: MultiTab-Net's and the best rival's Δm (mean, SE),
    their gap and its SE, the verdict, the rivals it is not above when above others (`short_of`), how many
    runs of the compared models are flagged not converged, and for an inconclusive verdict the seeds that would
    decide it at 80 % power (`seeds_80`, "7 (does not hold)" or "> 50") and the power at its own seeds
    (`power_now`), simulated from the observed means and spreads under the same rule (bench/power.py)."""
    rows = []
    configs = list(dict.fromkeys(metrics["config"]))
    changes = all_changes(metrics, arms)
    for config in configs:
        for arm in arms.itertuples(index=False):
            part = metrics[(metrics.arm == arm.arm) & (metrics.config == config)].drop(columns=["arm", "run"])
            row: dict[str, Any] = {"config": config, "arm": arm.arm, "source": arm.source, "changed": changes[arm.arm],
                                   "model_mean": math.nan, "model_se": math.nan, "best_rival": "",
                                   "rival_mean": math.nan, "rival_se": math.nan, "gap": math.nan,
                                   "gap_se": math.nan, "verdict": "missing", "short_of": "", "not_converged": 0,
                                   "seeds_80": "", "power_now": math.nan}
            if not part.empty:
                dm = delta_m_runs(part, settings.baseline)
                summary = summarise(dm).set_index("model")
                tests = claims(dm, [config], settings)
                row.update(verdict=tests["verdict"].iloc[0], short_of=short_of(tests, settings))
                rivals = [r for r in settings.rivals if r in summary.index]
                if settings.model in summary.index and rivals:
                    best = max(rivals, key=lambda r: float(summary.loc[r, "mean"]))
                    m, r = summary.loc[settings.model], summary.loc[best]
                    row.update(model_mean=float(m["mean"]), model_se=float(m["se"]), best_rival=best,
                               rival_mean=float(r["mean"]), rival_se=float(r["se"]),
                               gap=float(m["mean"] - r["mean"]), gap_se=math.hypot(float(m["se"]), float(r["se"])))
                if row["verdict"] == "inconclusive":
                    row.update(_power(dm, settings))
                conv = convergence(part, settings)
                row["not_converged"] = int(conv.loc[conv.model.isin([settings.model, *settings.rivals]),
                                                    "not_converged"].sum())
            rows.append(row)
    return pd.DataFrame.from_records(rows, columns=LADDER_COLUMNS)


def _power(dm: pd.DataFrame, settings: StudySettings) -> dict[str, Any]:
    """`seeds_80` and `power_now` of one configuration's per-seed Δm (bench/power.py); nothing to say without
    two seeds of the model and of a rival."""
    ours = dm.loc[dm.model == settings.model, "delta_m"].to_numpy(dtype=float)
    rivals = [dm.loc[dm.model == r, "delta_m"].to_numpy(dtype=float) for r in settings.rivals]
    needed = seeds_needed(ours, [r for r in rivals if r.size], settings.alpha)
    return {} if needed is None else {"seeds_80": needed.text(), "power_now": needed.power_now}


def flips(table: pd.DataFrame) -> dict[str, list[tuple[str, str, str]]]:
    """config -> every (arm, verdict before, verdict after) where the verdict changes from the arm before
    (missing arms are skipped over)."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    for config, part in table.groupby("config", sort=False):
        changes = []
        previous = None
        for row in part.itertuples(index=False):
            if row.verdict == "missing":
                continue
            if previous is not None and row.verdict != previous:
                changes.append((row.arm, previous, row.verdict))
            previous = row.verdict
        out[str(config)] = changes
    return out


# ------------------------------------------------------------------------------------------ render
def ladder_markdown(table: pd.DataFrame, settings: StudySettings) -> str:
    lines = []
    for config, part in table.groupby("config", sort=False):
        lines += [f"#### {config}", "",
                  f"| Arm | Whose | Changes | {settings.label(settings.model)} Δm | Best rival Δm | Gap ± SE | "
                  "Verdict | Not converged | Seeds for 80 % power |", "|---|---|---|---|---|---|---|---|---|"]
        for r in part.itertuples(index=False):
            rival = (f"{settings.label(r.best_rival)} {plus_minus(r.rival_mean, r.rival_se)}" if r.best_rival
                     else "missing")
            lines.append(f"| {r.arm} | {SOURCE_LABELS.get(r.source, r.source)} | {r.changed} | "
                         f"{plus_minus(r.model_mean, r.model_se)} | {rival} | {plus_minus(r.gap, r.gap_se)} | "
                         f"**{r.verdict}**{not_above(r.short_of)} | {r.not_converged} | {_seeds_cell(r)} |")
        lines.append("")
    return "\n".join(lines)


def _seeds_cell(r: Any) -> str:
    """The ladder's last cell: for an inconclusive verdict the seeds that would decide it (and the power now)."""
    if not isinstance(r.seeds_80, str) or not r.seeds_80:
        return ""
    return f"{r.seeds_80}; power now {r.power_now:.2f}"


def _says(verdict: str) -> str:
    return {"holds": "**holds**", "does not hold": "**does not hold**"}.get(verdict, f"is **{verdict}**")


def paragraph(table: pd.DataFrame, settings: StudySettings, names: Mapping[str, str] | None = None) -> str:
    """The answer in plain words, per configuration; `names`: arm -> what the first arm is called (default
    whose setup its last change belongs to; a both-layers record: MultiTab-Net's layer)."""
    model = settings.label(settings.model)
    lines = []
    changes = flips(table)
    for config, part in table.groupby("config", sort=False):
        present = part[part.verdict != "missing"]
        if present.empty:
            lines.append(f"- {config}: no arm has all its runs yet.")
            continue
        first, last = present.iloc[0], present.iloc[-1]
        name = (names or {}).get(first.arm) or SOURCE_LABELS.get(first.source, first.source)
        text = (f"- {config}: under {first.arm} ({name}) the claim "
                f"({model} significantly above every rival at α {settings.alpha}) {_says(first.verdict)} "
                f"(gap to the best rival {plus_minus(first.gap, first.gap_se)} points{not_above(first.short_of)})")
        moves = changes[str(config)]
        if not moves:
            text += (f"; no arm changes that verdict, down to {last.arm} ({plus_minus(last.gap, last.gap_se)}"
                     f"{not_above(last.short_of)}).")
        else:
            arm, before, after = moves[0]
            what = part.loc[part.arm == arm, "changed"].iloc[0]
            text += f"; the verdict turns to **{after}** at {arm}, once {what}"
            if len(moves) > 1:
                text += "; then " + "; ".join(f"**{a2}** at {a}" for a, _, a2 in moves[1:])
            text += (f". Under {last.arm} it {_says(last.verdict)} "
                     f"({plus_minus(last.gap, last.gap_se)}{not_above(last.short_of)}).")
        missing = part.loc[part.verdict == "missing", "arm"].tolist()
        if missing:
            text += f" Missing arms: {', '.join(missing)}."
        lines.append(text)
    return "\n".join(lines)


def render_section(table: pd.DataFrame, settings: StudySettings, header: Sequence[str],
                   names: Mapping[str, str] | None = None, notes: Sequence[str] = ()) -> str:
    """section.md: `header`, the ladder's reading, `notes` (lines after it), the plain words and the ladder."""
    model = settings.label(settings.model)
    claim = "the paper's claim" if settings.model == StudySettings.model else f"the claim on {model}"
    lines = [f"## MultiTab-Bench attribution: which choice decides {claim}", "", *header,
             "Arms in order, each changing one factor from the arm before (`Changes`); `Whose`: whose setup the "
             "arm's last change belongs to (the first arm: the authors' code exactly). Verdict per arm: "
             f"three-valued at α (docs/study.md). Gap: {model}'s mean Δm minus the best rival's, ± the SE of "
             f"that difference; `not above`: where {model} is significantly above some rivals only, the "
             "others, with their one-sided p; `Not converged`: runs of the compared models flagged by the "
             f"convergence rule ({convergence_rule(settings)}; under the same arm).", "",
             *notes,
             "### In plain words", "", paragraph(table, settings, names), "",
             "![Ladder](figures/ladder.png)", "", "### Ladder per configuration", "", ladder_markdown(table, settings)]
    return "\n".join(lines)


def write_attribution(metrics: pd.DataFrame, arms: pd.DataFrame, out: str | Path,
                      settings: StudySettings | None = None, *, header: Sequence[str] = ()) -> list[Path]:
    """Write into `out`, from the two frames only: ladder.csv, ladder.md, figures/ladder.{png,svg},
    section.md. Returns the paths."""
    from multitab.evaluation import figures
    from multitab.evaluation.bench.study import write_csv, write_text

    settings = settings or StudySettings()
    out = Path(out)
    table = ladder(metrics, arms, settings)
    written = [write_csv(table, out / "ladder.csv"),
               write_text(ladder_markdown(table, settings), out / "ladder.md")]
    written += figures.save_figure(ladder_figure(table, settings), out / "figures", "ladder", settings.dpi)
    layers = layer_figures(metrics, settings, out)  # arms that differ in MultiTab-Net alone: Figures 5 and 6
    links = [f"![{p.stem}](figures/{p.name})" for p in layers if p.suffix == ".png"]
    header = [*header, *figure_answer(table, metrics, settings)] if layers else header
    names = {a: f"{settings.label(settings.model)} with {x}" for a, x in arm_layers(table).items()} if layers else None
    capped, runs = at_cap(metrics), metrics["run"].nunique()
    notes = [f"Runs that ended at their epoch cap, not by early stopping (the paper's rule has no cap that binds: zero "
             f"is the goal; docs/study.md, \"Five seeds\"): {len(capped)} of {runs}"
             + (f": {', '.join(capped)}." if 0 < len(capped) <= 12 else "."), ""]
    section = render_section(table, settings, header, names, notes)
    section += "\n" + "\n\n".join(links) + "\n" if links else ""
    written += layers
    written.append(write_text(section, out / "section.md"))
    return written


def regenerate(folder: str | Path, settings: StudySettings | None = None) -> list[Path]:
    """Re-write a record folder's ladder, figure and section from its metrics.csv and arms.csv (its header.md,
    when present, heads section.md; its curves.csv, the runs' learning curves, is kept as data)."""
    folder = Path(folder)
    settings = read_claim(folder, settings)  # the model it tested and the labels, when the record keeps them
    metrics = read_metrics_csv(folder / "metrics.csv")
    if "arm" not in metrics.columns:
        raise StudyError(f"{folder / 'metrics.csv'}: no `arm` column; an attribution record's metrics have one")
    header_path = folder / "header.md"
    header = header_path.read_text().splitlines() + [""] if header_path.is_file() else []
    return write_attribution(metrics, read_arms_csv(folder / "arms.csv"), folder, settings, header=header)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m multitab.evaluation.bench.attribution record --from results/attribution_report --to
    results/study/<name> --note "..." [--flow-wall-seconds S] [--reuse FOLDER ... --configs C ... --seeds S ...]
    [--continued FOLDER] [--progress INDEX]`: the report's CSVs (with reused and continued runs:
    bench/attribution_record.py) into a record folder, its header.md, and the rest regenerated; `regenerate FOLDER`:
    only the last step."""
    import argparse
    import sys

    from multitab.evaluation.bench.attribution_record import add_record_options, assemble
    from multitab.evaluation.bench.study import add_record_commands, copy_into_record, write_csv, write_text

    p = argparse.ArgumentParser(prog="python -m multitab.evaluation.bench.attribution")
    add_record_options(add_record_commands(p.add_subparsers(dest="command", required=True)))
    a = p.parse_args(argv)
    try:
        if a.command == "record":
            metrics, curves, header = assemble(a)  # everything read and checked before anything is written
            copy_into_record(a.source, a.target, ("metrics.csv", "curves.csv", "arms.csv"), "make attribution")
            if (a.source / CLAIM_FILE).is_file():  # the claim it tested (bench/claim.py)
                copy_into_record(a.source, a.target, (CLAIM_FILE,), "make attribution")
            write_csv(metrics, a.target / "metrics.csv")
            write_csv(curves, a.target / "curves.csv")
            write_text("\n".join(header) + "\n", a.target / "header.md")
        regenerate(a.target if a.command == "record" else a.folder)
    except (StudyError, OSError) as e:
        print(f"bench.attribution: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
