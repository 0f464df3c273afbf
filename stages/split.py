"""split@<dataset>: canonical train / val / test splits as the paper makes them (params: datasets.<D>.split)."""

from __future__ import annotations

from pathlib import Path

from multitab.config import load_params
from multitab.datasets.schema import get_schema
from multitab.datasets.steps import split
from stages._common import parser, run


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--dataset", required=True)
    p.add_argument("--raw", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    a = p.parse_args(argv)
    return run(
        f"split@{a.dataset}",
        lambda: split(get_schema(a.dataset), load_params(a.params).dataset(a.dataset), a.raw, a.out),
        outputs=[a.out],
    )


if __name__ == "__main__":
    raise SystemExit(main())
