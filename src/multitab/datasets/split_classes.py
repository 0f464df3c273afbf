"""A declared dataset's splits made to hold a row of every class of every classification task (split@D).

A random draw (method `shuffle`), or official_test's validation rows stratified on the label combination (each
combination's share rounded), can leave a rare class out of a small split: 2 positives in 100 training rows give a
10 % validation split none, and a binary task without a positive in a split can neither stop early on val nor be
scored (AUC) on test. So after the method's draw every task is covered, each on its own (every task, not only the
rarest; the label combination is not stratified on): a class with at least as many rows in a file as there are
splits cut from that file gets a row in each of them. Where a split lacks one, a row of that class is swapped with
a row of the lacking split, taken from the split holding the most of the class. A swap keeps every split's size (the
row counts validate_raw expects), and takes out of a split only a row whose classes, of every task, that split
holds at least twice (or that are too rare to be placed everywhere), so no split loses a class it had. The rows
swapped are drawn with the split's seed; where the draw already covers every class nothing moves.

Refused, naming the task, the count and what to do: a binary task's class with fewer rows in a file than the splits
cut from it; a file that is a split of its own (a test or val file) without a row of a binary task's class; and
method `ordered`, which keeps the file's order, where a split lacks a class. A multiclass task's class with fewer
rows than splits stays where the draw put it (logged): validate_raw checks that it occurs in some split.

The paper's datasets never come here: their splits are the protocol's, exactly.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from multitab.datasets.schema import Task
from multitab.datasets.split import SPLITS, SplitError

log = logging.getLogger(__name__)

Rows = dict[str, tuple[str, np.ndarray]]  # split -> (raw file key, its row numbers in that file), as split_rows gives


def cover_classes(
    name: str, tasks: Sequence[Task], labels: Mapping[str, pd.DataFrame], rows: Rows, *, method: str, seed: int,
    classes: Mapping[str, Sequence[Any]] | None = None, files: Mapping[str, str] | None = None,
) -> Rows:
    """`rows` (split_rows' answer for declared dataset `name`) with every split holding a row of each class of each
    classification task in `tasks` that has enough rows (see the module docstring). `labels`: raw file key -> its
    coded labels; `classes`: task -> its class labels as the file spells them, `files`: raw file key -> the file's
    name (both for messages)."""
    coded = [t for t in tasks if t.type != "regression"]
    out: Rows = {k: (key, np.array(idx, copy=True)) for k, (key, idx) in rows.items()}
    rng = np.random.default_rng(seed)
    for key in dict.fromkeys(key for key, _ in out.values()):
        parts = [k for k in SPLITS if k in out and out[k][0] == key]
        if coded:
            _cover_file(name, coded, labels[key], out, parts, method, rng, classes or {}, (files or {}).get(key, key))
    return out


def _shown(classes: Mapping[str, Sequence[Any]], task: str, code: int) -> Any:
    labels = classes.get(task)
    return labels[code] if labels is not None and code < len(labels) else code


def _cover_file(
    name: str, coded: Sequence[Task], frame: pd.DataFrame, out: Rows, parts: list[str], method: str,
    rng: np.random.Generator, classes: Mapping[str, Sequence[Any]], file: str,
) -> None:
    """Cover the classes of one raw file's splits `parts` in `out`, in place."""
    labels = frame[[t.name for t in coded]].to_numpy(dtype=np.int64)  # (file rows, tasks)
    n_classes = [t.n_classes or 2 for t in coded]
    counts = {p: [np.bincount(labels[out[p][1], j], minlength=n_classes[j]) for j in range(len(coded))]
              for p in parts}
    totals = [np.sum([counts[p][j] for p in parts], axis=0) for j in range(len(coded))]
    placed = [np.asarray(total >= len(parts)) for total in totals]  # the classes every split of this file gets
    for j, t in enumerate(coded):
        for c in np.flatnonzero(~placed[j]):
            label, n = _shown(classes, t.name, int(c)), int(totals[j][c])
            if t.type == "binary" and len(parts) == 1:
                raise SplitError(f"datasets.{name}.local.path: {file}, the {parts[0]} split whole, holds no row of "
                                 f"class {label!r} of binary task {t.name!r}, which cannot be scored there (AUC) "
                                 "without one: add rows of that class to it, or give one table (split.method: "
                                 "shuffle) and let split@D cut the splits")
            if t.type == "binary":
                raise SplitError(f"datasets.{name}.tasks.{t.name}: class {label!r} has {n} row(s) in {file}, fewer "
                                 f"than the {len(parts)} splits cut from it ({', '.join(parts)}), and a binary task "
                                 "needs a row of each class in every split (to stop early on val, to score on test); "
                                 f"add rows of class {label!r}, or leave {t.name!r} out of tasks:")
            log.info("%s: class %r of task %r has %d row(s) in %s, fewer than its %d splits: not in every one",
                     name, label, t.name, n, file, len(parts))
    for j, t in enumerate(coded):
        for c in np.flatnonzero(placed[j]):
            for p in parts:
                if counts[p][j][c] == 0:
                    _place(name, t, j, int(c), p, labels, out, parts, counts, placed, method, rng, classes, file)


def _removable(labels: np.ndarray, idx: np.ndarray, counts: list[np.ndarray], placed: list[np.ndarray]) -> np.ndarray:
    """Which rows `idx` of a split (its per-task class `counts`) can leave it without taking the last row of a
    placed class."""
    ok = np.ones(len(idx), dtype=bool)
    for j in range(labels.shape[1]):
        codes = labels[idx, j]
        ok &= (counts[j][codes] >= 2) | ~placed[j][codes]
    return ok


def _place(
    name: str, t: Task, j: int, c: int, p: str, labels: np.ndarray, out: Rows, parts: list[str],
    counts: dict[str, list[np.ndarray]], placed: list[np.ndarray], method: str, rng: np.random.Generator,
    classes: Mapping[str, Sequence[Any]], file: str,
) -> None:
    """Give split `p` a row of class `c` of task `t` (the j-th coded task) by a swap (module docstring)."""
    label = _shown(classes, t.name, c)
    if method == "ordered":
        raise SplitError(f"datasets.{name}.split.method: ordered keeps the file's order, and its {p} rows "
                         f"({len(out[p][1])}) hold no row of class {label!r} of task {t.name!r} "
                         f"({int(sum(counts[s][j][c] for s in parts))} rows in {file}); use method: shuffle (every "
                         "split then gets a row of each class)")
    q = max(parts, key=lambda s: counts[s][j][c])
    idx_q, idx_p = out[q][1], out[p][1]
    give = np.flatnonzero((labels[idx_q, j] == c) & _removable(labels, idx_q, counts[q], placed))
    take = np.flatnonzero(_removable(labels, idx_p, counts[p], placed))
    if not len(give) or not len(take):
        key = {"val": "val_fraction", "test": "test_fraction"}.get(p, "val_fraction and test_fraction")
        lower = "lower" if p == "train" else "raise"
        raise SplitError(f"datasets.{name}.split.{key.split(' ')[0]}: the {p} split's {len(idx_p)} rows cannot hold "
                         f"a row of class {label!r} of task {t.name!r} without losing the only row of another "
                         f"task's class; {lower} {key} so that every split holds each class of every task")
    a, b = int(give[rng.integers(len(give))]), int(take[rng.integers(len(take))])
    r, s = int(idx_q[a]), int(idx_p[b])
    idx_q[a], idx_p[b] = s, r
    for jj in range(labels.shape[1]):
        counts[q][jj][labels[r, jj]] -= 1
        counts[q][jj][labels[s, jj]] += 1
        counts[p][jj][labels[s, jj]] -= 1
        counts[p][jj][labels[r, jj]] += 1
    log.info("%s: row %d of %s (class %r of task %r) swapped from %s into %s, row %d back: every split holds each "
             "class", name, r + 1, file, label, t.name, q, p, s + 1)
