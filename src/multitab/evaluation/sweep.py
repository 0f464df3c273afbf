"""A hyperparameter sweep's selection and report, from its grid points' metrics (stage sweep_select).

Grid points are runs of stages/train.py (train@<sweep group>-...) under
``results/sweep_runs/<dataset>/<model>/<point>/seed<S>/metrics.json``; each record names its coordinates
(`hparams.point`). For every dataset and model of params.yaml's sweep groups (`runs.<group>.sweep`):

- **selection**: the grid point with the highest validation metric (the paper's: AUC for
  classification, explained variance for regression, averaged over tasks: `val_mean`) averaged over the
  sweep's seeds. **Ties**: means equal after rounding to `TIE_DECIMALS` decimals are a tie, and the tie
  goes to the point that comes first in the grid's order (params.yaml's axis order and value order: the
  lower learning rate, then the lower dropouts, RoPE off before on), i.e. the more conservative setting.
  A run whose validation metric is undefined (null) ranks last.
- **the selection as data**: hparams/swept/<dataset>/<model>.yaml, one file per selection in the vocabulary
  of multitab.hparams (the authors' file the grid started from with the selected point put in) plus
  `selected_by`; `train.hparams: swept` makes the training stages read them;
- **the report**: a table of every grid point (validation and test metric, epochs, time), the selected
  one marked, the authors' selection beside it where they published one, and a figure per dataset and
  model (the validation metric against each hyperparameter).
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from multitab.config.runs import RunGroup
from multitab.hparams import POINT_KEYS, ROPE, Hparams, read
from multitab.io import atomic_dir, read_json, write_json, write_text
from multitab.profiles import plain
from multitab.runs import grid_points, hparams_file, point_id

TIE_DECIMALS = 6
TIE_RULE = (f"highest mean validation metric over seeds; means equal to {TIE_DECIMALS} decimals are a tie, won by "
            "the point first in the grid's order (lower learning rate, then lower dropouts, RoPE off before on)")


class SweepError(ValueError):
    """A sweep's points are missing or malformed; the message names the file or the point."""


@dataclass
class Point:
    """One grid point of one dataset and model, over the sweep's seeds."""

    coords: dict[str, Any]
    order: int  # position in the grid's order (ties go to the lowest)
    records: dict[int, dict[str, Any]] = field(default_factory=dict)  # seed -> metrics.json

    def _mean(self, key: str) -> float | None:
        raw = [r.get(key) for r in self.records.values()]
        values = [float(v) for v in raw if v is not None and math.isfinite(v)]
        if not values or len(values) < len(raw):
            return None
        return sum(values) / len(values)

    @property
    def val(self) -> float | None:
        return self._mean("val_mean")

    @property
    def test(self) -> float | None:
        return self._mean("test_mean")

    @property
    def val_std(self) -> float | None:
        raw = [r.get("val_mean") for r in self.records.values()]
        values = [float(v) for v in raw if v is not None]
        if len(values) < 2 or len(values) < len(raw):
            return None
        mean = sum(values) / len(values)
        return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))

    @property
    def seconds(self) -> float:
        return sum(float(r.get("train_seconds") or 0.0) for r in self.records.values())

    @property
    def epochs(self) -> str:
        return "/".join(f"{r['best_epoch']}:{r['epochs']}" for _, r in sorted(self.records.items()))

    def label(self) -> str:
        return point_id(self.coords)


@dataclass
class Sweep:
    """The grid of one dataset and model, its points ranked."""

    dataset: str
    model: str
    family: str
    grid: dict[str, tuple[Any, ...]]
    seeds: tuple[int, ...]
    points: list[Point]
    base: Hparams  # the authors' file every point starts from
    published: bool = True  # whether the authors published that selection (else: constructor defaults)

    def ranked(self) -> list[Point]:
        def key(p: Point) -> tuple[int, float, int]:
            v = p.val
            return (1, 0.0, p.order) if v is None else (0, -round(v, TIE_DECIMALS), p.order)
        return sorted(self.points, key=key)

    @property
    def selected(self) -> Point:
        return self.ranked()[0]

    def authors_point(self) -> dict[str, Any] | None:
        """The authors' selection in this grid's coordinates (None: they published none)."""
        if not self.published:
            return None
        sections = {"model": self.base.model, "optim": self.base.optim or {}}
        coords: dict[str, Any] = {}
        for axis in self.grid:
            section, key = POINT_KEYS[axis][0]
            value = sections[section].get(key)
            coords[axis] = value == ROPE[True] if axis == "rope" else value
        return None if any(v is None for v in coords.values()) else coords

    def find(self, coords: Mapping[str, Any]) -> Point | None:
        for p in self.points:
            if all(_same(p.coords[a], coords[a]) for a in self.grid):
                return p
        return None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


