"""Names are data, never markup: a declared dataset's task and column names (its file decides them) reach
Great Expectations' Data Docs, the Prefect artifacts and every table we write. No HTML file under the Data Docs
holds one unescaped; no CSV or Markdown table cell a spreadsheet would run as a formula (`=HYPERLINK(...)`)
stays one, while negative numbers stay numbers."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from multitab.evaluation.tables import Cell, Table, comparison_rows
from multitab.files.io import write_csv
from multitab.markup import csv_text, md_cell, spreadsheet_cell, spreadsheet_frame

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(2)>"
FORMULA = '=HYPERLINK("http://127.0.0.1/x","y")'


def _declared(tmp_path: Path) -> Path:
    """params.yaml (the repository's) with dataset `mine`: a CSV whose feature and task columns are named as
    markup and as a formula."""
    rng = np.random.default_rng(0)
    n = 200
    frame = pd.DataFrame({SCRIPT: rng.normal(size=n), "level": rng.integers(0, 5, n), IMG: rng.integers(0, 2, n),
                          FORMULA: rng.integers(0, 2, n)})
    frame.to_csv(tmp_path / "table.csv", index=False)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["datasets"]["mine"] = {
        "source": "local", "local": {"path": str(tmp_path / "table.csv")}, "tasks": {IMG: "binary", FORMULA: "binary"},
        "split": {"method": "shuffle", "seed": 0, "val_fraction": 0.15, "test_fraction": 0.15}}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def test_data_docs_show_task_and_column_names_as_text(tmp_path: Path) -> None:
    from stages import acquire, preprocess, split, validate_processed, validate_raw

    p = str(_declared(tmp_path))
    gx, report = str(tmp_path / "gx"), tmp_path / "reports" / "validation"
    assert acquire.main(["--params", p, "--dataset", "mine", "--out", str(tmp_path / "raw")]) == 0
    assert split.main(["--params", p, "--dataset", "mine", "--raw", str(tmp_path / "raw"),
                       "--out", str(tmp_path / "splits")]) == 0
    assert validate_raw.main(["--params", p, "--dataset", "mine", "--splits", str(tmp_path / "splits"), "--out",
                              str(tmp_path / "raw.json"), "--context", gx, "--report", str(report)]) == 0
    assert preprocess.main(["--params", p, "--dataset", "mine", "--splits", str(tmp_path / "splits"),
                            "--out", str(tmp_path / "processed")]) == 0
    validate_processed.main(["--params", p, "--processed", str(tmp_path / "processed"), "--out",
                             str(tmp_path / "processed.json"), "--context", gx, "--report", str(report)])
    pages = sorted(report.rglob("*.html"))
    result_pages = [q for q in pages if "validations" in q.parts]
    assert len(result_pages) == 6 and len([q for q in pages if "expectations" in q.parts]) == 6, pages
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert SCRIPT not in text and IMG not in text, page
    # the names are on the pages, as text: in a section header, and in the observed column list
    text = result_pages[0].read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "&lt;img src=x onerror=alert(2)&gt;" in text
    assert "&amp;lt;" not in text  # escaped once


def test_a_page_without_markup_in_its_names_renders_as_gx_renders_it() -> None:
    from great_expectations.render.components import (
        RenderedDocumentContent,
        RenderedHeaderContent,
        RenderedSectionContent,
        RenderedStringTemplateContent,
        RenderedTableContent,
    )
    from great_expectations.render.view import DefaultJinjaPageView

    from multitab.validation.docs_view import EscapedPageView

    def page(name: str) -> RenderedDocumentContent:
        cell = RenderedStringTemplateContent(string_template={"template": "$column values", "params": {
            "column": name}, "styling": {"default": {"classes": ["badge"]}}})
        table = RenderedTableContent(table=[[cell, f"[{name}, b]"]], header_row=["Expectation", "Observed"])
        section = RenderedSectionContent(section_name=name, content_blocks=[RenderedHeaderContent(header=name), table])
        return RenderedDocumentContent(renderer_type="ValidationResultsPageRenderer", expectation_suite_name="s",
                                       sections=[section])

    def render(view: type[DefaultJinjaPageView], name: str) -> str:  # the page, its time stamps left out
        html = view().render(page(name), data_context_id=None, show_how_to_buttons=False)
        return re.sub(r"\?d=\d{8}T\d{6}\.\d+Z", "", html)

    assert render(EscapedPageView, "age group") == render(DefaultJinjaPageView, "age group")
    assert SCRIPT in render(DefaultJinjaPageView, SCRIPT)  # GX's own view prints the name as markup
    escaped = render(EscapedPageView, SCRIPT)
    assert SCRIPT not in escaped and escaped.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 3


CELLS = [  # (cell, as a table we write holds it)
    (FORMULA, "'" + FORMULA), ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"), ("-2+3", "'-2+3"),
    ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"), ("\r=1", "'\r=1"),
    # numbers and number text stay numbers; other text stays as it is
    ("-0.125", "-0.125"), ("+1.5", "+1.5"), ("-inf", "-inf"), (-3.5, -3.5), ("income", "income"), ("a=b", "a=b"),
    (None, None),
]


def test_a_text_cell_a_spreadsheet_would_run_is_made_text_and_numbers_stay() -> None:
    assert [spreadsheet_cell(value) for value, _ in CELLS] == [expected for _, expected in CELLS]


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_every_csv_and_markdown_table_we_write_is_spreadsheet_safe(tmp_path: Path) -> None:
    from multitab.evaluation.paper.report import _figure_data_csv

    table = Table("table5_std_mine", "Table 5", ["Model", f"{FORMULA} AUC", "-x"],
                  [["@model", Cell(-1.5, paper=-1.25), Cell(0.5)]], standin=[FORMULA])
    rows = _rows(table.to_csv().split("\n", 1)[1])
    assert rows == [["Model", f"'{FORMULA} AUC", "'-x"], ["'@model", "-1.500000", "0.500000"]]
    md = table.to_markdown()
    assert f"| {md_cell('@model')} | -1.50 | 0.50 |" in md and md_cell(f"{FORMULA} AUC") in md
    comparison = pd.DataFrame(comparison_rows([table]))
    write_csv(tmp_path / "comparison.csv", comparison)
    written = _rows((tmp_path / "comparison.csv").read_text())
    assert written[1][:3] == ["table5_std_mine", "'@model", f"'{FORMULA} AUC"] and written[1][5] == "-0.25"
    # a DataFrame's numbers stay numbers; its text cells and header are made safe
    frame = spreadsheet_frame(pd.DataFrame({FORMULA: [-1.0, 2.0], "task": ["-t", "t"]}))
    assert list(frame.columns) == [f"'{FORMULA}", "task"] and frame[f"'{FORMULA}"].tolist() == [-1.0, 2.0]
    assert frame["task"].tolist() == ["'-t", "t"]
    assert _rows(csv_text([["=1+1", -2, "-2"]])) == [["'=1+1", "-2", "-2"]]
    synth = pd.DataFrame({"group": ["=g"], "level": ["l"], "model": ["m"], "delta_m": [-1.0], "se": [0.5],
                          "n_seeds": [3], "data": ["d"], "missing": [False]})
    assert _rows(_figure_data_csv(synth, ["=g"]))[1][:5] == ["'=g | l | m", "'=g", "l", "m", "-1.000000"]


def test_prefect_table_artifacts_quote_names_as_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefect's UI renders a text cell of a table artifact as Markdown: the failed checks' columns are quoted."""
    import json

    import flows.summary as summary

    results = tmp_path / "reports" / "validation" / "results"
    results.mkdir(parents=True)
    record = {"stage": "validate_raw", "dataset": "mine", "split": "val", "success": False,
              "failed": [{"column": SCRIPT, "expectation": "expect_column_values_to_be_in_set", "check": "categories",
                          "observed": [FORMULA]}, {"column": FORMULA, "expectation": "x", "check": "y",
                                                   "observed": "3 rows"}]}
    (results / "validate_raw-mine-val.json").write_text(json.dumps(record))
    tables: list[Any] = []
    monkeypatch.setattr(summary, "summary_markdown", lambda root, s: "")
    monkeypatch.setattr(summary, "create_markdown_artifact", lambda **kw: None)
    monkeypatch.setattr(summary, "create_table_artifact", lambda **kw: tables.append(kw["table"]))
    summary.publish_artifacts(tmp_path, {"stages": {}, "failed": ["validate_raw@mine"]})
    (rows,) = tables
    assert rows[0]["column"] == "&lt;script>alert(1)&lt;/script>" and rows[1]["column"] == md_cell(FORMULA)
    assert rows[1]["column"].startswith("'=")


def test_every_csv_is_written_through_the_one_spreadsheet_safe_helper() -> None:
    """DataFrame.to_csv and csv.writer appear only in multitab/markup.py (csv_text) and multitab/files/io.py
    (write_csv): a new CSV writer goes through them."""
    import ast

    allowed = {ROOT / "src" / "multitab" / "markup.py", ROOT / "src" / "multitab" / "files" / "io.py"}
    found = []
    for folder in (ROOT / "src" / "multitab", ROOT / "stages", ROOT / "flows"):
        for path in sorted(folder.rglob("*.py")):
            if path in allowed:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Attribute):
                    continue
                receiver = node.value.id if isinstance(node.value, ast.Name) else ""
                if (node.attr == "to_csv" and receiver != "self") or (  # self.to_csv(): Table's own, through csv_text
                        node.attr in ("writer", "DictWriter") and receiver == "csv"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.attr}")
    assert not found, "write CSV with multitab.files.io.write_csv or multitab.markup.csv_text:\n" + "\n".join(found)
