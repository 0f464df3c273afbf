"""The `icl` stage's records as the report reads them: results/icl/<dataset>/<model>/seed<k>/metrics.json
(multitab.icl.run.evaluate), by (dataset, model), seeds in order. Reads JSON only (no torch)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LABELS = {"orion_msp": "Orion-MSP", "tabicl": "TabICL"}  # the tables' row names
PRETRAINED = "pretrained, no training on this dataset"


def read_records(folder: str | Path | None) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Every record under `folder` (an absent folder or None: none)."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    if folder is None or not Path(folder).is_dir():
        return out
    for path in sorted(Path(folder).glob("*/*/seed*/metrics.json")):
        try:
            record = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not JSON ({e}); re-run the icl stage") from None
        for key in ("dataset", "model", "status", "test", "checkpoints"):
            if key not in record:
                raise ValueError(f"{path}: key {key!r} missing; re-run the icl stage")
        out.setdefault((record["dataset"], record["model"]), []).append(record)
    return out
