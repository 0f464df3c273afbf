"""DVC experiments side by side on one screen (`make compare`): the params that differ between them and the
headline results (results/metrics.json: Δm per dataset and model, the p-values), one row per value and one
column per experiment.

`dvc exp show` prints one column per param, metric and dependency: with every run's metrics.json a DVC
metric, that is thousands of columns. This reads `dvc exp show --json` and keeps what compares experiments:
the params with more than one value among the shown experiments (`--only-changed`'s rule) and the metrics of
the summary file(s) (`--metrics`, default results/metrics.json), those that differ (all of them with `--all`).
A column per experiment (the workspace, the commit they branch from, each experiment) keeps two or three
experiments within 120 columns, whatever the number of metrics. A revision without the summary file (a
commit whose results were never recorded) is named under the table instead of a column of "missing".

    python -m multitab.evaluation.experiments [NAME ...] [--all] [--metrics FILE] [--project DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUMMARY = "results/metrics.json"
WIDTH = 120  # the screen the table is laid out for
_VALUE = 14  # a value column's width, gap included


@dataclass(frozen=True)
class Revision:
    label: str  # "workspace", the branch or short commit, or the experiment's name
    params: dict[str, Any]  # flattened `file:key` -> value (the file left out for params.yaml)
    metrics: dict[str, Any] | None  # flattened key -> value of the summary files; None: not in this revision


def _flat(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(data, Mapping) and data:
        for key, value in data.items():
            yield from _flat(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, data


def _revision(label: str, data: Mapping[str, Any], summaries: Sequence[str]) -> Revision:
    params: dict[str, Any] = {}
    for file, entry in (data.get("params") or {}).items():
        for key, value in _flat((entry or {}).get("data") or {}):
            params[key if file == "params.yaml" else f"{file}:{key}"] = value
    metrics: dict[str, Any] | None = {}
    for file in summaries:
        entry = (data.get("metrics") or {}).get(file) or {}
        if "data" not in entry:
            metrics = None  # not recorded in this revision (its error says why)
            break
        metrics.update(_flat(entry["data"]))  # type: ignore[union-attr]
    return Revision(label, params, metrics)


def revisions(shown: Sequence[Mapping[str, Any]], summaries: Sequence[str] = (SUMMARY,),
              names: Sequence[str] = ()) -> list[Revision]:
    """The rows of `dvc exp show --json`: the workspace, each baseline commit and its experiments (only
    those named in `names`, when given, with the rows they branch from)."""
    out = []
    for base in shown:
        exps = [rev for exp in base.get("experiments") or [] for rev in exp.get("revs") or []]
        if names:
            exps = [r for r in exps if r.get("name") in names or str(r.get("rev", ""))[:7] in names]
        label = "workspace" if base.get("rev") == "workspace" else (base.get("name") or str(base.get("rev"))[:7])
        if base.get("data"):
            out.append(_revision(label, base["data"], summaries))
        for rev in exps:
            if rev.get("data"):
                out.append(_revision(str(rev.get("name") or str(rev.get("rev"))[:7]), rev["data"], summaries))
    return out


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:.4g}" if abs(value) < 1e-3 and value else f"{value:.4f}".rstrip("0").rstrip(".")
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _differs(values: Sequence[Any]) -> bool:
    return len({json.dumps(v, sort_keys=True, default=str) for v in values}) > 1


def compare_table(revs: Sequence[Revision], *, every_metric: bool = False, width: int = WIDTH) -> str:
    """The params that differ and the summary metrics (those that differ, or all), one column per revision
    that has the summary; lines at most `width` characters (labels and values shortened with '…')."""
    shown = [r for r in revs if r.metrics is not None]
    lines = []
    if shown:
        params = [k for k in dict.fromkeys(k for r in shown for k in r.params)
                  if _differs([r.params.get(k) for r in shown])]
        metric_keys = list(dict.fromkeys(k for r in shown for k in r.metrics or {}))
        metrics = [k for k in metric_keys if every_metric or _differs([(r.metrics or {}).get(k) for r in shown])]
        rows: list[tuple[str, list[str]]] = [("", [r.label for r in shown])]
        rows += [(f"param {k}", [_text(r.params.get(k)) for r in shown]) for k in params]
        rows += [(k, [_text((r.metrics or {}).get(k)) for r in shown]) for k in metrics]
        label_width = min(max(len(label) for label, _ in rows) + 2, max(12, width - _VALUE * len(shown)))
        for label, values in rows:
            cells = "".join(f"{_cut(v, _VALUE - 1):>{_VALUE}}" for v in values)
            lines.append(f"{_cut(label, label_width):<{label_width}}{cells}".rstrip())
        if not params:
            lines.append("(no param differs between these revisions)")
        if not metrics:
            lines.append("(no summary metric differs; --all shows them)")
    absent = [r.label for r in revs if r.metrics is None]
    if absent:
        lines.append(f"without {SUMMARY} recorded (not shown): {', '.join(absent)}")
    return "\n".join(lines) + "\n"


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("names", nargs="*", help="experiments to show (default: every one of the workspace's commit)")
    p.add_argument("--all", action="store_true", help="every summary metric, also those equal in all revisions")
    p.add_argument("--metrics", action="append", help=f"summary metrics file(s) (default: {SUMMARY})")
    p.add_argument("--project", type=Path, default=Path("."), help="the DVC project (default: here)")
    a = p.parse_args(argv)
    res = subprocess.run([sys.executable, "-m", "dvc", "exp", "show", "--json"], cwd=a.project,
                         capture_output=True, text=True)
    if res.returncode != 0:
        print(f"compare: `dvc exp show --json` failed in {a.project}:\n{res.stderr.strip()}", file=sys.stderr)
        return 1
    revs = revisions(json.loads(res.stdout or "[]"), tuple(a.metrics or (SUMMARY,)), a.names)
    sys.stdout.write(compare_table(revs, every_metric=a.all))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
