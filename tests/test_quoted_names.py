"""Names from params and data (a run group, a task or column of a processed dataset's meta.json, a failure
message quoting one) reach Markdown and HTML the project writes: the Prefect summary artifact, the report
(results/report.md and results/tables/*.md) and the entry page (results/index.html). There they are text:
a tag is not markup, Markdown's special characters do not format, a `|` does not split a table cell."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

from flows.dag import StagePlan
from flows.summary import StageResult, summarise, summary_markdown
from multitab.evaluation.paper.entry_page import render
from multitab.evaluation.paper.report_markdown import Provenance, validation_banner
from multitab.evaluation.tables import Cell, Table
from multitab.markup import md_text

TAG = "<script>x</script>"
COLUMN = f"{TAG}*b* _u_ [l](x) `c` |p"  # a column (or task) named so in a processed meta.json
GROUP = "<b>grp</b>"  # a run group named so in params.yaml


def markdown_shows_as_text(md: str, name: str) -> None:
    """`name` appears only escaped in `md`: no tag, no unescaped Markdown character of it."""
    assert "<script>" not in md and "<b>" not in md, md
    assert md_text(name) in md, md
    assert "&lt;script>x&lt;/script>" in md or "&lt;b>" in md


def test_summary_artifact_and_entry_page_show_names_as_text(tmp_path: Path) -> None:
    stage = f"train@{GROUP}-acs_income-stl_mlp-0"
    error = (f"stage validate_processed@mine exited with code 3 (bad input, not retried): validation failed: [train] "
             f"column '{COLUMN}' · expect_column_values_to_not_be_null (not_null): observed 3")
    plan = StagePlan(order=(stage, "validate_processed@mine"), upstream={stage: (), "validate_processed@mine": ()})
    results = {stage: StageResult(stage, "ran", attempts=1),
               "validate_processed@mine": StageResult("validate_processed@mine", "failed", attempts=1, error=error,
                                                      exit_code=3)}
    md = summary_markdown(tmp_path, summarise(plan, results, 1.0, 1, 0))
    markdown_shows_as_text(md, COLUMN)
    markdown_shows_as_text(md, stage)
    rows = [line for line in md.splitlines() if line.startswith("| ")]
    # every row of the stage table keeps as many cells as its header: a `|` in a name is escaped, not a cell
    # boundary
    cells = len(re.split(r"(?<!\\)\|", rows[0]))
    assert all(len(re.split(r"(?<!\\)\|", row)) == cells for row in rows), rows
    # the entry page: the run group in "What ran" and in a linked file's name
    page = tmp_path / "results" / "index.html"
    table = tmp_path / "results" / "tables" / f"{GROUP}.md"
    html = render(page, [("Report", [table])], Provenance(commit="abc123"), "paper",
                  what_ran=[f"run group {GROUP}: 2 runs (runs.{GROUP} in params.yaml)"])
    assert "<b>" not in html and "&lt;b&gt;grp&lt;/b&gt;" in html
    assert 'href="tables/&lt;b&gt;grp&lt;/b&gt;.md"' in html


def test_summary_headline_quotes_dataset_and_model_names_as_text(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    metrics = {"delta_m": {COLUMN: {GROUP: 1.5}}, "standin": {COLUMN: True}}
    (tmp_path / "results" / "metrics.json").write_text(json.dumps(metrics))
    plan = StagePlan(order=("aggregate",), upstream={"aggregate": ()})
    md = summary_markdown(tmp_path, summarise(plan, {"aggregate": StageResult("aggregate", "ran", 1)}, 1.0, 1, 0))
    markdown_shows_as_text(md, COLUMN)
    assert f"| model | {md_text(COLUMN)} \\* |" in md and f"| {md_text(GROUP)} | +1.50 |" in md


def test_report_tables_and_banner_quote_task_and_column_names_as_text() -> None:
    assert md_text(COLUMN) == "&lt;script>x&lt;/script>\\*b\\* \\_u\\_ \\[l\\](x) \\`c\\` \\|p"
    assert md_text("acs_income") == "acs_income"  # an underscore inside a word formats nothing
    assert md_text("F-not-T & T-not-T, &lt;") == "F-not-T & T-not-T, &amp;lt;"  # only an entity's & is escaped
    assert md_text("a\nb") == "a b"
    table = Table("table3_test_results", "Table 3", ["Model", f"{COLUMN} AUC"], [["stl_mlp", Cell(91.0)]],
                  standin=[COLUMN])
    md = table.to_markdown(compare=False)
    markdown_shows_as_text(md, f"{COLUMN} AUC")
    assert "| stl_mlp | 91.00 |" in md
    warning = f"[val] column '{COLUMN}' · ... (categories): observed [7]"
    run = SimpleNamespace(extra={"validation_warnings": [warning]})
    runs = SimpleNamespace(datasets=["mine"], models=lambda d: ["stl_mlp"], runs=lambda d, m: {0: run})
    (line, _) = validation_banner(SimpleNamespace(runs=runs))  # type: ignore[arg-type]
    markdown_shows_as_text(line, warning)
