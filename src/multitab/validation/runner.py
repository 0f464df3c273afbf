"""Run expectation suites through a file-based Great Expectations context and build Data Docs.

Layout (one context for the whole repository, `gx/`):
- gx/great_expectations.yml (committed): stores, one pandas datasource `multitab`, and the Data Docs site
  `multitab` whose files go to the report folder (reports/validation/, git-ignored).
- The suite and result pages are rendered by `docs_view.EscapedPageView`: GX's templates print names raw, so
  every name and value from the data is escaped before they see it.
- While a split is validated, the datasource holds one dataframe asset named after its dataset and split
  (`higgs.train`; GX's store keys forbid '/') with the batch definition `whole_frame`, and a validation
  definition links it to the split's suite; both go when the split is done, so the committed
  great_expectations.yml (where GX keeps assets) does not change with every dataset.
- Built at run time from the schema (git-ignored): suites in gx/expectations/ (one per stage, dataset and
  split, named `<stage>-<dataset>-<split>`), and in gx/uncommitted/validations/ the validation results: those
  of the last `validation.report.keep_runs` runs of every suite, under their run's name and time. The
  project's own checks (expectations.py) join each suite and result before the pages are built, so Data Docs
  count what the project page counts. The pages load their CSS, scripts and fonts from the site itself
  (assets.py); the Data Docs index lists every result kept, each with its asset.

What the results mean for people is in failures.py (failed checks, summary, verdict); the project's own
page, reports/validation/index.html (the latest result of every stage, dataset and split), in report_page.py.

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
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

import great_expectations as gx
import great_expectations.expectations as gxe
import great_expectations.util as gx_util
import numpy as np
from great_expectations.core import ExpectationSuiteValidationResult
from great_expectations.core.run_identifier import RunIdentifier
from great_expectations.data_context.types.resource_identifiers import (
    ExpectationSuiteIdentifier,
    ValidationResultIdentifier,
)
from great_expectations.validator.validation_statistics import calc_validation_statistics

from multitab.config.validation import ReportConfig
from multitab.files.io import write_bytes, write_json
from multitab.validation.assets import make_offline
from multitab.validation.batched import forget_metrics, run_in_batches
from multitab.validation.columns import SplitData
from multitab.validation.expectations import OwnCheck
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
DATASOURCE, BATCH = "multitab", "whole_frame"


def asset_name(dataset: str, split: str) -> str:
    """The data asset a split is validated as."""
    return f"{dataset}.{split}"


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
            context = _load(context_dir)
            _configure(context, context_dir, report_dir)
            # great_expectations.yml as configured (no asset): the copy a half-written one is restored from
            good = context_dir / "uncommitted" / GOOD_YML
            if not good.is_file() or good.read_bytes() != (context_dir / "great_expectations.yml").read_bytes():
                write_bytes(good, (context_dir / "great_expectations.yml").read_bytes())
            yield context
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


GOOD_YML = "great_expectations.yml.good"


def _load(context_dir: Path) -> Any:
    """The file context; a great_expectations.yml that GX cannot read (a run killed while GX wrote it: it
    adds and removes each split's asset there) is replaced by the last good copy, with a warning."""
    try:
        return gx.get_context(mode="file", context_root_dir=context_dir)
    except Exception as e:  # noqa: BLE001 - GX raises many kinds for a broken config file
        good = context_dir / "uncommitted" / GOOD_YML
        if not good.is_file():
            raise
        log.warning("%s unreadable (%s): restored from %s", context_dir / "great_expectations.yml",
                    " ".join(str(e).split())[:200], good)
        write_bytes(context_dir / "great_expectations.yml", good.read_bytes())  # atomic
        return gx.get_context(mode="file", context_root_dir=context_dir)


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
        # the suite and result pages show names as text (a column named `<script>...` is not markup)
        "site_section_builders": {section: {"view": {"module_name": "multitab.validation.docs_view",
                                                     "class_name": "EscapedPageView"}}
                                  for section in ("expectations", "validations")},
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
    # Assets exist only while a split is validated (`_validate`): one found here was left by a killed run.
    ds = context.data_sources.get(DATASOURCE)
    for name in ds.get_asset_names():
        ds.delete_asset(name)


# ------------------------------------------------------------------------------------------------ running
def run_suites(
    context: Any,
    *,
    stage: str,
    dataset: str,
    splits: Mapping[str, SplitData],
    suites: Mapping[str, Sequence[gxe.Expectation]],
    report_dir: str | Path,
    report: ReportConfig,
    inputs: Mapping[str, str] | None = None,
    extra: Mapping[str, Sequence[OwnCheck]] | None = None,
    levels: Mapping[str, str] | None = None,
    policy: Mapping[str, str] | None = None,
    keep_runs: int | None = None,
    hints: Mapping[str, str] | None = None,
) -> Outcome:
    """Validate each split with its suite (whole, or batch by batch: columns.py), add the split's checks run
    outside Great Expectations' engine (`extra`: duplicates, overlap ...) to its suite and result, keep the
    results of the newest `keep_runs` runs of each suite (None: params' `validation.report.keep_runs`), then
    update Data Docs once. `levels`: check id -> "warn" for checks the policy downgrades; `hints`: check id -> the
    params.yaml key that would change its outcome (said on a failure)."""
    keep_runs = report.keep_runs if keep_runs is None else keep_runs
    if keep_runs < 1:
        raise ValueError(f"{keep_runs=} must be >= 1")
    report_dir = Path(report_dir)
    site = report_dir / GX_SITE_DIR
    # One run id for all splits of this call: Data Docs name the run by its time (not "__none__"), and
    # the project page tells the splits of the latest run from older ones.
    run_time = datetime.datetime.now(datetime.UTC)
    run_id = RunIdentifier(run_name=f"{run_time:%Y-%m-%dT%H%M%SZ}", run_time=run_time)
    result_format = {"result_format": "SUMMARY", "partial_unexpected_count": report.offending_rows}
    results: dict[str, SplitResult] = {}
    keys: dict[str, ValidationResultIdentifier] = {}
    for split, data in splits.items():
        name = f"{stage}-{dataset}-{split}"
        own = (extra or {}).get(split, ())
        _forget(context, name, report_dir)
        t0 = time.perf_counter()
        suite, vr, gx_failures = _validate(
            context, name, asset_name(dataset, split), data, suites[split],
            meta={"stage": stage, "dataset": dataset, "split": split}, run_id=run_id,
            result_format=result_format, split=split, offending_rows=report.offending_rows,
        )  # fmt: skip
        # GX's failed results, then the failed checks of `own` (which _publish adds to the result)
        failures = tuple(
            dataclasses.replace(f, level=(levels or {}).get(f.check, "error"), hint=(hints or {}).get(f.check, ""))
            for f in (*gx_failures, *(c.failure for c in own if c.failure is not None))
        )
        keys[split] = _publish(context, suite, vr, own, asset_name(dataset, split))
        _prune(context.validation_results_store, name, keep_runs)
        results[split] = SplitResult(split, data.n_rows, len(vr.results), failures, time.perf_counter() - t0)
        log.info(
            "%s: %d expectations, %d failed (%.1f s)",
            name,
            len(vr.results),
            len(failures),
            results[split].seconds,
        )
    # Pages of this run's results and suites, and the index (which drops the pages of results pruned above).
    suite_keys = [ExpectationSuiteIdentifier(name=k.expectation_suite_identifier.name) for k in keys.values()]
    context.build_data_docs(site_names=[SITE], resource_identifiers=[*keys.values(), *suite_keys])
    pages = {split: _page(context, key) for split, key in keys.items()}
    # GX's pages load their CSS, scripts and fonts from CDNs: serve them from the site instead.
    suite_pages = [site / "expectations" / f"{k.name}.html" for k in suite_keys]
    make_offline(site, [site / "index.html", *suite_pages, *pages.values()])
    outcome = Outcome(
        stage, dataset, results, report_dir / "index.html", dict(inputs or {}), dict(policy or {})
    )
    for split in results:
        write_json(
            report_dir / "results" / f"{stage}-{dataset}-{split}.json",
            page_record(outcome, split, Path(os.path.relpath(pages[split], report_dir)), run_time),
        )
    write_index(report_dir)
    return outcome


def _validate(
    context: Any,
    name: str,
    asset: str,
    data: SplitData,
    expectations: Sequence[gxe.Expectation],
    *,
    meta: Mapping[str, str],
    run_id: RunIdentifier,
    result_format: Mapping[str, Any],
    split: str,
    offending_rows: int,
) -> tuple[gx.ExpectationSuite, ExpectationSuiteValidationResult, list[Failure]]:
    """Validate `data` (split `split`), as data asset `asset`, with a new suite `name` of `expectations`: the
    result and its failures. The asset and the validation definition exist only for this call (see the
    module docstring)."""
    ds = context.data_sources.get(DATASOURCE)
    batch = ds.add_dataframe_asset(asset).add_batch_definition_whole_dataframe(BATCH)
    try:
        # add, not add_or_update: GX's add_or_update compares expectations pairwise (quadratic, ~40 s
        # for a 1,000-expectation suite); _forget removed the old suite.
        suite = context.suites.add(
            gx.ExpectationSuite(name=name, expectations=list(expectations), meta=dict(meta))
        )
        vd = context.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch, suite=suite))
        frame = data.frame
        if frame is None:
            vr, failures = run_in_batches(batch, vd.id, suite, data, split, run_id=run_id,
                                          result_format=result_format, offending_rows=offending_rows)
        else:
            vr = vd.run(batch_parameters={"dataframe": frame}, result_format=dict(result_format), run_id=run_id)
            failures = [failure_from_result(split, r, frame, offending_rows) for r in vr.results if not r.success]
            forget_metrics(batch)
    finally:
        _remove(context.validation_definition_store, name)
        ds.delete_asset(asset)
    return suite, vr, failures


