"""preprocess@<dataset>: ordinal codes + quantile transform fit on train (params: datasets.<D>.preprocess)."""

from __future__ import annotations

from pathlib import Path

from multitab.config import load_params
from multitab.datasets.declared import record, stage_schema
from multitab.datasets.steps import preprocess_splits
from stages._common import parser, run


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--dataset", required=True)
    p.add_argument("--splits", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument(
        "--verdict", type=Path, default=None,
        help="validate_raw's verdict (data/validated/<D>.raw.json): must say success; its warnings go to meta.json",
    )
    a = p.parse_args(argv)

    def body() -> object:
        cfg = load_params(a.params).dataset(a.dataset)
        return preprocess_splits(stage_schema(a.dataset, cfg, a.splits), cfg, a.splits, a.out, verdict=a.verdict,
                                 declared=record(cfg, a.splits))

    return run(f"preprocess@{a.dataset}", body, outputs=[a.out])


if __name__ == "__main__":
    raise SystemExit(main())