def collect(sweeps_dir: Path, groups: Mapping[str, RunGroup], kinds: Mapping[str, tuple[str, ...]],
            root: Path) -> list[Sweep]:
    """Every dataset and model of the sweep groups `groups` (name -> group; `kinds`: every name of each data
    kind, multitab.runs.data_names) with its grid points' records under `sweeps_dir` and the authors' file
    (under the project `root`) the points start from. A record of another grid point fails naming its file;
    a missing one fails naming its folder."""
    out = []
    for group in groups.values():
        assert group.sweep is not None
        for (kind, dataset), model in itertools.product(group.data_names(dict(kinds)), group.models):
            points = [Point(coords=c, order=i) for i, c in enumerate(grid_points(group.grid))]
            file = hparams_file("authors", kind, dataset, model)
            authors = read(root / file, file)
            sweep = Sweep(dataset, model, group.sweep, group.grid, group.seeds, points, authors, authors.published)
            for p in points:
                for seed in group.seeds:
                    path = sweeps_dir / dataset / model / point_id(p.coords) / f"seed{seed}" / "metrics.json"
                    if not path.is_file():
                        raise SweepError(f"{path}: grid point not trained; run `make sweep` first")
                    record = read_json(path)
                    got = (record.get("hparams") or {}).get("point") or {}
                    if set(got) != set(p.coords) or not all(_same(got[a], p.coords[a]) for a in p.coords):
                        raise SweepError(f"{path}: holds grid point {got}, expected {p.coords}")
                    p.records[seed] = record
            out.append(sweep)
    return out


def selections(sweeps: Sequence[Sweep], protocol: str) -> dict[str, dict[str, Any]]:
    """hparams/swept/'s files: path (relative to hparams/swept) -> content (multitab.hparams' vocabulary: the
    authors' file with the selected point put in, before the protocol's overlay, plus `selected_by`)."""
    out: dict[str, dict[str, Any]] = {}
    for s in sweeps:
        best = s.selected
        chosen = s.base.with_point(best.coords)
        entry: dict[str, Any] = {"model": plain(chosen.model)}
        if chosen.optim is not None:
            entry["optim"] = dict(chosen.optim)
        entry["selected_by"] = {
            "metric": "val_mean (mean over tasks of AUC / explained variance), averaged over seeds",
            "value": None if best.val is None else round(best.val, 6),
            "test_mean": None if best.test is None else round(best.test, 6),
            "seeds": list(s.seeds),
            "grid": {a: list(v) for a, v in s.grid.items()},
            "point": best.coords,
            "started_from": s.base.file,
            "tie_rule": TIE_RULE,
            "protocol": protocol,
        }
        out[f"{s.dataset}/{s.model}.yaml"] = entry
    return out


def points_csv(sweeps: Sequence[Sweep]) -> str:
    axes = list(dict.fromkeys(a for s in sweeps for a in s.grid))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["dataset", "model", "rank", "selected", *axes, "seeds", "val_mean", "val_std", "test_mean",
                "best_epoch:epochs", "train_seconds"])
    for s in sweeps:
        best = s.selected
        for rank, p in enumerate(s.ranked(), 1):
            w.writerow([s.dataset, s.model, rank, p is best, *[p.coords.get(a, "") for a in axes],
                        len(p.records), _num(p.val, 6), _num(p.val_std, 6), _num(p.test, 6), p.epochs,
                        f"{p.seconds:.1f}"])
    return buf.getvalue()


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
        lines += ["", "| rank | point | val | val σ | test | best:epochs | seconds |", "|---:|---|---:|---:|---:|---|---:|"]
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
        tops = [max((p.val for p in sweep.points if p.val is not None and _same(p.coords[axis], v)), default=math.nan)
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
    header = ("# Written by stage sweep_select (stages/sweep_select.py) from the grid points under results/sweep_runs:\n"
              "# the selected configuration of this dataset and model (multitab.hparams) plus `selected_by`.\n"
              "# `train.hparams: swept` trains with it.\n")
    with atomic_dir(selected_path) as tmp:
        for name, content in chosen.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(header + yaml.safe_dump(content, sort_keys=False, default_flow_style=None, width=110))
    figures = {(s.dataset, s.model): f"figures/{plot(s, out / 'figures')}" for s in sweeps}
    write_text(out / "points.csv", points_csv(sweeps))
    write_text(out / "report.md", report_markdown(sweeps, figures, header))
    summary: dict[str, dict[str, Any]] = {s.dataset: {} for s in sweeps}
    for s in sweeps:
        best = s.selected
        summary[s.dataset][s.model] = {"val_mean": best.val, "test_mean": best.test, "point": point_id(best.coords),
                                       "n_points": len(s.points), "train_seconds": round(sum(p.seconds for p in s.points), 1)}
    write_json(out / "selection.json", summary)
    return summary


def record(root: Path, target: Path, note: str) -> None:
    """A committed record of a real sweep: `make sweep`'s outputs (results/sweeps/: report.md, points.csv,
    selection.json, figures/; hparams/swept/) copied into `target`, with RECORD.md saying what ran,
    where, at which commit, and how long the flow run took (results/pipeline_summary.json)."""
    import shutil

    from multitab.provenance import git_commit, machine

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
    """`python -m multitab.evaluation.sweep record --to results/sweep_records/<name> --note "..."`."""
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


if __name__ == "__main__":
    raise SystemExit(main())
