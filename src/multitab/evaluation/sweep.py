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
- **the report** (multitab.evaluation.sweep_report, which also writes those files): a table of every grid
  point (validation and test metric, epochs, time), the selected one marked, the authors' selection beside
  it where they published one, and a figure per dataset and model (the validation metric against each
  hyperparameter).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multitab.config.runs import RunGroup
from multitab.files.io import read_json
from multitab.hparams import POINT_KEYS, ROPE, Hparams
from multitab.hparams.recipe import n_features, read_run_file
from multitab.runs.locate import grid_points, hparams_file
from multitab.runs.profiles import plain
from multitab.runs.types import point_id

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
            if all(same_value(p.coords[a], coords[a]) for a in self.grid):
                return p
        return None


def same_value(a: Any, b: Any) -> bool:
    """Two values of a grid axis are the same: booleans by identity, numbers within float rounding."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


def collect(sweeps_dir: Path, groups: Mapping[str, RunGroup], kinds: Mapping[str, tuple[str, ...]],
            root: Path) -> list[Sweep]:
    """Every dataset and model of the sweep groups `groups` (name -> group; `kinds`: every name of each data
    kind, multitab.runs.locate.data_names) with its grid points' records under `sweeps_dir` and the authors' file
    (under the project `root`) the points start from. A record of another grid point fails naming its file;
    a missing one fails naming its folder."""
    out = []
    for group in groups.values():
        assert group.sweep is not None
        for (kind, dataset), model in itertools.product(group.data_names(dict(kinds)), group.models):
            points = [Point(coords=c, order=i) for i, c in enumerate(grid_points(group.grid))]
            file = hparams_file("authors", kind, dataset, model, root)
            authors = read_run_file(root, file, model, functools.partial(n_features, dataset))
            sweep = Sweep(dataset, model, group.sweep, group.grid, group.seeds, points, authors, authors.published)
            for p in points:
                for seed in group.seeds:
                    path = sweeps_dir / dataset / model / point_id(p.coords) / f"seed{seed}" / "metrics.json"
                    if not path.is_file():
                        raise SweepError(f"{path}: grid point not trained; run `make sweep` first")
                    record = read_json(path)
                    got = (record.get("hparams") or {}).get("point") or {}
                    if set(got) != set(p.coords) or not all(same_value(got[a], p.coords[a]) for a in p.coords):
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