def _publish(
    context: Any,
    suite: gx.ExpectationSuite,
    vr: ExpectationSuiteValidationResult,
    own: Sequence[OwnCheck],
    asset: str,
) -> ValidationResultIdentifier:
    """Add the checks evaluated outside GX's engine to the suite and the result (GX's statistics recounted),
    store both (the result under the key GX stored it), and return the result's key."""
    if own:
        suite.expectations.extend(c.expectation for c in own)
        suite.save()  # gives each its id, which its result's configuration then carries
        vr.results.extend(c.validation_result() for c in own)
        stats = calc_validation_statistics(vr.results)
        vr.success = stats.success
        vr.statistics = {
            "evaluated_expectations": stats.evaluated_expectations,
            "successful_expectations": stats.successful_expectations,
            "unsuccessful_expectations": stats.unsuccessful_expectations,
            "success_percent": stats.success_percent,
        }
    # NOTE: GX's result page reads the asset from the batch spec, which fluent datasources leave without it
    # (GX's site_builder._resolve_asset_name says so): without this the page reads "Data asset: None".
    vr.meta["batch_spec"]["data_asset_name"] = asset
    key = ValidationResultIdentifier(
        expectation_suite_identifier=ExpectationSuiteIdentifier(name=suite.name),
        run_id=vr.meta["run_id"],
        batch_identifier=vr.batch_id,
    )
    context.validation_results_store.set(key, vr)
    return key


