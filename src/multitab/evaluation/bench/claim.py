"""The claim a study's report tests, kept with the report: `claim.json` (the model under test, its rivals, α, the
baseline and every one's label), so that a record regenerates naming the model it tested, a user's own model
(params.yaml `models:`) included, in a process that has not read params.yaml. A folder without the file (the
records from before it) is the paper's claim: multitab.evaluation.bench.numbers.StudySettings' defaults."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from multitab.evaluation.bench.numbers import StudyError, StudySettings
from multitab.files.io import write_text

CLAIM_FILE = "claim.json"


def write_claim(settings: StudySettings, folder: str | Path) -> Path:
    """`folder`/claim.json of `settings` (what `read_claim` reads back)."""
    models = [settings.model, *settings.rivals, settings.baseline]
    data = {"model": settings.model, "rivals": list(settings.rivals), "alpha": settings.alpha,
            "baseline": settings.baseline, "labels": {m: settings.label(m) for m in models}}
    path = Path(folder) / CLAIM_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n")  # atomic: whole or the one before
    return path


def read_claim(folder: str | Path, settings: StudySettings | None = None) -> StudySettings:
    """`settings` (default StudySettings()) with `folder`/claim.json's claim and labels, when the file is there."""
    settings = settings or StudySettings()
    path = Path(folder) / CLAIM_FILE
    if not path.is_file():
        return settings
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return dataclasses.replace(settings, model=str(data["model"]), rivals=tuple(map(str, data["rivals"])),
                                   alpha=float(data["alpha"]), baseline=str(data["baseline"]),
                                   labels={str(k): str(v) for k, v in data["labels"].items()})
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise StudyError(f"{path}: not a claim this code writes ({type(e).__name__}: {e}); delete it to read the "
                         "record as the paper's claim") from None
