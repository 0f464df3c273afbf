"""Scale: validate_raw and validate_processed on a Higgs-shaped dataset whose train split has 11,000,000
rows (val and test 611,111 each: the ordered 90/5/5 split of 12,222,222 rows), built here at random from
the Higgs schema. Bar: each validation of the 11 M-row split well under 2 minutes.

Run (two benchmarks never at once):  flock /tmp/multitab-bench.lock python benchmarks/validate_scale.py
Writes into a temporary folder (or --work); prints wall times per stage and per split.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from multitab.config import load_params
from multitab.config.data import (
    DatasetConfig,
    LocalConfig,
    PreprocessConfig,
    RemoteConfig,
    SplitConfig,
    StandinConfig,
)
from multitab.datasets.schema import get_schema
from multitab.files.io import write_json
from multitab.validation import Outcome, validate_processed, validate_raw
from multitab.validation.suites import RAW_DTYPES, TASK_DTYPES

N_TRAIN, N_OTHER = 11_000_000, 611_111


def _frame(n: int, rng: np.random.Generator, processed: bool) -> pd.DataFrame:
    schema = get_schema("higgs")
    cols: dict[str, np.ndarray] = {}
    for f in schema.features:
        if f.kind == "numerical":
            cols[f.name] = (
                rng.standard_normal(n, dtype=np.float32)
                if processed
                else rng.uniform(f.low or 0.0, f.high or 1.0, n).astype(np.float32)
            )
        else:
            cols[f.name] = rng.integers(
                1 if processed else 0, (f.cardinality or 2) + (1 if processed else 0), n
            )
    for t in schema.tasks:
        if t.type == "binary":
            cols[t.name] = (rng.random(n) < (t.class_ratio or (50, 50))[1] / 100).astype(np.int64)
        else:
            cols[t.name] = rng.standard_normal(n, dtype=np.float32) * (1 if processed else 20) + (
                0 if processed else 100
            )
    df = pd.DataFrame(cols)
    for f in schema.features:
        assert str(df[f.name].dtype) == (
            ("float32" if f.kind == "numerical" else "int64") if processed else RAW_DTYPES[f.kind]
        )
    for t in schema.tasks:
        assert str(df[t.name].dtype) == TASK_DTYPES[t.type]
    return df


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--work", default=None, help="folder for the generated splits (default: a temporary one)")
    p.add_argument("--params", default="params.yaml")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("multitab").setLevel(logging.INFO)
    cfg = load_params(args.params).validation
    data = DatasetConfig(
        source="local",  # row counts: the split fractions of the rows found
        standin=StandinConfig(rows={}, seed=0),
        local=LocalConfig(),
        remote=RemoteConfig(),
        split=SplitConfig(method="ordered", seed=0, val_fraction=0.05, test_fraction=0.05),
        preprocess=PreprocessConfig(),
    )
    with tempfile.TemporaryDirectory(prefix="validate_scale.", dir=args.work) as tmp:
        root = Path(tmp)
        rng = np.random.default_rng(0)
        t0 = time.perf_counter()
        sizes = {"train": N_TRAIN, "val": N_OTHER, "test": N_OTHER}
        meta_rows = {}
        for kind in ("splits", "processed"):
            (root / kind).mkdir()
            for split, n in sizes.items():
                _frame(n, rng, kind == "processed").to_parquet(root / kind / f"{split}.parquet", index=False)
                meta_rows[split] = n
        schema = get_schema("higgs")
        write_json(
            root / "processed" / "meta.json",
            {
                "dataset": "higgs",
                "features": [
                    {
                        "name": f.name,
                        "kind": f.kind,
                        "cardinality": (f.cardinality + 1) if f.cardinality else None,
                    }
                    for f in schema.features
                ],
                "tasks": [{"name": t.name, "type": t.type, "n_classes": t.n_classes} for t in schema.tasks],
                "source": "standin",
                "standin": True,
                "n_rows": meta_rows,
                "target_stats": {},
                "inputs": {},
            },
        )
        print(f"built {sum(sizes.values()):,} rows x 29 columns twice in {time.perf_counter() - t0:.1f} s")
        for stage in ("validate_raw", "validate_processed"):
            t0 = time.perf_counter()
            if stage == "validate_raw":
                out = validate_raw(
                    root / "splits", schema, data, cfg, context_dir=root / "gx", report_dir=root / "reports"
                )
            else:
                out = validate_processed(
                    root / "processed", cfg, context_dir=root / "gx", report_dir=root / "reports"
                )
            report(stage, out, time.perf_counter() - t0)
            if not out.success:
                print(out.summary())
                raise SystemExit(f"{stage}: the generated data should pass")
        # The failure path at scale: two bad values deep in the 11 M-row split must be found and named.
        train = pd.read_parquet(root / "splits" / "train.parquet")
        train.loc[10_999_990, "lepton_pT"] = np.nan
        train.loc[5_000_000, "m_jj"] = np.inf
        train.to_parquet(root / "splits" / "train.parquet", index=False)
        del train
        t0 = time.perf_counter()
        out = validate_raw(
            root / "splits", schema, data, cfg, context_dir=root / "gx", report_dir=root / "reports"
        )
        report("validate_raw (corrupted train)", out, time.perf_counter() - t0)
        print(out.summary())
        text = out.summary()
        assert "10999990 (lepton_pT=nan)" in text and "5000000 (m_jj=inf)" in text, text


def report(stage: str, out: Outcome, seconds: float) -> None:
    per = ", ".join(f"{s.split} {s.n_rows:,} rows {s.seconds:.1f} s" for s in out.splits.values())
    print(f"{stage}: {seconds:.1f} s in all (read + hash + GX + Data Docs); GX per split: {per}")
    verdict = "UNDER" if seconds < 120 else "OVER"
    print(f"{stage}: {verdict} the 2-minute bar for the whole stage with an {N_TRAIN:,}-row train split")


if __name__ == "__main__":
    main()
