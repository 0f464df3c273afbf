"""A small table type and its three renderings (Markdown, CSV, LaTeX), with the paper's value beside ours.

Cells carry numbers, not strings: a missing value (a run that failed or was skipped, a partial set of
seeds) renders as "missing" in every format, never as a number. A table built from any stand-in input
names those inputs in a "stand-in data" banner (Markdown), a `# stand-in data` header line (CSV) and its
caption (LaTeX).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from multitab.files.io import atomic_path
from multitab.markup import csv_text, md_cell, md_text

STANDIN_MARK = "stand-in data"
MISSING = "missing"
ONE_SEED = "n/a: needs >= 2 seeds"  # a spread or a test over seeds, from one seed (the paper's tables rest on five)


def undefined_text(n_seeds: int) -> str:
    """The text of an undefined cell (NaN) of a spread or test over `n_seeds` seeds: why, where it is the seeds."""
    return ONE_SEED if n_seeds < 2 else "n/a"


@dataclass(frozen=True)
class Cell:
    """A number with its printed precision; None = missing. `paper`: the published value, if any."""

    value: float | None
    decimals: int = 2
    paper: float | None = None
    missing: str = MISSING  # the text for a missing value, e.g. "missing (3/5 seeds)"
    na: str = "n/a"  # the text for an undefined value (NaN), with its reason where known

    def text(self) -> str:
        if self.value is None:
            return self.missing
        if math.isnan(self.value):
            return self.na
        return f"{self.value:.{self.decimals}f}"

    def csv_text(self) -> str:
        """More digits than printed (four beyond), so the CSV can be re-used for arithmetic."""
        if self.value is None or math.isnan(self.value):
            return self.text()
        return f"{self.value:.{self.decimals + 4}f}"

    @property
    def difference(self) -> float | None:
        if self.value is None or self.paper is None or math.isnan(self.value):
            return None
        return self.value - self.paper

    def compared(self) -> str:
        """`ours (paper P; Δ D)` where there is a published value; D = ours - paper."""
        if self.paper is None:
            return self.text()
        paper = f"{self.paper:.{self.decimals}f}"
        diff = self.difference
        if diff is None:
            return f"{self.text()} (paper {paper})"
        return f"{self.text()} (paper {paper}; Δ {signed(diff, self.decimals)})"


Value = Cell | str


def signed(x: float, decimals: int) -> str:
    """`+0.12` / `-0.12`; a difference that rounds to zero prints `+0.00`, never `-0.00`."""
    text = f"{x:+.{decimals}f}"
    return "+" + text[1:] if float(text) == 0 else text


@dataclass
class Table:
    """`rows[i][j]` sits under `header[j]`; label columns hold str, value columns Cell."""

    name: str  # file stem under results/tables
    title: str
    header: list[str]
    rows: list[list[Value]]
    standin: list[str] = field(default_factory=list)  # inputs (datasets) built from stand-in data
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for i, row in enumerate(self.rows):
            if len(row) != len(self.header):
                raise ValueError(f"table {self.name}: row {i} has {len(row)} cells for {len(self.header)} columns")

    @property
    def banner(self) -> str | None:
        if not self.standin:
            return None
        return (f"**{STANDIN_MARK.upper()}**: built from {STANDIN_MARK} ({', '.join(map(md_text, self.standin))}); "
                "these numbers are not the study's results.")

    def cells(self) -> list[tuple[str, str, Cell]]:
        """(row label, column, cell) of every value cell; the row label joins the leading text cells."""
        out = []
        for row in self.rows:
            label = " / ".join(v for v in row if isinstance(v, str))
            for col, v in zip(self.header, row):
                if isinstance(v, Cell):
                    out.append((label, col, v))
        return out

    def has_paper(self) -> bool:
        return any(c.paper is not None for _, _, c in self.cells())

    # ---------------------------------------------------------------------------------------- renderers
    def to_markdown(self, *, compare: bool = False, heading: str = "###") -> str:
        # names in the title, header and label cells come from params and data: quoted as text (markup)
        lines = [f"{heading} {md_text(self.title)}" + (f" [{STANDIN_MARK}]" if self.standin else ""), ""]
        if self.banner:
            lines += [f"> {self.banner}", ""]
        if compare and self.has_paper():
            lines += ["Cells: ours (paper value; Δ = ours − paper).", ""]

        def fmt(v: Value) -> str:  # a label cell is a name: spreadsheet-safe too; a value cell is our number
            return md_cell(v) if isinstance(v, str) else md_text(v.compared() if compare else v.text())

        lines.append("| " + " | ".join(md_cell(h) for h in self.header) + " |")
        first = self.rows[0] if self.rows else ["" for _ in self.header]
        lines.append("|" + "|".join("---" if isinstance(v, str) else "---:" for v in first) + "|")
        for row in self.rows:
            lines.append("| " + " | ".join(fmt(v) for v in row) + " |")
        if self.notes:
            lines.append("")
            lines += [f"- {n}" for n in self.notes]
        return "\n".join(lines) + "\n"

    def to_csv(self) -> str:
        """The header and rows, every cell spreadsheet-safe (multitab.markup.csv_text)."""
        banner = f"# {STANDIN_MARK}: {' '.join(', '.join(self.standin).split())}\n" if self.standin else ""
        return banner + csv_text([self.header, *([v if isinstance(v, str) else v.csv_text() for v in row]
                                                 for row in self.rows)])

    def to_latex(self) -> str:
        caption = _tex(self.title)
        if self.standin:
            caption = rf"\textbf{{[{STANDIN_MARK.upper()}: {_tex(', '.join(self.standin))}]}} " + caption
        cols = "l" * sum(isinstance(v, str) for v in self.rows[0]) if self.rows else "l"
        cols += "r" * (len(self.header) - len(cols))
        lines = [
            f"% {self.name}: generated by stages/aggregate.py" + (f"; {STANDIN_MARK}" if self.standin else ""),
            r"\begin{table}[ht]",
            r"\centering",
            rf"\caption{{{caption}}}",
            rf"\begin{{tabular}}{{{cols}}}",
            r"\hline",
            " & ".join(_tex(h) for h in self.header) + r" \\",
            r"\hline",
        ]
        for row in self.rows:
            lines.append(" & ".join(_tex(v if isinstance(v, str) else v.text()) for v in row) + r" \\")
        lines += [r"\hline", r"\end{tabular}", r"\end{table}"]
        return "\n".join(lines) + "\n"

    def write(self, folder: str | Path) -> list[Path]:
        """results/tables/<name>.{md,csv,tex}, each written atomically."""
        folder = Path(folder)
        paths = []
        for ext, text in (("md", self.to_markdown(heading="#")), ("csv", self.to_csv()), ("tex", self.to_latex())):
            path = folder / f"{self.name}.{ext}"
            with atomic_path(path) as tmp:
                tmp.write_text(text)
            paths.append(path)
        return paths


_TEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                "Δ": r"$\Delta$", "μ": r"$\mu$", "σ": r"$\sigma$", "↛": r"$\not\rightarrow$",
                "−": "-"}


def _tex(text: str) -> str:
    return "".join(_TEX_ESCAPES.get(ch, ch) for ch in text)


def comparison_rows(tables: Sequence[Table]) -> list[dict[str, object]]:
    """Long form of every cell with a published value: table, row, column, ours, paper, difference."""
    out: list[dict[str, object]] = []
    for t in tables:
        for row, col, cell in t.cells():
            if cell.paper is None:
                continue
            out.append({
                "table": t.name, "row": row, "column": col,
                "ours": cell.text(), "paper": f"{cell.paper:.{cell.decimals}f}",
                "difference": MISSING if cell.difference is None else signed(cell.difference, cell.decimals),
                "stand_in": bool(t.standin),
            })
    return out
