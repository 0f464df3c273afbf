"""Random-weight checkpoints of the pretrained in-context models in their released formats, for tests of
plumbing only (never a result of those models)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

TINY_ORION = {  # the released config's keys, tiny values
    "max_classes": 4, "embed_dim": 8, "col_num_blocks": 1, "col_nhead": 2, "col_num_inds": 4,
    "row_num_blocks": 1, "row_nhead": 2, "row_num_cls": 2, "icl_num_blocks": 1, "icl_nhead": 2,
    "row_scales": (1, 2), "row_window": 1, "perc_num_latents": 4, "perc_layers": 1,
}


def orion_state(seed: int = 0) -> dict[str, torch.Tensor]:
    """A random state dict of TINY_ORION; every matrix drawn (the released init zeroes output projections)."""
    from multitab.icl.orion_msp import CONFIG_KEYS, OrionMSP

    torch.manual_seed(seed)
    state = OrionMSP(**{CONFIG_KEYS[k]: v for k, v in TINY_ORION.items()}).state_dict()
    for value in state.values():
        if value.is_floating_point() and value.dim() > 1:
            value.normal_(0, 0.3)
    return state


def orion_file(folder: Path) -> tuple[Path, str]:
    path = folder / "orion.ckpt"
    torch.save({"config": TINY_ORION, "state_dict": orion_state()}, path)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def tabicl_file(folder: Path, regression: bool) -> tuple[Path, str]:
    """A random-weight checkpoint of the `tabicl` package's model (classifier, or regressor when `regression`)."""
    from tabicl._model import TabICL

    config = {"max_classes": 0 if regression else 10, "num_quantiles": 9, "embed_dim": 8, "col_num_blocks": 1,
              "col_nhead": 2, "col_num_inds": 4, "row_num_blocks": 1, "row_nhead": 2, "row_num_cls": 2,
              "icl_num_blocks": 1, "icl_nhead": 2}
    torch.manual_seed(0)
    path = folder / ("reg.ckpt" if regression else "cls.ckpt")
    torch.save({"config": config, "state_dict": TabICL(**config).state_dict()}, path)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


ROOT = Path(__file__).resolve().parents[1]
SWITCHES = {"window": "reference", "memory": "split", "links": "seeded", "link_seed": 0}


def icl_section(checkpoints: dict[str, tuple[Path, str] | None], *, datasets: list[str], **over: object) -> dict:
    """params.yaml `icl` for tests: tiny cpu profile; each checkpoint named after its file (hub `Lab/<name>`)."""
    entries = {name: {"hub_repo": f"Lab/{name}", "hub_file": f"{name}.ckpt", "revision": None, "sha256": None}
               for name in checkpoints}
    section = {"models": ["orion_msp", "tabicl"], "datasets": datasets, "seeds": [0], "context_rule": "uniform",
               "device": "cpu", "profile": "auto",
               "profiles": {"cpu": {"context_size": 50, "chunk_size": 16, "eval_rows": None,
                                    "n_estimators": {"orion_msp": 2, "tabicl": 2}},
                            "gpu": {"context_size": None, "chunk_size": None, "eval_rows": None,
                                    "n_estimators": {"orion_msp": 32, "tabicl": 8}}},
               "checkpoints": entries, "orion": dict(SWITCHES), "out": "results/icl"}
    section.update(over)
    return section


def write_icl_params(folder: Path, checkpoints: dict[str, tuple[Path, str] | None], *, datasets: list[str],
                     **over: object) -> tuple[Path, Path]:
    """params.yaml (the repository's, with a test `icl` section) and icl.lock (the files of `checkpoints`
    that are not None, as `make icl-weights` would lock them) in `folder`."""
    import yaml

    from multitab.icl import lock

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["icl"] = icl_section(checkpoints, datasets=datasets, **over)
    params = folder / "params.yaml"
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    entries = {name: lock.LockedCheckpoint(hub_repo=f"Lab/{name}", hub_file=f"{name}.ckpt", revision="0" * 40,
                                           source="hub", path=str(path), sha256=sha, checked_against="first fetch")
               for name, c in checkpoints.items() if c is not None for path, sha in [c]}
    lock.write(folder / "icl.lock", entries)
    return params, folder / "icl.lock"
