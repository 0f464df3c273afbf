"""acquire@<dataset>: raw files from a stand-in, a local path or a remote URL (params: datasets.<D>.source)."""

from __future__ import annotations

from pathlib import Path

from multitab.config import load_params
from multitab.datasets.declared import acquire_declared
from multitab.datasets.schema import get_schema
from multitab.datasets.steps import acquire
from stages._common import parser, run


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--dataset", required=True)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--cache", default=Path("data/cache"), type=Path, help="download cache (remote)")
    a = p.parse_args(argv)

    def body() -> object:
        cfg = load_params(a.params).dataset(a.dataset)
        if cfg.declared:
            return acquire_declared(a.dataset, cfg, a.out)
        return acquire(get_schema(a.dataset), cfg, a.out, a.cache)

    return run(f"acquire@{a.dataset}", body, outputs=[a.out])


if __name__ == "__main__":
    raise SystemExit(main())
