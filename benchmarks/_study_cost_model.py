"""The arithmetic of benchmarks/study_cost.py's projection (its docstring states the model): a measured
run's start-up split into a fixed and a per-row part, a run's and a stack's projected seconds, and the
epochs per run taken from a study record. A module beside the script, not a script: study_cost.py and
projection_check.py import it (study_cost.py re-exports its names, which the tests read there).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pandas as pd


def split_startup(wall: float, epoch_seconds: list[float], members: int) -> dict[str, float]:
    """One measured run's (or stack member's) seconds per steady epoch and its start-up in two parts: `warmup`,
    the first epoch's excess over the steady epochs (fixed: kernel selection, allocator growth, not more work
    at more rows), and `startup_per_row`, the wall time left over per member (data loading, model build, test
    evaluation: scaled with the rows). `epoch_seconds` are the per-member epoch seconds, first epoch first."""
    steady = epoch_seconds[1:] or epoch_seconds
    per_epoch = statistics.median(steady)
    warmup = max(0.0, epoch_seconds[0] - per_epoch)
    # the epochs as run: the first one's warm-up is counted in `warmup`, the rest at the steady rate
    rest = max(0.0, wall / members - per_epoch * len(epoch_seconds) - warmup)
    return {"seconds_per_epoch": per_epoch, "warmup": warmup, "startup_per_row": rest, "startup": warmup + rest}


def run_seconds(m: dict[str, float], epochs: float, scale: float, stage_start: float) -> float:
    """Projected seconds of one run (one stack member) from its measurement `m` (split_startup's keys and
    `stack_members`): the stage's fixed start shared by the stack's members, the fixed warm-up, and the per-row
    start-up and `epochs` steady epochs scaled by `scale` (target rows / measured rows)."""
    return (stage_start / m["stack_members"] + m["warmup"]
            + (m["startup_per_row"] + epochs * m["seconds_per_epoch"]) * scale)


def data_stack_seconds(m: dict[str, float], epochs_by_config: dict[str, float], seeds: int, scale: float,
                       stage_start: float) -> float:
    """Projected seconds of every configuration in `epochs_by_config` (one task count) x `seeds` seeds of one
    model trained as ONE stack, from the measurement `m` of one member of such a stack (`stack_members` of
    them, the stacked epoch and start-up shared out): the stack runs until its slowest member stops, at the
    whole stack's cost throughout, and pays the stage start and the warm-up once. A model measured alone
    (`stack_members` 1: it cannot stack) runs every configuration and seed separately, each for its own
    configuration's epochs."""
    if m["stack_members"] == 1:
        return sum(run_seconds(m, e, scale, stage_start) for e in epochs_by_config.values()) * seeds
    members = len(epochs_by_config) * seeds
    if m["stack_members"] != members:
        raise ValueError(f"measured a stack of {m['stack_members']:g} members, projecting one of {members}")
    return members * run_seconds(m, max(epochs_by_config.values()), scale, stage_start)


def epochs_per_run(metrics: pd.DataFrame, stacked: bool) -> dict[tuple[str, str], float]:
    """Epochs per run by (configuration, model) from a study record's metrics.csv (one row per task): the
    median over the seeds for separate runs, the max for a stack (it runs until its slowest member stops)."""
    runs = metrics.drop_duplicates(["config", "model", "seed"]).groupby(["config", "model"])["epochs"]
    got = runs.max() if stacked else runs.median()
    return {(str(c), str(m)): float(v) for (c, m), v in got.items()}


def choose_epoch_record(rows_by_record: dict[str, int], target_rows: int) -> tuple[str, bool]:
    """The record whose epochs the projection takes, and whether it was measured at the target's training rows:
    the one at `target_rows` when given, else the largest (its epoch count assumed to hold at the target)."""
    at_target = [r for r, n in rows_by_record.items() if n == target_rows]
    if at_target:
        return at_target[0], True
    return max(rows_by_record, key=lambda r: rows_by_record[r]), False


def record_train_rows(metrics: pd.DataFrame, record: Path) -> int:
    rows = set(metrics["n_train"].astype(int))
    if len(rows) != 1:
        raise SystemExit(f"{record}/metrics.csv: runs at {sorted(rows)} training rows; a record for the projection "
                         "must hold one size")
    return rows.pop()


def read_records(records: list[Path], configs: list[str], models: list[str]) -> dict[str, pd.DataFrame]:
    """Each `--record` folder's metrics.csv (the columns the projection reads) by folder, each checked to
    hold a run of every configuration and model; SystemExit naming the record otherwise."""
    record_metrics: dict[str, pd.DataFrame] = {}
    for r in records:
        try:
            record_metrics[str(r)] = pd.read_csv(r / "metrics.csv",
                                                 usecols=["config", "model", "seed", "epochs", "n_train"])
        except (OSError, ValueError) as err:
            raise SystemExit(f"--record {r}: cannot read its metrics.csv ({err}); give a study record folder "
                             "(results/study/<name>)") from None
        missing = {(c, m) for c in configs for m in models} - set(epochs_per_run(record_metrics[str(r)], False))
        if missing:
            raise SystemExit(f"--record {r}: metrics.csv has no runs of {sorted(missing)[:3]}...; give a record of "
                             "the whole study")
    return record_metrics


def epochs_by_run(record_metrics: dict[str, pd.DataFrame], rows_by_record: dict[str, int], target_rows: int,
                  stacked: dict[str, bool], configs: list[str], models: list[str], *, assumed: float | None
                  ) -> tuple[dict[tuple[str, str], float], str, int | None]:
    """The epochs per run by (configuration, model), where they come from in words, and the training rows of
    the record they come from (None where assumed): from the record `choose_epoch_record` picks, the max over
    the seeds for a model in `stacked` and the median otherwise; without a record, `assumed` (default 20)."""
    if not record_metrics:
        e = assumed if assumed is not None else 20.0
        return ({(c, m): e for c in configs for m in models},
                f"assumed {e:g} epochs per run (early stopping; not measured)", None)
    chosen, at_target = choose_epoch_record(rows_by_record, target_rows)
    epochs_measured_at_rows = rows_by_record[chosen]
    medians = epochs_per_run(record_metrics[chosen], stacked=False)
    maxima = epochs_per_run(record_metrics[chosen], stacked=True)
    epochs = {(c, m): (maxima if stacked[m] else medians)[c, m] for c in configs for m in models}
    epochs_source = (f"{chosen}/metrics.csv: per configuration and model, the median epochs over the seeds "
                     "(separate runs)" + (", the max over the seeds for a stack (it runs until its slowest "
                                          "member stops)" if any(stacked.values()) else "")
                     + (f"; measured at {epochs_measured_at_rows:,} training rows, the projection's size"
                        if at_target else
                        f"; measured at {epochs_measured_at_rows:,} training rows: ASSUMED to hold at "
                        f"{target_rows:,}"))
    return epochs, epochs_source, epochs_measured_at_rows
