"""A hyperparameter sweep's outputs (stage sweep_select), from the sweeps multitab.evaluation.sweep collected
and ranked: the selections as hparams/swept/<dataset>/<model>.yaml, and results/sweeps/'s points.csv (every
grid point), report.md (the grid, the selected point, the authors' selection and its rank), selection.json and
a figure per dataset and model; `record` copies a real sweep's outputs into a committed record
(`python -m multitab.evaluation.sweep_report record`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from multitab.evaluation.sweep import TIE_RULE, Sweep, SweepError, same_value, selections
from multitab.files.io import atomic_dir, read_json, write_json, write_text
from multitab.markup import csv_text
from multitab.runs.profiles import plain
from multitab.runs.types import point_id


def points_csv(sweeps: Sequence[Sweep]) -> str:
    axes = list(dict.fromkeys(a for s in sweeps for a in s.grid))
    rows: list[list[Any]] = [["dataset", "model", "rank", "selected", *axes, "seeds", "val_mean", "val_std",
                              "test_mean", "best_epoch:epochs", "train_seconds"]]
    for s in sweeps:
        best = s.selected
        for rank, p in enumerate(s.ranked(), 1):
            rows.append([s.dataset, s.model, rank, p is best, *[p.coords.get(a, "") for a in axes],
                         len(p.records), _num(p.val, 6), _num(p.val_std, 6), _num(p.test, 6), p.epochs,
                         f"{p.seconds:.1f}"])
    return csv_text(rows)


def _num(v: float | None, decimals: int) -> str:
    return "" if v is None else f"{v:.{decimals}f}"


def report_markdown(sweeps: Sequence[Sweep], figures: Mapping[tuple[str, str], str], header: str = "") -> str:
    lines = ["# Hyperparameter sweeps", ""]
    if header:
        lines += [header, ""]
    lines += [f"Selection: {TIE_RULE}. The selected configurations are hparams/swept/<dataset>/<model>.yaml "
              "(`train.hparams: swept` trains with them); every point is in points.csv.", ""]
    for s in sweeps:
        ranked = s.ranked()
        best = ranked[0]
        total = sum(p.seconds for p in s.points)
        lines += [f"## {s.model} on {s.dataset}", ""]
        lines.append(f"- Grid ({s.family}): " + " × ".join(f"{a} {list(v)}" for a, v in s.grid.items())
                     + f" = {len(s.points)} points × {len(s.seeds)} seed(s) {list(s.seeds)}; "
                     f"training time {total:,.0f} s in all.")
        lines.append(f"- **Selected**: {best.label()}: validation {_num(best.val, 4)}, test {_num(best.test, 4)}.")
        authors = s.authors_point()
        if authors is None:
            lines.append("- The authors published no selection for this model on this dataset.")
        else:
            hit = s.find(authors)
            where = (f"rank {ranked.index(hit) + 1} of {len(ranked)}, validation {_num(hit.val, 4)}, "
                     f"test {_num(hit.test, 4)}" if hit else "not a point of this grid")
            same = hit is best
            lines.append(f"- The authors' selection ({s.base.file}): {point_id(authors)}: {where}"
                         + ("; the sweep selects the same point." if same else "."))
        if (s.dataset, s.model) in figures:
            lines += ["", f"![{s.model} on {s.dataset}]({figures[(s.dataset, s.model)]})"]
        lines += ["", "| rank | point | val | val σ | test | best:epochs | seconds |",
                  "|---:|---|---:|---:|---:|---|---:|"]
        for rank, p in enumerate(ranked, 1):
            mark = " **(selected)**" if p is best else ""
            if authors is not None and s.find(authors) is p:
                mark += " (authors')"
            lines.append(f"| {rank} | {p.label()}{mark} | {_num(p.val, 4)} | {_num(p.val_std, 4)} | "
                         f"{_num(p.test, 4)} | {p.epochs} | {p.seconds:.1f} |")
        lines.append("")
    return "\n".join(lines)


def _floor(values: Sequence[float]) -> float:
    """The plot's lower limit: wide enough for the useful points, above diverged ones (a diverged
    regression's explained variance can be -40, which would flatten every other point)."""
    ordered = sorted(values)
    best, median = ordered[-1], ordered[len(ordered) // 2]
    return min(median, best - 0.02) - max(best - median, 0.02)


def plot(sweep: Sweep, folder: Path, dpi: int = 120) -> str:
    """One panel per hyperparameter: every point's validation metric at its value (dots), the best per
    value (line), the selected point (star); points far below the rest (diverged runs) sit on the lower
    edge as triangles, and the title counts them. Returns the PNG's file name."""
    from multitab.evaluation.figures import plt, save_figure

    axes_names = list(sweep.grid)
    fig, axs = plt.subplots(1, len(axes_names), figsize=(3.2 * len(axes_names), 3.0), sharey=True, squeeze=False)
    best = sweep.selected
    vals = [p.val for p in sweep.points if p.val is not None]
    floor = _floor(vals) if vals else 0.0
    for ax, axis in zip(axs[0], axes_names):
        values = list(sweep.grid[axis])
        shown: dict[bool, tuple[list[float], list[float]]] = {True: ([], []), False: ([], [])}
        for p in sweep.points:
            if p.val is not None:
                inside = p.val >= floor
                shown[inside][0].append(values.index(p.coords[axis]) + 0.12 * ((p.order % 7) - 3) / 3)
                shown[inside][1].append(p.val if inside else floor)
        ax.scatter(*shown[True], s=10, alpha=0.5, color="tab:blue")
        if shown[False][0]:
            ax.scatter(*shown[False], s=14, marker="v", alpha=0.5, color="tab:gray", clip_on=False)
        tops = [max((p.val for p in sweep.points if p.val is not None and same_value(p.coords[axis], v)),
                    default=math.nan)
                for v in values]
        ax.plot(range(len(values)), tops, color="tab:blue", lw=1.2, label="best at this value")
        if best.val is not None:
            ax.scatter([values.index(best.coords[axis])], [best.val], marker="*", s=140, color="tab:red",
                       zorder=3, label="selected")
        ax.set_xticks(range(len(values)), [str(v) for v in values])
        ax.set_xlabel(axis)
        ax.set_ylim(floor, max(vals) + 0.1 * (max(vals) - floor) if vals else 1.0)
        ax.grid(alpha=0.3)
    axs[0][0].set_ylabel("validation metric (mean over seeds)")
    axs[0][-1].legend(fontsize=7, loc="lower right")
    below = sum(v < floor for v in vals)
    undefined = len(sweep.points) - len(vals)
    extra = "".join([f"; {below} below the axis (▼)" if below else "",
                     f"; {undefined} undefined" if undefined else ""])
    fig.suptitle(f"{sweep.model} on {sweep.dataset}: {len(sweep.points)} grid points{extra}", fontsize=10)
    fig.tight_layout()
    name = f"{sweep.dataset}-{sweep.model}"
    save_figure(fig, folder, name, dpi)
    return f"{name}.png"


def write_sweep_outputs(sweeps: Sequence[Sweep], *, selected_path: Path, out: Path, protocol: str,
                        header: str = "") -> dict[str, Any]:
    """`selected_path` (hparams/swept/, replaced whole), out/{points.csv, report.md, selection.json, figures/};
    each file atomically."""
    chosen = selections(sweeps, protocol)
    header = ("# Written by stage sweep_select (stages/sweep_select.py) from the grid points under "
              "results/sweep_runs:\n"
              "# the selected configuration of this dataset and model (multitab.hparams) plus `selected_by`.\n"
              "# `train.hparams: swept` trains with it.\n")
    with atomic_dir(selected_path) as tmp:
        for name, content in chosen.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            text = yaml.safe_dump(content, sort_keys=False, default_flow_style=None, width=110)
            (tmp / name).write_text(header + text)
    figures = {(s.dataset, s.model): f"figures/{plot(s, out / 'figures')}" for s in sweeps}
    write_text(out / "points.csv", points_csv(sweeps))
    write_text(out / "report.md", report_markdown(sweeps, figures, header))
    summary: dict[str, dict[str, Any]] = {s.dataset: {} for s in sweeps}
    for s in sweeps:
        best = s.selected
        summary[s.dataset][s.model] = {"val_mean": best.val, "test_mean": best.test, "point": point_id(best.coords),
                                       "n_points": len(s.points),
                                       "train_seconds": round(sum(p.seconds for p in s.points), 1)}
    write_json(out / "selection.json", summary)
    return summary


def record(root: Path, target: Path, note: str) -> None:
    """A committed record of a real sweep: `make sweep`'s outputs (results/sweeps/: report.md, points.csv,
    selection.json, figures/; hparams/swept/) copied into `target`, with RECORD.md saying what ran,
    where, at which commit, and how long the flow run took (results/pipeline_summary.json)."""
    import shutil

    from multitab.runtime.provenance import git_commit, machine

    src = root / "results" / "sweeps"
    for name in ("report.md", "points.csv", "selection.json", "figures"):
        if not (src / name).exists():
            raise SweepError(f"{src / name}: not found; run `make sweep` first")
    target.mkdir(parents=True, exist_ok=True)
    for name in ("report.md", "points.csv", "selection.json"):
        shutil.copy(src / name, target / name)
    shutil.copytree(src / "figures", target / "figures", dirs_exist_ok=True)
    shutil.copytree(root / "hparams" / "swept", target / "swept", dirs_exist_ok=True)
    summary_path = root / "results" / "pipeline_summary.json"
    summary = read_json(summary_path) if summary_path.is_file() else {}
    from multitab.config import load_params

    params = load_params(root / "params.yaml")
    sweep_params = {name: plain(g) for name, g in params.runs.items() if g.sweep is not None}
    lines = [
        "# Sweep record", "", f"> {note}", "",
        f"- Commit: `{git_commit(root)}`; machine: {machine()}; no GPU.",
        f"- Wall time of the `flows.pipeline` run that trained the points and selected: "
        f"{summary.get('wall_seconds', float('nan')):.0f} s ({len(summary.get('ran', []))} stages ran).",
        "- Command: `make sweep` (python -m flows.pipeline --targets sweep_select) with params.yaml's sweep groups:",
        "", "```yaml", yaml.safe_dump({"runs": sweep_params}, sort_keys=False, width=110).rstrip(), "```", "",
        "Files: report.md (every point, the selection, the authors' selection), points.csv, selection.json, "
        "figures/ (validation metric against each hyperparameter), swept/ (hparams/swept/ of this run).", "",
    ]
    write_text(target / "RECORD.md", "\n".join(lines))


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m multitab.evaluation.sweep_report record --to results/sweep_records/<name> --note "..."`."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m multitab.evaluation.sweep")
    sub = p.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--root", type=Path, default=Path("."))
    rec.add_argument("--to", dest="target", required=True, type=Path)
    rec.add_argument("--note", required=True)
    a = p.parse_args(argv)
    try:
        record(a.root, a.target, a.note)
    except (SweepError, OSError) as e:
        print(f"sweep: {e}", file=sys.stderr)
        return 1
    return 0
