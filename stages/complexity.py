"""complexity: parameters and forward FLOPs per sample of every registered model on every dataset
(params: complexity, protocol). Schemas come from the processed datasets' meta.json files (cardinalities with
the reserved index, i.e. the models as trained), not from the schema registry.
Writes <out>.csv and <out>.md (FLOPs = 2 x MACs, ptflops-style, see multitab.evaluation.complexity)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from multitab.config import ComplexityConfig, load_params
from multitab.datasets.schema import schema_from_meta
from multitab.evaluation.complexity import complexity_rows
from multitab.io import atomic_path
from multitab.models import MODELS, build_model
from multitab.protocol import DEFAULT
from stages._common import parser, run


def markdown(df: pd.DataFrame) -> str:
    """A GitHub table (no extra dependency); empty cells for missing values."""
    cells = [[("" if pd.isna(v) else str(v)) for v in row] for row in df.itertuples(index=False)]
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in cells]) + "\n"


def write_tables(meta_paths: list[Path], out: Path, cfg: ComplexityConfig, protocol: str = DEFAULT) -> None:
    schemas, standin = {}, {}
    for path in meta_paths:
        try:
            meta = json.loads(path.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: meta.json not found; run the preprocess stage first") from None
        schema = schema_from_meta(meta)
        schemas[schema.name] = schema
        standin[schema.name] = bool(meta.get("standin", False))
    models = {name: (lambda s, n=name: build_model(n, s, protocol=protocol)) for name in MODELS}
    df = pd.DataFrame(complexity_rows(schemas, models, batch_size=cfg.batch_size, standin=standin))
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out.with_suffix(".csv")) as tmp:
        df.to_csv(tmp, index=False)
    note = (
        f"Parameters and forward FLOPs per sample (FLOPs = 2 x MACs, ptflops-style, batch of "
        f"{cfg.batch_size} counted), each model at the authors' selected configuration for the dataset "
        f"(protocol {protocol}: docs/deviations.md). "
        "paper_*: the MultiTab paper's Table 4. Cardinalities from the processed meta.json"
        + (" (stand-in data: " + ", ".join(d for d, s in standin.items() if s) + ")" if any(standin.values()) else "")
        + ".\n\n"
    )
    with atomic_path(out.with_suffix(".md")) as tmp:
        tmp.write_text(note + markdown(df))


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--meta", required=True, nargs="+", type=Path, help="data/processed/<dataset>/meta.json")
    p.add_argument("--out", required=True, type=Path, help="output path without suffix")
    a = p.parse_args(argv)
    def go() -> None:
        params = load_params(a.params)
        write_tables(a.meta, a.out, params.complexity, params.protocol)

    return run("complexity", go)


if __name__ == "__main__":
    raise SystemExit(main())
