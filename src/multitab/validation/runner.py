"""Run expectation suites through a file-based Great Expectations context and build Data Docs.

Layout (one context for the whole repository, `gx/`):
- gx/great_expectations.yml (committed): stores, one pandas datasource `multitab` with one dataframe
  asset `frame` and one batch definition `whole_frame` shared by every suite (each run passes its
  DataFrame as a batch parameter), and the Data Docs site `multitab` whose files go to the report folder
  (reports/validation/, git-ignored).
- Built at run time from the schema (git-ignored): suites in gx/expectations/, validation definitions,
  validation definitions (one per stage, dataset and split, named `<stage>-<dataset>-<split>`), and the validation
  results in gx/uncommitted/. Before a suite runs, its earlier results and their pages are removed, so the
  Data Docs index shows the latest result of every stage, dataset and split: what was checked, what failed.

Data Docs are not DVC outputs: every validation stage writes into the same site (one index.html), and DVC
forbids outputs shared by stages. Stages that run at once (Prefect runs independent stages in parallel)
take turns through a file lock on the context.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import decimal
import fcntl
import html
import logging
import math
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import great_expectations as gx
import great_expectations.expectations as gxe
import great_expectations.util as gx_util
import numpy as np
import pandas as pd
from great_expectations.core.run_identifier import RunIdentifier

from multitab.config.validation import ReportConfig
from multitab.io import atomic_path, read_json, write_json

log = logging.getLogger(__name__)


def _contains_decimal(data: np.ndarray) -> TypeGuard[np.ndarray]:
    """Whether a 1-D array holds decimal.Decimal objects: only an object array can."""
    return data.dtype == object and any(isinstance(v, decimal.Decimal) for v in data)


# NOTE[PERF]: GX's pandas mean / stdev / sum metrics first ask `does_ndarray_contain_decimal_dtype`, a Python
# loop over every value (about 1 s per column of 11 M rows, i.e. most of the time of a Higgs validation).
# A numeric-dtype array cannot hold Decimal objects, so answer that without the loop; object arrays still get
# GX's own check. Same answers, no change of what is validated (tests/test_validation.py checks both cases).
gx_util.does_ndarray_contain_decimal_dtype = _contains_decimal

SITE = "multitab"
GX_SITE_DIR = "gx"  # GX's own site, under the report folder; our static index.html sits above it
DATASOURCE, ASSET, BATCH = "multitab", "frame", "whole_frame"


# ------------------------------------------------------------------------------------------------ results
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

    def line(self) -> str:
        where = f"column '{self.column}'" if self.column else "table"
        text = f"[{self.split}] {where} · {self.expectation} ({self.check}): {self.observed}"
        if self.rows:
            shown = ", ".join(f"{r} ({self.column}={_short(v)})" for r, v in self.rows)
            text += f"; offending rows: {shown}"
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


# ------------------------------------------------------------------------------------------------ context
@contextlib.contextmanager
def open_context(context_dir: str | Path, report_dir: str | Path) -> Iterator[Any]:
    """The file context at `context_dir` (created if missing; its folder must be named `gx`), set up for
    our datasource and Data Docs site, held under a file lock for the duration of the block."""
    context_dir = Path(context_dir).resolve()
    report_dir = Path(report_dir).resolve()
    if not (context_dir / "great_expectations.yml").exists():
        if context_dir.name != "gx":
            raise ValueError(
                f"{context_dir}: no great_expectations.yml here; a new context folder must be named 'gx'"
            )
        context_dir.parent.mkdir(parents=True, exist_ok=True)
        gx.get_context(mode="file", project_root_dir=context_dir.parent)
    lock_path = context_dir / "uncommitted" / "multitab.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            context = gx.get_context(mode="file", context_root_dir=context_dir)
            _configure(context, context_dir, report_dir)
            yield context
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _configure(context: Any, context_dir: Path, report_dir: Path) -> None:
    """Make the context match what we need; write great_expectations.yml only when something differs."""
    site = {
        "class_name": "SiteBuilder",
        "show_how_to_buttons": False,
        "store_backend": {
            "class_name": "TupleFilesystemStoreBackend",
            "base_directory": os.path.relpath(report_dir / GX_SITE_DIR, context_dir) + "/",
        },
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
    }
    sites = context.list_data_docs_sites()
    if set(sites) != {SITE} or sites[SITE] != site:
        for name in list(sites):
            context.delete_data_docs_site(name)
        context.add_data_docs_site(SITE, site)
    if context.variables.progress_bars != {"globally": False}:
        context.variables.progress_bars = {"globally": False}
        context.variables.save()
    if DATASOURCE not in context.data_sources.all():
        context.data_sources.add_pandas(DATASOURCE)
    ds = context.data_sources.get(DATASOURCE)
    if ASSET not in ds.get_asset_names():
        ds.add_dataframe_asset(ASSET)
    asset = ds.get_asset(ASSET)
    if not any(b.name == BATCH for b in asset.batch_definitions):
        asset.add_batch_definition_whole_dataframe(BATCH)


# ------------------------------------------------------------------------------------------------ running
def run_suites(
    context: Any,
    *,
    stage: str,
    dataset: str,
    frames: Mapping[str, pd.DataFrame],
    suites: Mapping[str, Sequence[gxe.Expectation]],
    report_dir: str | Path,
    report: ReportConfig,
    inputs: Mapping[str, str] | None = None,
    extra: Mapping[str, tuple[int, Sequence[Failure]]] | None = None,
    levels: Mapping[str, str] | None = None,
    policy: Mapping[str, str] | None = None,
) -> Outcome:
    """Validate each split's frame with its suite (one validation definition per split), then
    update Data Docs once. `extra`: split -> (number of checks, failures) of checks run outside Great
    Expectations (duplicates, overlap ...); `levels`: check id -> "warn" for checks the policy downgrades."""
    bd = context.data_sources.get(DATASOURCE).get_asset(ASSET).get_batch_definition(BATCH)
    report_dir = Path(report_dir)
    # One run id for all splits of this call: Data Docs name the run by its time (not "__none__"), and
    # the project page tells the splits of the latest run from older ones.
    run_time = datetime.datetime.now(datetime.UTC)
    run_id = RunIdentifier(run_name=f"{run_time:%Y-%m-%dT%H%M%SZ}", run_time=run_time)
    results: dict[str, SplitResult] = {}
    names: list[str] = []
    for split, frame in frames.items():
        name = f"{stage}-{dataset}-{split}"
        _forget(context, name, report_dir)
        # add, not add_or_update: GX's add_or_update compares expectations pairwise (quadratic, ~40 s
        # for a 1,000-expectation suite); _forget removed the old ones.
        suite = context.suites.add(
            gx.ExpectationSuite(
                name=name,
                expectations=list(suites[split]),
                meta={"stage": stage, "dataset": dataset, "split": split},
            )
        )
        vd = context.validation_definitions.add(gx.ValidationDefinition(name=name, data=bd, suite=suite))
        t0 = time.perf_counter()
        vr = vd.run(
            batch_parameters={"dataframe": frame},
            result_format={"result_format": "SUMMARY", "partial_unexpected_count": report.offending_rows},
            run_id=run_id,
        )
        names.append(name)
        n_extra, more = (extra or {}).get(split, (0, ()))
        failures = tuple(
            dataclasses.replace(f, level=(levels or {}).get(f.check, "error"))
            for f in (
                *(_failure(split, r, frame, report.offending_rows) for r in vr.results if not r.success),
                *more,
            )
        )
        results[split] = SplitResult(
            split, len(frame), len(vr.results) + n_extra, failures, time.perf_counter() - t0
        )
        log.info(
            "%s: %d expectations, %d failed (%.1f s)",
            name,
            len(vr.results),
            len(failures),
            results[split].seconds,
        )
    # One Data Docs build for all splits (pages of these results, and the index of every result).
    ids = [
        k
        for k in context.validation_results_store.list_keys()
        if k.expectation_suite_identifier.name in names
    ]
    context.build_data_docs(site_names=[SITE], resource_identifiers=ids)
    outcome = Outcome(
        stage, dataset, results, report_dir / "index.html", dict(inputs or {}), dict(policy or {})
    )
    for split in results:
        write_json(
            report_dir / "results" / f"{stage}-{dataset}-{split}.json",
            _page_record(outcome, split, report_dir, run_time),
        )
    write_index(report_dir)
    return outcome


def _forget(context: Any, name: str, report_dir: Path) -> None:
    """Remove the checkpoint (if any), validation definition and suite called `name`, earlier validation results
    of the suite and their Data Docs pages."""
    for named in (context.checkpoint_store, context.validation_definition_store, context.expectations_store):
        key = named.get_key(name=name, id=None)
        if named.has_key(key):
            named.remove_key(key)
    store = context.validation_results_store
    for key in store.list_keys():
        if key.expectation_suite_identifier.name == name:
            store.remove_key(key)
    shutil.rmtree(report_dir / GX_SITE_DIR / "validations" / name, ignore_errors=True)
    (report_dir / "results" / f"{name}.json").unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------------ failures
def _failure(split: str, r: Any, frame: pd.DataFrame, k: int) -> Failure:
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
        observed += f" (Table 1: {meta['expected_share']}; allowed [{cfg.kwargs['min_value']:.4g}, {cfg.kwargs['max_value']:.4g}])"
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


# ------------------------------------------------------------------------------------------------ index
def _page_record(outcome: Outcome, split: str, report_dir: Path, run_time: datetime.datetime) -> dict[str, Any]:
    r = outcome.splits[split]
    name = f"{outcome.stage}-{outcome.dataset}-{split}"
    pages = sorted((report_dir / GX_SITE_DIR / "validations" / name).rglob("*.html"))
    return {
        "stage": outcome.stage,
        "dataset": outcome.dataset,
        "split": split,
        "success": not [f for f in r.failures if f.level != "warn"],
        "rows": r.n_rows,
        "expectations": r.n_expectations,
        "failures": [f.line() for f in r.failures if f.level != "warn"],
        "warnings": [f.line() for f in r.failures if f.level == "warn"],
        # the failures, field by field (flows.orchestrate publishes them as a table artifact)
        "failed": [
            {"column": f.column, "expectation": f.expectation, "check": f.check, "observed": f.observed}
            for f in r.failures
            if f.level != "warn"
        ],
        "page": pages[-1].relative_to(report_dir).as_posix() if pages else None,
        "validated_at": run_time.isoformat(),  # UTC, the same for every split of one stage run
    }


def write_index(report_dir: str | Path) -> Path:
    """reports/validation/index.html: one static page (no scripts, opens offline) listing the latest
    result of every stage, dataset and split, the failed expectations in full, and links to Great
    Expectations' page of each result. (GX's own index, gx/index.html, draws its table with scripts
    from CDNs, so it stays empty offline.)"""
    report_dir = Path(report_dir)
    records = [read_json(p) for p in sorted((report_dir / "results").glob("*.json"))]
    order = {"train": 0, "val": 1, "test": 2}
    records.sort(key=lambda r: (r["stage"] != "validate_raw", r["dataset"], order.get(r["split"], 9)))
    n_bad = sum(not r["success"] for r in records)
    n_warn = sum(bool(r.get("warnings")) for r in records)
    # The latest run of each stage and dataset; a split whose result is older was not reached by it
    # (the run failed before that split, or no longer has it): its result is stale.
    latest: dict[tuple[str, str], str] = {}
    for r in records:
        key = (r["stage"], r["dataset"])
        latest[key] = max(latest.get(key, ""), r.get("validated_at") or "")
    n_stale = 0
    rows = []
    for r in records:
        warns = r.get("warnings") or []
        when = r.get("validated_at") or ""
        stale = when < latest[(r["stage"], r["dataset"])]
        n_stale += stale
        status = ("passed" + (f" with {len(warns)} warning(s)" if warns else "")) if r["success"] else "FAILED"
        status += " (stale)" if stale else ""
        link = f'<a href="{html.escape(r["page"])}">expectations and results</a>' if r["page"] else ""
        fails = "".join(f"<li>{html.escape(line)}</li>" for line in r["failures"])
        fails += "".join(f'<li class="warning">warning: {html.escape(line)}</li>' for line in warns)
        shown = html.escape(when[:19].replace("T", " ")) if when else "unknown"
        cls = ("ok" if r["success"] else "failed") + (" stale" if stale else "")
        rows.append(
            f'<tr class="{cls}"><td>{r["stage"]}@{html.escape(r["dataset"])}</td>'
            f'<td>{r["split"]}</td><td class="status">{status}</td><td>{shown}</td><td>{r["rows"]}</td>'
            f"<td>{r['expectations']}</td><td>{len(r['failures'])}</td><td>{link}</td></tr>"
            + (f'<tr class="failed-list"><td colspan="8"><ul>{fails}</ul></td></tr>' if fails else "")
        )
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>multitab: data validation</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }} table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: left; }}
tr.ok .status {{ color: #176f2c; }} tr.failed .status {{ color: #b00020; font-weight: bold; }}
tr.failed-list li {{ font-family: monospace; white-space: pre-wrap; }} li.warning {{ color: #8a5a00; }}
tr.stale td {{ color: #777; font-style: italic; }}
</style></head><body>
<h1>Data validation (Great Expectations {html.escape(gx.__version__)})</h1>
<p>{len(records)} validation results, <strong>{n_bad} failed</strong>, {n_warn} with warnings (checks of estimates
that the per-dataset policy, params.yaml validation.policy, reports instead of failing on), {n_stale} stale.
Latest result of every stage, dataset and split, with the time it was produced; "stale" marks a split the latest
run of its stage and dataset did not reach (its result is from an earlier run). Failed expectations are listed
under their split; each result links to its Great Expectations page
(<a href="{GX_SITE_DIR}/index.html">Great Expectations' own index</a> needs network access for its table).</p>
<table><thead><tr><th>stage@dataset</th><th>split</th><th>status</th><th>validated (UTC)</th><th>rows</th><th>expectations</th>
<th>failed</th><th>details</th></tr></thead><tbody>
{"".join(rows)}
</tbody></table></body></html>
"""
    path = report_dir / "index.html"
    with atomic_path(path) as tmp:
        tmp.write_text(page)
    return path
