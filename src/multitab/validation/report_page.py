"""The project's validation page, reports/validation/index.html, and the per-split records it is built from
(reports/validation/results/<stage>-<dataset>-<split>.json; flows.orchestrate reads them too)."""

from __future__ import annotations

import datetime
import html
from pathlib import Path
from typing import Any

import great_expectations as gx

from multitab.files.io import atomic_path, read_json, write_json
from multitab.validation.failures import Outcome

GX_SITE_DIR = "gx"  # GX's own site, under the report folder; our static index.html sits above it
DECLARED_DIR = "declared"  # a declared dataset's record (multitab.datasets.declared), shown under the results


def write_declared(report_dir: str | Path, record: dict[str, Any]) -> None:
    """Keep a declared dataset's record (what was declared and inferred) for the page's section on it."""
    path = Path(report_dir) / DECLARED_DIR / f"{record['dataset']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, record)


def _declared_section(report_dir: Path) -> str:
    """Per declared dataset: each column's role, kind and why (the inference's reason, or `declared`)."""
    parts = []
    for p in sorted((report_dir / DECLARED_DIR).glob("*.json")):
        r = read_json(p)
        reasons = r.get("inference", {}).get("reasons", {})
        rows = [f"<tr><td>{html.escape(t['name'])}</td><td>task</td><td>{html.escape(t['type'])}</td>"
                f"<td>{html.escape(', '.join(map(str, t.get('classes', []))))}</td></tr>" for t in r["tasks"]]
        rows += [f"<tr><td>{html.escape(f['name'])}</td><td>feature</td><td>{html.escape(f['kind'])}</td>"
                 f"<td>{html.escape(reasons.get(f['name'], ''))}</td></tr>" for f in r["features"]]
        left_out = r.get("left_out") or dict.fromkeys(r["drop"], "declared")  # split@D's record says why
        rows += [f"<tr><td>{html.escape(c)}</td><td>dropped</td><td></td><td>{html.escape(why)}</td></tr>"
                 for c, why in left_out.items()]
        parts.append(f"<h3>{html.escape(r['dataset'])}</h3><table><thead><tr><th>column</th><th>role</th><th>kind</th>"
                     f"<th>why (classes, in code order)</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")
    if not parts:
        return ""
    rule = html.escape(read_json(sorted((report_dir / DECLARED_DIR).glob("*.json"))[0])["inference"]["rule"])
    return (f"<h2>Datasets declared in params.yaml: what was inferred</h2><p>Rule: {rule}.</p>" + "".join(parts))


def page_record(outcome: Outcome, split: str, page: Path, run_time: datetime.datetime) -> dict[str, Any]:
    """The record of one split's result; `page`: its Great Expectations page, relative to the report folder."""
    r = outcome.splits[split]
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
        "page": page.as_posix(),
        "validated_at": run_time.isoformat(),  # UTC, the same for every split of one stage run
    }


def write_index(report_dir: str | Path) -> Path:
    """reports/validation/index.html: one static page (no scripts, opens offline) listing the latest
    result of every stage, dataset and split, the failed expectations in full, and links to Great
    Expectations' page of each result. (GX's own index, gx/index.html, draws its table with scripts.)"""
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
(<a href="{GX_SITE_DIR}/index.html">Great Expectations' own index</a>: sortable, with a "Failed only" filter,
and the results of earlier runs).</p>
<table><thead><tr><th>stage@dataset</th><th>split</th><th>status</th><th>validated (UTC)</th><th>rows</th>
<th>expectations</th><th>failed</th><th>details</th></tr></thead><tbody>
{"".join(rows)}
</tbody></table>{_declared_section(report_dir)}</body></html>
"""
    path = report_dir / "index.html"
    with atomic_path(path) as tmp:
        tmp.write_text(page)
    return path