def _prune(store: Any, name: str, keep: int) -> None:
    """Remove the validation results of suite `name` beyond those of its newest `keep` runs."""
    kept = sorted(
        (k for k in store.list_keys() if k.expectation_suite_identifier.name == name),
        key=lambda k: k.run_id.run_time,
        reverse=True,
    )
    for key in kept[keep:]:
        store.remove_key(key)


def _page(context: Any, key: ValidationResultIdentifier) -> Path:
    """The Data Docs page of a validation result."""
    (url,) = context.get_docs_sites_urls(resource_identifier=key, site_names=[SITE], only_if_exists=False)
    return Path(os.path.normpath(urllib.parse.unquote(urllib.parse.urlparse(url["site_url"]).path)))


def _remove(store: Any, name: str) -> None:
    key = store.get_key(name=name, id=None)
    if store.has_key(key):
        store.remove_key(key)


def _forget(context: Any, name: str, report_dir: Path) -> None:
    """Remove the suite called `name` (and a validation definition a killed run left), its Data Docs page and
    the project page's record of it; its validation results stay (`_prune` keeps the newest)."""
    for store in (context.validation_definition_store, context.expectations_store):
        _remove(store, name)
    (report_dir / GX_SITE_DIR / "expectations" / f"{name}.html").unlink(missing_ok=True)
    (report_dir / "results" / f"{name}.json").unlink(missing_ok=True)
