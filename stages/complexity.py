"""complexity: parameters and forward FLOPs per sample of every registered model, and of every model params.yaml
declares (`models:`, with its declaration's hyperparameters), on every dataset (params: complexity, protocol,
datasets, models). Schemas come from the processed datasets' meta.json files (cardinalities with
the reserved index, i.e. the models as trained), not from the schema registry.
Writes <out>.csv and <out>.md (FLOPs = 2 x MACs, ptflops-style, see multitab.evaluation.paper.complexity)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from multitab.config import ComplexityConfig, load_params
from multitab.datasets.schema import DatasetSchema, schema_from_meta
from multitab.evaluation.paper.complexity import complexity_rows
from multitab.evaluation.tables import Cell, Table, Value
from multitab.files.io import atomic_path, write_csv
from multitab.hparams import Hparams, apply_protocol, declared, load, protocol_overlay, selection_file
from multitab.hparams.recipe import recipe
from multitab.models import MODELS, build_model
from multitab.protocol import DEFAULT
from multitab.registry import is_user_model, user_models
from stages._common import parser, run

_DECIMALS = {"params": 0, "flops": 0, "params_millions": 3, "flops_millions": 3, "paper_params_millions": 2,
             "paper_flops_millions": 2, "batch_size": 0}


def complexity_table(df: pd.DataFrame, standin: list[str], note: str) -> Table:
    """The rows as the project's Table (number cells; an empty cell where a value does not exist)."""
    rows: list[list[Value]] = [
        [Cell(None if pd.isna(v) else float(v), _DECIMALS[c], missing="") if c in _DECIMALS else str(v)
         for c, v in zip(df.columns, row)]
        for row in df.itertuples(index=False)
    ]
    return Table("complexity", "Parameters and FLOPs per sample", list(df.columns), rows, standin, [note])


def _hparams(schema: DatasetSchema, model: str, protocol: str, root: Path) -> Hparams:
    """The authors' file of `model` on the dataset with `protocol`'s overlay; for a dataset they did not tune (one
    declared in params.yaml), the model's recipe for its number of features, as its runs train it; a user's model's
    own (its declaration's file or inline values) on every dataset."""
    if is_user_model(model):
        return apply_protocol(declared(model, root), model, protocol_overlay(root, protocol))
    if (root / selection_file("authors", schema.name, model)).is_file():
        return load(schema.name, model, protocol=protocol, root=root)
    return apply_protocol(recipe(model, len(schema.features), root=root)[0], model, protocol_overlay(root, protocol))


def write_tables(meta_paths: list[Path], out: Path, cfg: ComplexityConfig, protocol: str = DEFAULT,
                 root: Path = Path(".")) -> None:
    """The table of every registered model on every dataset of `meta_paths`, each built with its authors'
    hyperparameter file under `root` (hparams/authors/<dataset>/<model>.yaml; else its recipe) and `protocol`'s
    overlay."""
    schemas, standin = {}, {}
    for path in meta_paths:
        try:
            meta = json.loads(path.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: meta.json not found; run the preprocess stage first") from None
        schema = schema_from_meta(meta)
        schemas[schema.name] = schema
        standin[schema.name] = bool(meta.get("standin", False))
    models = {name: (lambda s, n=name: build_model(n, s, _hparams(s, n, protocol, root).model))
              for name in [*MODELS, *user_models()]}
    df = pd.DataFrame(complexity_rows(schemas, models, batch_size=cfg.batch_size, standin=standin))
    out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(out.with_suffix(".csv"), df)
    standins = [d for d, s in standin.items() if s]
    note = (
        f"Parameters and forward FLOPs per sample (FLOPs = 2 x MACs, ptflops-style, batch of "
        f"{cfg.batch_size} counted), each model at the authors' selected configuration for the dataset "
        f"(protocol {protocol}: docs/deviations.md). "
        "paper_*: the MultiTab paper's Table 4. Cardinalities from the processed meta.json"
        + (f" (stand-in data: {', '.join(standins)})" if standins else "")
        + "."
    )
    table = complexity_table(df, standins, note)
    with atomic_path(out.with_suffix(".md")) as tmp:
        tmp.write_text(table.to_markdown(heading="#"))


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--processed", required=True, type=Path, help="data/processed: <dataset>/meta.json of every dataset")
    p.add_argument("--out", required=True, type=Path, help="output path without suffix")
    a = p.parse_args(argv)
    def go() -> None:
        params = load_params(a.params)
        # every dataset of params.yaml (in its order), or, in a project without `datasets:`, every folder
        names = list(params.datasets) if "datasets" in params.sections else sorted(
            p.name for p in a.processed.iterdir() if p.is_dir())
        meta = [a.processed / name / "meta.json" for name in names]
        write_tables(meta, a.out, params.complexity, params.protocol, Path(a.params).parent)

    return run("complexity", go, stems=[a.out])


if __name__ == "__main__":
    raise SystemExit(main())
