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
