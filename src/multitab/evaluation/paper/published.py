"""The paper's published numbers (Tables 2–10), shipped with the package in `published/`.

The values as the paper prints them, kept in the package so that a fresh clone can put the published value
beside ours (`tests/test_aggregate_delta_m.py` checks that Table 3's Δm row follows from its own metrics).
Values are as printed: metrics in percent, Δm in percent, MSE in target units, parameters and FLOPs in
millions, p-values.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

FOLDER = Path(__file__).with_name("published")


@dataclass(frozen=True)
class Published:
    table2: dict[tuple[str, str, str], float]  # (task_tokens, attention_mask, dataset) -> Δm
    table3: dict[tuple[str, str, str], float]  # (dataset, task | "delta_m", label) -> value
    table4: dict[tuple[str, str], tuple[float, float]]  # (label, dataset) -> (params M, FLOPs M)
    tables5to7: dict[tuple[str, str, str], tuple[float, float]]  # (dataset, task | "delta_m", label) -> (μ, σ)
    table8: dict[tuple[str, str], float]  # (dataset, baseline label) -> p
    table9: dict[tuple[str, str], float]  # (dataset | "global", baseline label) -> p
    table10: dict[tuple[str, str], tuple[float, float | None]]  # (label, task | "average") -> (μ, σ)


def _read(name: str, folder: Path) -> pd.DataFrame:
    path = folder / name
    try:
        return pd.read_csv(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: published reference table missing from the package") from None


def load_published(folder: str | Path = FOLDER) -> Published:
    folder = Path(folder)
    t2 = _read("paper_table2_ablation.csv", folder)
    table2 = {}
    for _, r in t2.iterrows():
        for col in t2.columns:
            if col.endswith("_delta_m"):
                table2[(str(r.task_tokens), str(r.attention_mask), col.removesuffix("_delta_m"))] = float(r[col])
    t3 = _read("paper_table3_test_results.csv", folder)
    labels = [c for c in t3.columns if c not in ("dataset", "task", "metric")]
    table3 = {(str(r.dataset), str(r.task), lab): float(r[lab]) for _, r in t3.iterrows() for lab in labels}
    t4 = _read("paper_table4_params_flops.csv", folder)
    table4 = {(str(r.model), str(r.dataset)): (float(r.params_millions), float(r.flops_millions))
              for _, r in t4.iterrows()}
    t57 = _read("paper_tables5to7_std.csv", folder)
    tables5to7 = {(str(r.dataset), str(r.task), str(r.model)): (float(r["mean"]), float(r["std"]))
                  for _, r in t57.iterrows()}
    sig = _read("paper_significance_tables8_9.csv", folder)
    base_labels = [c for c in sig.columns if c not in ("test", "dataset")]
    table8: dict[tuple[str, str], float] = {}
    table9: dict[tuple[str, str], float] = {}
    for _, r in sig.iterrows():
        target = table8 if r.test == "t_test_one_sided" else table9
        for lab in base_labels:
            target[(str(r.dataset), lab)] = float(r[lab])
    t10 = _read("paper_table10_higgs_mse.csv", folder)
    table10 = {(str(r.model), str(r.task)): (float(r.mse_mean), None if pd.isna(r.mse_std) else float(r.mse_std))
               for _, r in t10.iterrows()}
    return Published(table2, table3, table4, tables5to7, table8, table9, table10)
