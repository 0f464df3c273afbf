"""label_correlations: the paper's Figures 3 and 4 (params: bench.label_correlations): label correlation
against the weight cosine similarity p, as PNGs into --figures and CSVs into --tables."""

from __future__ import annotations

import logging
from pathlib import Path

from multitab.config import load_params
from multitab.datasets.bench_figures import label_correlation_figures
from stages._common import parser, run

log = logging.getLogger("stages.label_correlations")


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--figures", required=True, type=Path, help="folder for the PNGs")
    p.add_argument("--tables", required=True, type=Path, help="folder for the CSVs")
    a = p.parse_args(argv)

    def body() -> None:
        cfg = load_params(a.params).bench.label_correlations
        label_correlation_figures(cfg, a.figures, a.tables)
        log.info("wrote Figures 3 and 4 to %s and %s", a.figures, a.tables)

    return run("label_correlations", body, stems=[a.figures / "fig3_", a.figures / "fig4_", a.tables / "fig3_",
                                                  a.tables / "fig4_"])


if __name__ == "__main__":
    raise SystemExit(main())
