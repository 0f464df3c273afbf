"""The run's summary: per stage its outcome, attempts, time and cause (results/pipeline_summary.json and
the console), and the Prefect artifacts that show it (`pipeline-summary`, the headline results, a table of
each failed validation's expectations)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.dag import StagePlan
from multitab.files.io import read_json
from multitab.markup import md_cell, md_text

# Where the validation stages keep one record per stage, dataset and split (multitab.validation.report_page).
VALIDATION_RESULTS = "reports/validation/results"
# What `aggregate` writes that the summary artifact quotes (dvc.yaml).
METRICS, REPORT, REPORT_HTML = "results/metrics.json", "results/report.md", "results/report.html"

Status = Literal["ran", "up_to_date", "restored", "failed", "not_run"]


@dataclass
class StageResult:
    stage: str
    status: Status
    attempts: int = 0
    seconds: float = 0.0
    lock_waits: int = 0
    error: str | None = None
    failed_attempts: list[str] = field(default_factory=list)
    exit_code: int | None = None
    # peak_rss_bytes (this run's, the largest process of the stage) and expected_peak_bytes (flows/memory.py)
    memory: dict[str, int | None] = field(default_factory=dict)



def summarise(
    plan: StagePlan, results: dict[str, StageResult], seconds: float, workers: int, retries: int
) -> dict[str, Any]:
    ordered = [results[s] for s in plan.order]

    def names(status: str) -> list[str]:
        return [r.stage for r in ordered if r.status == status]

    return {
        "ran": names("ran"),
        "up_to_date": names("up_to_date"),
        "restored": names("restored"),
        "retried": [r.stage for r in ordered if r.attempts > 1],
        "failed": names("failed"),
        "not_run": names("not_run"),
        "attempts": sum(r.attempts for r in ordered),
        "lock_waits": sum(r.lock_waits for r in ordered),
        "subprocesses": sum(1 for r in ordered if r.attempts > 0),
        "wall_seconds": round(seconds, 2),
        "workers": workers,
        "retries": retries,
        "stages": {
            r.stage: {
                "status": r.status,
                "attempts": r.attempts,
                "seconds": r.seconds,
                "lock_waits": r.lock_waits,
                "exit_code": r.exit_code,
                "error": r.error,
                "failed_attempts": r.failed_attempts,
                **r.memory,
            }
            for r in ordered
        },
    }


def format_summary(summary: dict[str, Any]) -> str:
    lines = [
        f"pipeline: {len(summary['stages'])} stages in {summary['wall_seconds']:.1f} s "
        f"({summary['workers']} at once, {summary['attempts']} attempts)"
    ]
    for key, label in [
        ("ran", "ran"),
        ("up_to_date", "up to date"),
        ("restored", "restored from DVC's run cache"),
        ("retried", "retried"),
        ("failed", "FAILED"),
        ("not_run", "not run (upstream failed)"),
    ]:
        if summary[key]:
            lines.append(f"  {label} ({len(summary[key])}): {', '.join(summary[key])}")
    for stage in summary["failed"]:
        lines.append(f"  {summary['stages'][stage]['error']}")
    return "\n".join(lines)



# ------------------------------------------------------------------------------------------ artifacts

OUTCOME_WORDS = {
    "ran": "ran",
    "up_to_date": "up to date",
    "restored": "restored",
    "failed": "**FAILED**",
    "not_run": "not run",
}
COUNT_WORDS = {"ran": "ran", "restored": "restored from DVC's run cache", "up_to_date": "up to date",
               "failed": "failed", "not_run": "not run"}


def summary_markdown(root: Path, summary: dict[str, Any]) -> str:
    """The `pipeline-summary` artifact: counts, the headline results when `aggregate` ran, one row per stage,
    and why each stage failed, was retried or did not run.

    The Prefect UI draws a Markdown table's cells on one line each and cuts what is wider than its column of
    the page (about 700 px in a 1280 px window): the stage table holds short cells only (the stage's name,
    its outcome, seconds and peak memory: 650 px with the default DAG's longest name), and the causes, which
    can be long, follow it as a list."""
    counts = ", ".join(f"{len(summary[k])} {COUNT_WORDS[k]}" for k in COUNT_WORDS if summary[k])
    aggregated = summary["stages"].get("aggregate", {}).get("status") in ("ran", "restored")
    out = [
        f"# multitab pipeline: {len(summary['stages'])} stages in {summary['wall_seconds']:.1f} s",
        "",
        *(report_banners(root) if aggregated else []),  # what the numbers below can say, before any of them
        f"{counts}; {len(summary['retried'])} retried; {summary['subprocesses']} `dvc repro` subprocesses.",
        "",
    ]
    if aggregated:
        out += [*headline_markdown(root), ""]  # the results first, the stage table after
    out += ["## Stages", "", "| stage | outcome | s | GB |", "|---|---|---:|---:|"]
    why = []
    for stage, s in summary["stages"].items():
        outcome = OUTCOME_WORDS[s["status"]] + (f" ×{s['attempts']}" if s["attempts"] > 1 else "")
        peak = f"{s['peak_rss_bytes'] / 1e9:.2f}" if s.get("peak_rss_bytes") else ""
        out.append(f"| {md_text(stage)} | {outcome} | {s['seconds']:.1f} | {peak} |")
        causes = [*s["failed_attempts"], *([s["error"]] if s["error"] else [])]
        if causes:
            why.append(f"- {md_text(stage)} ({OUTCOME_WORDS[s['status']]}): " + "; ".join(md_text(c) for c in causes))
    out += ["", "s: seconds in this run; GB: the peak memory of its largest process; ×N: N attempts."]
    if why:
        out += ["", "Why (each attempt that failed, in order; a stage not run names the stage it waited for):", "",
                *why]
    return "\n".join(out) + "\n"


# datasets side by side in the headline table: the Prefect UI cuts a wider table (see summary_markdown)
DATASETS_PER_TABLE = 3
# |Δm| from here on is flagged: Δm divides by the single-task baseline's metric, so a baseline near zero (an
# explained variance after a few epochs) makes it large whatever the model did
LARGE_DELTA_M = 100.0


def report_banners(root: Path) -> list[str]:
    """The report's banners (stand-in data, reduced training, not tested at this budget ...): its Markdown
    block quotes ahead of its first section, as the report words them (names already escaped there)."""
    path = root / REPORT
    if not path.is_file():
        return []
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            break
        if line.startswith("> "):
            lines += [line, ""]
    return lines


def headline_markdown(root: Path) -> list[str]:
    """Table 3's Δm (a row per model, a column per dataset) and any MultiTab-Bench verdict from
    results/metrics.json."""
    path = root / METRICS
    if not path.exists():
        return [f"`aggregate` ran but {METRICS} is missing."]
    metrics = read_json(path)
    out = ["## Headline results", "",
           f"Report: `{REPORT}` (as a page: `{REPORT_HTML}`; metrics: `{METRICS}`; paths in the project folder).", ""]
    delta = metrics.get("delta_m") or {}
    models = list(dict.fromkeys(m for per in delta.values() for m in per))
    if delta and models:
        standin = metrics.get("standin") or {}
        out += ["Δm (%) against the single-task baseline (Table 3):", ""]
        large = False
        datasets = list(delta)
        for start in range(0, len(datasets), DATASETS_PER_TABLE):  # as many columns as fit the UI's page
            part = datasets[start:start + DATASETS_PER_TABLE]
            heads = [md_text(d) + (" \\*" if standin.get(d) else "") for d in part]
            out += ["| model | " + " | ".join(heads) + " |", "|---|" + "---:|" * len(part)]
            for m in models:
                cells = []
                for d in part:
                    c = delta[d].get(m, "")
                    if isinstance(c, int | float) and not isinstance(c, bool):
                        flag = abs(c) >= LARGE_DELTA_M
                        large |= flag
                        cells.append(f"{c:+.2f}" + (" †" if flag else ""))
                    else:
                        cells.append(md_text(c))
                out.append(f"| {md_text(m)} | " + " | ".join(cells) + " |")
            out.append("")
        if any(standin.get(d) for d in datasets):
            out += ["\\* stand-in data: generated, not the real dataset; its numbers check the pipeline, not the "
                    "paper."]
        if large:
            out += ["", f"† |Δm| ≥ {LARGE_DELTA_M:.0f} %: Δm divides by the single-task baseline's metric, which "
                    "is near zero there (e.g. an explained variance after a few epochs): the ratio is large whatever "
                    "the model did, and says little."]
    for key, value in metrics.items():
        if "verdict" in key.lower():
            out += ["", f"MultiTab-Bench verdict ({md_text(key)}): {md_text(json.dumps(value))}"]
    return out


def validation_failures(root: Path, stage: str) -> list[dict[str, Any]]:
    """Failed expectations of a failed validation stage (`validate_raw@higgs`), from the records the
    validation writes beside its Data Docs: dataset, split, column, expectation, observed."""
    base, _, dataset = stage.partition("@")
    rows = []
    for path in sorted((root / VALIDATION_RESULTS).glob(f"{base}-{dataset}-*.json")):
        record = read_json(path)
        if record.get("stage") != base or record.get("dataset") != dataset or record.get("success", True):
            continue
        for f in record.get("failed", []):
            rows.append(
                {
                    "dataset": dataset,
                    "split": record.get("split"),
                    "column": f.get("column") or "(table)",
                    "expectation": f.get("expectation"),
                    "check": f.get("check"),
                    "observed": f.get("observed"),
                }
            )
    return rows


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:100]


SWEEP_REPORT = Path("results/sweeps/report.md")
SWEEP_POINTS = Path("results/sweeps/points.csv")


def sweep_rows(root: Path) -> list[dict[str, str]]:
    """results/sweeps/points.csv as table rows (every grid point, its rank, metrics and time)."""
    import csv

    with (root / SWEEP_POINTS).open(newline="") as f:
        return [dict(row) for row in csv.DictReader(f)]


def _cells(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A table artifact's rows as Prefect's UI must get them: it renders a text cell as Markdown, so names and
    values from data (a column named `<script>...`, `=HYPERLINK(...)`) are quoted as text, spreadsheet-safe."""
    return [{k: md_cell(v) if isinstance(v, str) else v for k, v in row.items()} for row in rows]


def publish_artifacts(root: Path, summary: dict[str, Any]) -> None:
    """The run's summary (markdown), one table per failed validation stage, and the sweep report (markdown
    and a table of every grid point) when `sweep_select` ran."""
    create_markdown_artifact(
        markdown=summary_markdown(root, summary),
        key="pipeline-summary",
        description="What every stage of this flow run did (DVC's outcome, attempts, time, cause).",
    )
    sweep_status = summary["stages"].get("sweep_select", {}).get("status")
    if sweep_status in ("ran", "restored") and (root / SWEEP_REPORT).exists():
        create_markdown_artifact(
            markdown=(root / SWEEP_REPORT).read_text(encoding="utf-8"),
            key="sweep-report",
            description="Hyperparameter sweeps: the selection per dataset and model and every grid point.",
        )
        create_table_artifact(table=_cells(sweep_rows(root)), key="sweep-points",
                              description="Every grid point of the sweeps (results/sweeps/points.csv).")
    for stage in summary["failed"]:
        if not stage.startswith("validate_"):
            continue
        rows = validation_failures(root, stage)
        if rows:
            create_table_artifact(
                table=_cells(rows),
                key=_key(f"validation-failures-{stage}"),
                description=f"{md_text(stage)}: {len(rows)} failed expectation(s); Data Docs in reports/validation/",
            )
