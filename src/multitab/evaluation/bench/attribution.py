"""The attribution study's report (params.yaml `attribution`; multitab.config.attribution): per configuration,
the paper's claim checked under each arm, from the authors' exact setup to this project's `paper` study.

Everything is built from three CSV files, so a committed record regenerates its own figures and tables
(`regenerate(folder)`, byte for byte):

- `metrics.csv`: the study's metrics rows (bench/numbers.py, METRICS_COLUMNS) after `arm` and `run` (the run's
  folder under the runs directory); a run that two arms share appears under both, with the same `run`;
- `curves.csv`: the learning-curve rows, likewise with `arm`;
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
from multitab.evaluation.bench.render import ladder_figure, not_above, plus_minus

LADDER_COLUMNS = ["config", "arm", "source", "changed", "model_mean", "model_se", "best_rival", "rival_mean",
                  "rival_se", "gap", "gap_se", "verdict", "short_of", "not_converged"]
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


def ladder(metrics: pd.DataFrame, curves: pd.DataFrame, arms: pd.DataFrame, settings: StudySettings) -> pd.DataFrame:
    """One row per (configuration, arm) in the arms' order: MultiTab-Net's and the best rival's Δm (mean, SE),
    their gap and its SE, the verdict, the rivals it is not above when above others (`short_of`), and how many
    runs of the compared models are flagged not converged."""
    rows = []
    configs = list(dict.fromkeys(metrics["config"]))
    changes = all_changes(metrics, arms)
    for config in configs:
        for arm in arms.itertuples(index=False):
            part = metrics[(metrics.arm == arm.arm) & (metrics.config == config)].drop(columns=["arm", "run"])
            row: dict[str, Any] = {"config": config, "arm": arm.arm, "source": arm.source, "changed": changes[arm.arm],
                                   "model_mean": math.nan, "model_se": math.nan, "best_rival": "",
                                   "rival_mean": math.nan, "rival_se": math.nan, "gap": math.nan,
                                   "gap_se": math.nan, "verdict": "missing", "short_of": "", "not_converged": 0}
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
                arm_curves = curves[(curves.arm == arm.arm) & (curves.config == config)].drop(columns="arm")
                conv = convergence(part, arm_curves, settings)
                row["not_converged"] = int(conv.loc[conv.model.isin([settings.model, *settings.rivals]),
                                                    "not_converged"].sum())
            rows.append(row)
    return pd.DataFrame.from_records(rows, columns=LADDER_COLUMNS)


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
                  "Verdict | Not converged |", "|---|---|---|---|---|---|---|---|"]
        for r in part.itertuples(index=False):
            rival = f"{settings.label(r.best_rival)} {plus_minus(r.rival_mean, r.rival_se)}" if r.best_rival else "missing"
            lines.append(f"| {r.arm} | {SOURCE_LABELS.get(r.source, r.source)} | {r.changed} | "
                         f"{plus_minus(r.model_mean, r.model_se)} | {rival} | {plus_minus(r.gap, r.gap_se)} | "
                         f"**{r.verdict}**{not_above(r.short_of)} | {r.not_converged} |")
        lines.append("")
    return "\n".join(lines)


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
            text += f". Under {last.arm} it {_says(last.verdict)} ({plus_minus(last.gap, last.gap_se)}{not_above(last.short_of)})."
        missing = part.loc[part.verdict == "missing", "arm"].tolist()
        if missing:
            text += f" Missing arms: {', '.join(missing)}."
        lines.append(text)
    return "\n".join(lines)


def render_section(table: pd.DataFrame, settings: StudySettings, header: Sequence[str],
                   names: Mapping[str, str] | None = None) -> str:
    model = settings.label(settings.model)
    claim = "the paper's claim" if settings.model == StudySettings.model else f"the claim on {model}"
    lines = [f"## MultiTab-Bench attribution: which choice decides {claim}", "", *header,
             "Arms in order, each changing one factor from the arm before (`Changes`); `Whose`: whose setup the "
             "arm's last change belongs to (the first arm: the authors' code exactly). Verdict per arm: "
             f"three-valued at α (docs/study.md). Gap: {model}'s mean Δm minus the best rival's, ± the SE of "
             f"that difference; `not above`: where {model} is significantly above some rivals only, the "
             "others, with their one-sided Welch p; `Not converged`: runs of the compared models flagged by the "
             "convergence rule.", "",
             "### In plain words", "", paragraph(table, settings, names), "",
             "![Ladder](figures/ladder.png)", "", "### Ladder per configuration", "", ladder_markdown(table, settings)]
    return "\n".join(lines)


def write_attribution(metrics: pd.DataFrame, curves: pd.DataFrame, arms: pd.DataFrame, out: str | Path,
                      settings: StudySettings | None = None, *, header: Sequence[str] = ()) -> list[Path]:
    """Write into `out`, from the three frames only: ladder.csv, ladder.md, figures/ladder.{png,svg},
    section.md. Returns the paths."""
    from multitab.evaluation import figures
    from multitab.evaluation.bench.study import write_csv, write_text

    settings = settings or StudySettings()
    out = Path(out)
    table = ladder(metrics, curves, arms, settings)
    written = [write_csv(table, out / "ladder.csv"),
               write_text(ladder_markdown(table, settings), out / "ladder.md")]
    written += figures.save_figure(ladder_figure(table, settings), out / "figures", "ladder", settings.dpi)
    layers = layer_figures(metrics, settings, out)  # arms that differ in MultiTab-Net alone: Figures 5 and 6
    links = [f"![{p.stem}](figures/{p.name})" for p in layers if p.suffix == ".png"]
    header = [*header, *figure_answer(table, metrics, settings)] if layers else header
    names = {a: f"{settings.label(settings.model)} with {x}" for a, x in arm_layers(table).items()} if layers else None
    section = render_section(table, settings, header, names) + ("\n" + "\n\n".join(links) + "\n" if links else "")
    written += layers
    written.append(write_text(section, out / "section.md"))
    return written


def regenerate(folder: str | Path, settings: StudySettings | None = None) -> list[Path]:
    """Re-write a record folder's ladder, figure and section from its metrics.csv, curves.csv and arms.csv
    (its header.md, when present, heads section.md)."""
    folder = Path(folder)
    settings = read_claim(folder, settings)  # the model it tested and the labels, when the record keeps them
    metrics = read_metrics_csv(folder / "metrics.csv")
    if "arm" not in metrics.columns:
        raise StudyError(f"{folder / 'metrics.csv'}: no `arm` column; an attribution record's metrics have one")
    curves_path = folder / "curves.csv"
    curves = pd.read_csv(curves_path) if curves_path.is_file() else pd.DataFrame(columns=["arm", *CURVES_COLUMNS])
    header_path = folder / "header.md"
    header = header_path.read_text().splitlines() + [""] if header_path.is_file() else []
    return write_attribution(metrics, curves, read_arms_csv(folder / "arms.csv"), folder, settings, header=header)


def record_header(metrics: pd.DataFrame, *, commit: str, machine: str, note: str,
                  flow_wall_seconds: float | None = None) -> list[str]:
    """header.md lines of a committed attribution record: what ran, where, at which commit, and the training
    time per model over the distinct runs (a run two arms share is counted once)."""
    runs = metrics.drop_duplicates("run")
    arm_runs = len(metrics.drop_duplicates(["arm", "run"]))
    rows = sorted({int(x) for x in runs["n_train"].dropna()})
    from multitab.evaluation.bench.generator import generator_line

    lines = [f"> {note}", "", f"- Commit: `{commit}`; machine: {machine}.", generator_line(commit),
             f"- Scale: arms {list(dict.fromkeys(metrics['arm']))}, configurations {list(dict.fromkeys(runs['config']))}, "
             f"seeds {sorted(int(s) for s in runs['seed'].unique())}, {rows} training rows per run; {len(runs)} "
             f"distinct runs for {arm_runs} arm-runs.",
             "- Training time per model (train_seconds of the distinct runs, sum and per run):"]
    for model, part in runs.groupby("model", sort=False):
        lines.append(f"  - {model}: {part['train_seconds'].sum():.0f} s in {len(part)} runs "
                     f"({part['train_seconds'].mean():.0f} s per run, median {part['epochs'].median():g} epochs)")
    if flow_wall_seconds is not None:
        lines.append(f"- Wall time of the whole `flows.pipeline` run: {flow_wall_seconds:.0f} s.")
    return lines + [""]


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m multitab.evaluation.bench.attribution record --from results/attribution_report --to
    results/study/<name> --note "..." [--flow-wall-seconds S]`: copy the report's three CSVs into a record
    folder, write its header.md and regenerate the rest; `regenerate FOLDER`: only the last step."""
    import argparse
    import sys

    from multitab.evaluation.bench.reuse import reused_record
    from multitab.evaluation.bench.study import add_record_commands, copy_into_record, write_csv, write_text
    from multitab.runtime.provenance import git_commit, machine

    p = argparse.ArgumentParser(prog="python -m multitab.evaluation.bench.attribution")
    rec = add_record_commands(p.add_subparsers(dest="command", required=True))
    rec.add_argument("--reuse", type=Path, action="append", default=[], help="an earlier attribution record whose "
                     "runs of the configurations the report lacks are taken as they are (bench/reuse.py); "
                     "repeatable, in order")
    rec.add_argument("--configs", nargs="+", help="with --reuse: only these configurations of the report (those "
                     "trained since the reused record); the others come from --reuse")
    a = p.parse_args(argv)
    try:
        if a.command == "record":
            if a.configs and not a.reuse:
                raise StudyError("--configs takes part of the report; give the rest with --reuse FOLDER")
            # everything is read and checked before anything is written
            reused = reused_record(a.source, a.target, a.reuse, a.configs) if a.reuse else None
            copy_into_record(a.source, a.target, ("metrics.csv", "curves.csv", "arms.csv"), "make attribution")
            if (a.source / CLAIM_FILE).is_file():  # the claim it tested (bench/claim.py)
                copy_into_record(a.source, a.target, (CLAIM_FILE,), "make attribution")
            if reused is not None:  # the merged rows, not the report's copy
                metrics, curves, extra = reused
                write_csv(metrics, a.target / "metrics.csv")
                write_csv(curves, a.target / "curves.csv")
            else:
                metrics, extra = read_metrics_csv(a.target / "metrics.csv"), []
            header = record_header(metrics, commit=git_commit(a.source), machine=machine(), note=a.note,
                                   flow_wall_seconds=a.flow_wall_seconds)
            write_text("\n".join(header[:-1] + extra + [""]) + "\n", a.target / "header.md")
        regenerate(a.target if a.command == "record" else a.folder)
    except (StudyError, OSError) as e:
        print(f"bench.attribution: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
