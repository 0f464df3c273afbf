"""What a validation found, in words a researcher can act on: one `Failure` per failed check (split, column,
check, observed value, a few offending rows), per-split results, and the `Outcome` of a validation stage with
its summary and verdict. `failure_from_result` turns a failed Great Expectations result into a `Failure`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import great_expectations as gx
import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Failure:
    """One failed expectation, in words a researcher can act on."""

    split: str
    column: str | None
    check: str  # our check id (suites.py)
    expectation: str  # the GX expectation type
    observed: str
    rows: tuple[tuple[int, Any], ...] = ()  # (row number in the file, value), a few offending rows
    # "error" fails the stage; "warn" is reported (verdict, Data Docs index, report banner) but passes:
    # the per-dataset policy of params.yaml (validation.policy) sets it per check group.
    level: str = "error"
    # the params.yaml key that would change the outcome (said when the check fails the stage)
    hint: str = ""

    def line(self) -> str:
        where = f"column '{self.column}'" if self.column else "table"
        text = f"[{self.split}] {where} · {self.expectation} ({self.check}): {self.observed}"
        if self.rows:
            shown = ", ".join(f"{r} ({self.column}={_short(v)})" if self.column else str(r) for r, v in self.rows)
            text += f"; offending rows: {shown}"
        if self.hint and self.level != "warn":
            text += f"; {self.hint}"
        return text


@dataclass(frozen=True)
class SplitResult:
    split: str
    n_rows: int
    n_expectations: int
    failures: tuple[Failure, ...]
    seconds: float = 0.0  # wall time of the GX validation of this split


@dataclass(frozen=True)
class Outcome:
    """What one validation stage found; `summary()` for people, `verdict()` for the pipeline."""

    stage: str  # validate_raw | validate_processed
    dataset: str
    splits: Mapping[str, SplitResult]
    data_docs: Path
    inputs: Mapping[str, str] = field(default_factory=dict)  # file -> sha256

    policy: Mapping[str, str] = field(default_factory=dict)  # check group -> error | warn (as applied)

    @property
    def success(self) -> bool:
        return not self.failures

    @property
    def failures(self) -> list[Failure]:
        """Failed checks that fail the stage (level error)."""
        return [f for s in self.splits.values() for f in s.failures if f.level != "warn"]

    @property
    def warnings(self) -> list[Failure]:
        """Failed checks the policy turns into warnings."""
        return [f for s in self.splits.values() for f in s.failures if f.level == "warn"]

    def summary(self, max_failures: int = 20) -> str:
        n_exp = sum(s.n_expectations for s in self.splits.values())
        fails = self.failures
        head = f"{self.stage}@{self.dataset}: "
        n_warn = len(self.warnings)
        if not fails and not n_warn:
            head += f"all {n_exp} expectations passed on {', '.join(self.splits)}"
        elif not fails:
            head += (
                f"passed on {', '.join(self.splits)}: {n_exp - n_warn} of {n_exp} expectations held, {n_warn} did not "
                "and are warnings (policy)"
            )
        else:
            bad = sorted({f.split for f in fails}, key=list(self.splits).index)
            head += f"{len(fails)} of {n_exp} expectations failed (split(s): {', '.join(bad)})"
        lines = [head, *("  " + f.line() for f in fails[:max_failures])]
        if len(fails) > max_failures:
            lines.append(f"  ... and {len(fails) - max_failures} more")
        warns = self.warnings
        if warns:
            lines.append(f"  {len(warns)} warning(s) (policy warn in params.yaml validation.policy):")
            lines += ["  warning: " + f.line() for f in warns[:max_failures]]
        lines.append(f"  Data Docs: {self.data_docs}")
        return "\n".join(lines)

    def verdict(self, *, warn_only: bool = False) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "stage": self.stage,
            "success": self.success,
            "warn_only": warn_only,
            "great_expectations": gx.__version__,
            "splits": {
                s.split: {"rows": s.n_rows, "expectations": s.n_expectations, "failed": len(s.failures)}
                for s in self.splits.values()
            },
            "failures": [f.line() for f in self.failures],
            "warnings": [f.line() for f in self.warnings],
            "policy": dict(self.policy),
            "inputs": dict(self.inputs),
            "data_docs": str(self.data_docs),
        }


# ------------------------------------------------------------------------------------------------ failures
def failure_from_result(split: str, r: Any, frame: pd.DataFrame, k: int) -> Failure:
    """The failed GX result `r` of `split` as a Failure: what was observed, and up to `k` offending rows."""
    cfg = r.expectation_config
    meta = cfg.meta or {}
    column = cfg.kwargs.get("column")
    check = meta.get("check", "?")
    res = r.result or {}
    exc = r.exception_info or {}
    if exc.get("raised_exception"):
        msg = str(exc.get("exception_message") or "").strip().splitlines()
        observed = "could not run: " + (msg[0] if msg else "error")
        if column is not None and column not in frame.columns:
            observed = f"could not run: column '{column}' is missing"
        return Failure(split, column, check, cfg.type, observed)
    if "unexpected_count" in res:
        observed = (
            f"{res['unexpected_count']} of {res.get('element_count')} rows unexpected "
            f"({res.get('unexpected_percent') or 0:.3g}%)"
        )
        if cfg.kwargs.get("mostly") is not None:
            observed += f", tolerated {100 * (1 - cfg.kwargs['mostly']):.3g}%"
        idx = list(res.get("partial_unexpected_index_list") or [])[:k]
        rows = _rows_at(frame, column, idx)
        if not rows and res.get("partial_unexpected_list"):
            observed += f", e.g. {_short(res['partial_unexpected_list'][:k])}"
        return Failure(split, column, check, cfg.type, observed, rows)
    observed = f"observed {_short(res.get('observed_value'))}"
    partition = (res.get("details") or {}).get("observed_partition")
    if res.get("observed_value") is None and partition:  # KL divergence: infinite when a class is new
        shares = dict(zip(partition["values"], partition["weights"]))
        observed = "observed class shares " + ", ".join(f"{_short(k)}: {w:.4f}" for k, w in shares.items())
    if cfg.type == "expect_table_columns_to_match_ordered_list":
        observed = _column_diff(cfg.kwargs["column_list"], list(frame.columns))
    elif check == "class_balance" and "expected_share" in meta:
        allowed = f"[{cfg.kwargs['min_value']:.4g}, {cfg.kwargs['max_value']:.4g}]"
        observed += f" (Table 1: {meta['expected_share']}; allowed {allowed})"
    elif "min_value" in cfg.kwargs or "max_value" in cfg.kwargs:
        observed += (
            f", allowed [{_short(cfg.kwargs.get('min_value'))}, {_short(cfg.kwargs.get('max_value'))}]"
        )
    elif cfg.type == "expect_column_values_to_be_of_type":
        observed += f", expected {cfg.kwargs['type_']}"
    if check == "constant" and res.get("observed_value") is None:
        # NaN standard deviation: the column holds inf or NaN, which `finite` / `not_null` report.
        return Failure(split, column, check, cfg.type, "standard deviation undefined (non-finite values)")
    return Failure(split, column, check, cfg.type, observed, offending_rows(frame, check, column, meta, k))


def offending_rows(
    frame: pd.DataFrame, check: str, column: str | None, meta: Mapping[str, Any], k: int
) -> tuple[tuple[int, Any], ...]:
    """A few rows behind a failed aggregate expectation (min/max/stdev/dtype), found with numpy."""
    if column is None or column not in frame.columns or len(frame) == 0:
        return ()
    s = frame[column]
    if check in ("range", "finite", "codes"):
        v = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        with np.errstate(invalid="ignore"):
            bad = ~np.isnan(v) & ~((v >= meta["low"]) & (v <= meta["high"]))
        return _rows_at(frame, column, np.flatnonzero(bad)[:k].tolist())
    if check == "constant":
        return _rows_at(frame, column, list(range(min(k, len(frame)))))
    if check == "dtype" and not pd.api.types.is_numeric_dtype(s):
        bad = pd.to_numeric(s, errors="coerce").isna() & s.notna()
        return _rows_at(frame, column, np.flatnonzero(bad.to_numpy())[:k].tolist())
    return ()


def _rows_at(frame: pd.DataFrame, column: str | None, idx: Sequence[int]) -> tuple[tuple[int, Any], ...]:
    if column is None or column not in frame.columns:
        return ()
    s = frame[column]
    return tuple((int(i), s.iloc[int(i)]) for i in idx if 0 <= int(i) < len(s))


def _column_diff(expected: Sequence[str], observed: Sequence[str]) -> str:
    missing = [c for c in expected if c not in observed]
    extra = [c for c in observed if c not in expected]
    parts = []
    if missing:
        parts.append(f"missing {_short(missing)}")
    if extra:
        parts.append(f"unexpected {_short(extra)}")
    if not parts:
        first = (
            next(i for i, (a, b) in enumerate(zip(expected, observed)) if a != b)
            if list(expected) != list(observed)
            else None
        )
        parts.append(
            "same columns"
            if first is None
            else f"order differs from position {first}: '{observed[first]}' where '{expected[first]}' belongs"
        )
    return f"{len(observed)} columns, expected {len(expected)}: " + "; ".join(parts)


def _short(v: Any, n: int = 8) -> str:
    if isinstance(v, list | tuple):
        items = ", ".join(_short(x) for x in v[:n])
        return f"[{items}{', ...' if len(v) > n else ''}]"
    if isinstance(v, float | np.floating):
        return "nan" if math.isnan(v) else f"{float(v):.6g}"
    return repr(v.item() if isinstance(v, np.generic) else v)
