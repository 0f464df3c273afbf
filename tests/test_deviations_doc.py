"""docs/deviations.md stays true to the code: every `file:line` it cites exists, every NOTE[DIFF] in the
code points at an entry of it, and no code or test cites material outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "deviations.md"
CODE_DIRS = ("src", "stages", "flows", "benchmarks", "tests")


def doc_ids() -> set[str]:
    return set(re.findall(r"^\| ([PSODU]\d+) \|", DOC.read_text(), flags=re.M))


def test_cited_lines_exist_and_are_not_blank() -> None:
    cites = re.findall(r"((?:src|stages|benchmarks)/[\w/]+\.py|params\.yaml|hparams/[\w/]+\.yaml):(\d+)",
                       DOC.read_text())
    assert len(cites) > 30
    for path, line in cites:
        lines = (ROOT / path).read_text().split("\n")
        assert int(line) <= len(lines), f"{path}:{line} is past the end of the file"
        assert lines[int(line) - 1].strip(), f"{path}:{line} is a blank line"


def stale_params_cites(doc: str, params: str) -> list[str]:
    """params.yaml citations whose first cited line does not define a key the same doc line names: a cite
    `params.yaml:N` (or N-M) next to a backticked dotted key such as `train.patience` must land on `patience:`.
    Lines are what go stale when params.yaml grows, and a blank-line check does not see that."""
    lines = params.split("\n")
    stale = []
    for text in doc.split("\n"):
        cites = re.findall(r"params\.yaml:(\d+)", text)
        if not cites:
            continue
        keys = {k.rsplit(".", 1)[-1] for k in re.findall(r"`([a-z_]+(?:\.[a-z_]+)+)`", text)}
        for n in cites:
            line = lines[int(n) - 1] if int(n) <= len(lines) else ""
            if not any(re.match(rf"\s*{re.escape(k)}:", line) for k in keys):
                stale.append(f"params.yaml:{n} is `{line.strip()}`, none of {sorted(keys)}")
    return stale


def test_params_citations_land_on_the_key_they_name() -> None:
    doc, params = DOC.read_text(), (ROOT / "params.yaml").read_text()
    assert re.findall(r"params\.yaml:\d+", doc), "no params.yaml citation left to check"
    assert stale_params_cites(doc, params) == []
    # the check bites: a citation one line off is caught
    shifted = re.sub(r"params\.yaml:(\d+)", lambda m: f"params.yaml:{int(m.group(1)) + 1}", doc)
    assert stale_params_cites(shifted, params)


def test_note_diff_comments_point_at_entries_of_the_page() -> None:
    ids = doc_ids()
    assert {"P1", "P2", "P3", "P4", "P5", "S1", "S2", "S3"} <= ids
    found = 0
    for path in (ROOT / "src").rglob("*.py"):
        for n, line in enumerate(path.read_text().split("\n"), 1):
            if "NOTE[DIFF]" not in line:
                continue
            found += 1
            m = re.search(r"NOTE\[DIFF\] \(docs/deviations\.md ([^)]*)\)", line)
            assert m, f"{path.relative_to(ROOT)}:{n}: NOTE[DIFF] without a docs/deviations.md entry"
            for ref in re.split(r",\s*", m.group(1)):
                assert ref in ids, f"{path.relative_to(ROOT)}:{n}: {ref} is not an entry of docs/deviations.md"
    assert found >= 15


def test_doc_cites_each_note_diff_line_with_its_own_id() -> None:
    text = DOC.read_text()
    for row in re.findall(r"^\| ([PSODU]\d+) \|(.*)$", text, flags=re.M):
        ident, rest = row
        for path, line in re.findall(r"(src/[\w/]+\.py):(\d+)", rest):
            code = (ROOT / path).read_text().split("\n")[int(line) - 1]
            if "NOTE[DIFF]" in code:
                assert ident in code, f"{ident} cites {path}:{line}, a NOTE[DIFF] of another entry"


def test_nothing_cites_or_reads_outside_the_repository() -> None:
    for d in CODE_DIRS:
        for path in (ROOT / d).rglob("*.py"):
            if path.name == Path(__file__).name:
                continue
            text = path.read_text()
            assert "official_code_findings" not in text, path
            assert "../shared" not in text and '"shared"' not in text, path
