"""A user's own model in the tests: the example package (examples/own_model), broken models of a package written
into a test's folder, and a small project whose params.yaml declares one (params.yaml `models:`)."""

from __future__ import annotations

import shutil
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from multitab.config import read_yaml
from multitab.registry import declare

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "own_model"  # its folder goes on the Python path: package own_model
BASE = read_yaml(ROOT / "params.yaml")
ENTRY = yaml.safe_load((EXAMPLE / "params_entry.yaml").read_text())
KEYWORDS = ENTRY["models"]["two_expert"]["hparams"]["model"]
OPTIM = ENTRY["models"]["two_expert"]["hparams"]["optim"]
PACKAGES = ("own_model", "broken_nets")

BROKEN = textwrap.dedent('''
    """Models that break the model contract, one way each."""

    import torch
    from torch import nn

    from multitab.models.base import MultitaskModel


    class Fine(MultitaskModel):
        def __init__(self, *, schema, width: int) -> None:
            super().__init__(schema=schema)
            self.body = nn.Linear(schema.n_num + schema.n_cat, width)
            self.head = nn.Linear(width, sum(self.d_out))

        def forward(self, x_num, x_cat):
            x = torch.cat([x_num, x_cat.float()], dim=1)
            return self.split_outputs(self.head(torch.relu(self.body(x))))


    class WrongShape(Fine):
        def forward(self, x_num, x_cat):
            out = super().forward(x_num, x_cat)
            out["b"] = out["b"][:, None]  # binary logits (B, 1), not (B,)
            return out


    class TaskMissing(Fine):
        def forward(self, x_num, x_cat):
            out = super().forward(x_num, x_cat)
            del out["r"]
            return out


    class SelfTrained:
        """Trains itself, as XGBoost: fit / predict / save, the run's settings as keywords."""

        def __init__(self, *, schema, shrink: float, seed: int, early_stopping_rounds: int, device: str,
                     n_threads: int) -> None:
            self.schema, self.shrink, self.means = schema, shrink, {}

        def fit(self, x_num, x_cat, targets, *, x_num_val, x_cat_val, targets_val):
            self.means = {k: float(v.mean()) * self.shrink for k, v in targets.items()}

        def predict(self, x_num, x_cat):
            n = len(x_num)
            return {t.name: torch.zeros(n, t.n_classes).numpy() if t.type == "multiclass" else
                    torch.full((n,), self.means.get(t.name, 0.0)).numpy() for t in self.schema.tasks}

        def save(self, folder):
            folder.mkdir(parents=True, exist_ok=True)


    class NoGradient(Fine):
        def __init__(self, *, schema, width: int) -> None:
            super().__init__(schema=schema, width=width)
            self.unused = nn.Linear(width, width)  # on no path to an output
''')


def packages_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A fixture's body: the example's folder and `tmp_path`/packages (holding broken_nets) on the Python path, each
    test importing them afresh; the registry without declared models afterwards. Yields the packages folder."""
    packages = tmp_path / "packages"
    (packages / "broken_nets").mkdir(parents=True)
    (packages / "broken_nets" / "__init__.py").write_text("")
    (packages / "broken_nets" / "nets.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(packages))
    forget()
    yield packages
    forget()
    declare({})


def forget() -> None:
    """The test packages out of sys.modules (the next import finds them where the path says now)."""
    for name in [m for m in sys.modules if m.split(".")[0] in PACKAGES]:
        del sys.modules[name]


def declaration(cls: str = "own_model.nets:TwoExpertMMoE", label: str = "Two-expert MMoE",
                hparams: Any = None, **extra: Any) -> dict[str, Any]:
    return {"class": cls, "label": label, "hparams": {"model": KEYWORDS, "optim": OPTIM} if hparams is None else
            hparams, **extra}


def project(tmp_path: Path, models: dict[str, Any], run_models: list[str], **groups: Any) -> Path:
    """A project in `tmp_path`/project: the repository's hyperparameter files, params.yaml with `models` declared
    and one run group `real` of `run_models` on acs_income (its processed folder named directly), seed 0, plus
    `groups`; returns its params file."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copytree(ROOT / "hparams", root / "hparams")
    raw = {"protocol": BASE["protocol"], "models": models, "train": BASE["train"],
           "runs": {"real": {"data": {"datasets": ["acs_income"]}, "models": run_models, "seeds": [0],
                             "train": {}}, **groups}}
    (root / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return root / "params.yaml"
