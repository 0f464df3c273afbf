"""Run expectation suites through a file-based Great Expectations context and build Data Docs.

Layout (one context for the whole repository, `gx/`):
- gx/great_expectations.yml (committed): stores, one pandas datasource `multitab` with one dataframe
  asset `frame` and one batch definition `whole_frame` shared by every suite (each run passes its
  DataFrame as a batch parameter), and the Data Docs site `multitab` whose files go to the report folder
  (reports/validation/, git-ignored).
- Built at run time from the schema (git-ignored): suites in gx/expectations/, validation definitions and
  checkpoints (one each per stage, dataset and split, named `<stage>-<dataset>-<split>`; the checkpoint's
  UpdateDataDocsAction builds the pages), and the validation results in gx/uncommitted/. The pages load
  their CSS, scripts and fonts from the site itself (assets.py). Before a suite runs, its earlier results
  and their pages are removed, so the Data Docs index shows the latest result of every stage, dataset and
  split: what was checked, what failed.

What the results mean for people is in failures.py (failed checks, summary, verdict); the project's own
page, reports/validation/index.html, in report_page.py.

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
import logging
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

import great_expectations as gx
import great_expectations.expectations as gxe
import great_expectations.util as gx_util
import numpy as np
import pandas as pd
from great_expectations.checkpoint import UpdateDataDocsAction
from great_expectations.core.run_identifier import RunIdentifier

from multitab.config.validation import ReportConfig
from multitab.io import write_json
from multitab.validation.assets import make_offline
from multitab.validation.failures import Failure, Outcome, SplitResult, failure_from_result
from multitab.validation.report_page import GX_SITE_DIR, page_record, write_index

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
DATASOURCE, ASSET, BATCH = "multitab", "frame", "whole_frame"



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
    pages: list[Path] = [report_dir / GX_SITE_DIR / "index.html"]
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
        # GX's checkpoint action builds the Data Docs pages of this result and its suite, and the index.
        checkpoint = context.checkpoints.add(
            gx.Checkpoint(
                name=name,
                validation_definitions=[vd],
                actions=[UpdateDataDocsAction(name="data_docs", site_names=[SITE])],
                result_format={"result_format": "SUMMARY", "partial_unexpected_count": report.offending_rows},
            )
        )
        t0 = time.perf_counter()
        (vr,) = checkpoint.run(batch_parameters={"dataframe": frame}, run_id=run_id).run_results.values()
        pages += [
            report_dir / GX_SITE_DIR / "expectations" / f"{name}.html",
            *(report_dir / GX_SITE_DIR / "validations" / name).rglob("*.html"),
        ]
        n_extra, more = (extra or {}).get(split, (0, ()))
        failures = tuple(
            dataclasses.replace(f, level=(levels or {}).get(f.check, "error"))
            for f in (
                *(failure_from_result(split, r, frame, report.offending_rows) for r in vr.results if not r.success),
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
    # GX's pages load their CSS, scripts and fonts from CDNs: serve them from the site instead.
    make_offline(report_dir / GX_SITE_DIR, pages)
    outcome = Outcome(
        stage, dataset, results, report_dir / "index.html", dict(inputs or {}), dict(policy or {})
    )
    for split in results:
        write_json(
            report_dir / "results" / f"{stage}-{dataset}-{split}.json",
            page_record(outcome, split, report_dir, run_time),
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
    (report_dir / GX_SITE_DIR / "expectations" / f"{name}.html").unlink(missing_ok=True)
    (report_dir / "results" / f"{name}.json").unlink(missing_ok=True)
