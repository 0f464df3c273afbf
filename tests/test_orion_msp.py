"""Orion-MSP: our model against the released reference implementation (random weights, float32, CPU), and
the reference's two defects as switches (docs/deviations.md)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from multitab.icl.orion_blocks import block_sparse_mask
from multitab.icl.orion_msp import OrionMSP, from_checkpoint

# the reference's model files, installed by `make test` (Makefile: REFERENCE) from PyPI tabtune==0.2.1
REFERENCE = Path(__file__).resolve().parents[1] / ".cache/reference/tabtune/tabtune/models/orion_msp/model"

TINY = {  # the released config's keys, tiny values
    "max_classes": 5, "embed_dim": 16, "col_num_blocks": 1, "col_nhead": 2, "col_num_inds": 4,
    "row_num_blocks": 4, "row_nhead": 2, "row_num_cls": 2, "row_rope_base": 100000, "icl_num_blocks": 2,
    "icl_nhead": 2, "ff_factor": 2, "dropout": 0.0, "activation": "gelu", "norm_first": True,
    "row_num_global": 2, "row_scales": (1, 2, 4), "row_window": 1, "row_num_random": 0,
    "row_group_mode": "contiguous", "perc_num_latents": 4, "perc_layers": 1,
}

pytestmark = pytest.mark.usefixtures("one_torch_thread")



def _reference_package() -> ModuleType:
    """The reference's model folder as a package of its own (tabtune's __init__ imports far more)."""
    if not (REFERENCE / "orion_msp.py").is_file():
        pytest.skip(f"the reference implementation is not installed at {REFERENCE} (`make test` installs it "
                    "with pip from PyPI: tabtune==0.2.1 --no-deps; it needs network access to PyPI once)")
    pytest.importorskip("einops", reason="the reference's rope.py imports einops (pinned in pyproject's dev extra)")
    name = "_orion_msp_reference"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REFERENCE / "__init__.py",
                                                      submodule_search_locations=[str(REFERENCE)])
        assert spec is not None and spec.loader is not None
        package = importlib.util.module_from_spec(spec)
        sys.modules[name] = package
        spec.loader.exec_module(package)
    return importlib.import_module(f"{name}.orion_msp")


def _randomise(model: torch.nn.Module, seed: int) -> None:
    """Every weight random (the reference zero-initialises its output projections)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("rope.freqs"):
                continue
            noise = torch.randn(p.shape, generator=generator) * 0.3
            p.copy_(1.0 + noise if name.split(".")[-2].startswith(("ln", "norm", "q_norm", "kv_norm", "out_ln"))
                    and name.endswith("weight") else noise)


def _table(seed: int, n_rows: int, n_features: int, n_classes: int, n_train: int, batch: int = 1):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, n_rows, n_features, generator=generator)
    y = torch.arange(n_train).remainder(n_classes)[torch.randperm(n_train, generator=generator)]
    return x, y.expand(batch, n_train).float()


def _checkpoint(config: dict, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    ours = OrionMSP(**{k: v for k, v in _ours_kwargs(config).items()})
    _randomise(ours, seed)
    return {"config": dict(config), "state_dict": ours.state_dict()}


def _ours_kwargs(config: dict) -> dict:
    from multitab.icl.orion_msp import CONFIG_KEYS

    return {CONFIG_KEYS[k]: v for k, v in config.items()}


SHAPES = [  # (config changes, rows, features, classes, training rows, tables)
    ({}, 24, 5, 2, 16, 1),
    ({"row_num_random": 2}, 30, 9, 3, 20, 2),
    ({"row_group_mode": "pma", "max_classes": 4}, 18, 7, 4, 12, 1),
    ({"perc_num_latents": 0, "row_scales": (1,)}, 20, 3, 2, 15, 1),
    ({"max_classes": 3}, 30, 4, 7, 24, 1),  # more classes than the decoder: the hierarchy, one level
    ({"max_classes": 3}, 40, 4, 11, 33, 2),  # two levels (11 -> groups of 4, 4, 3 -> 2 + 2)
]


@pytest.mark.parametrize(("changes", "n_rows", "n_features", "n_classes", "n_train", "batch"), SHAPES)
def test_logits_equal_the_reference(changes, n_rows, n_features, n_classes, n_train, batch):
    package = _reference_package()
    config = {**TINY, **changes}
    checkpoint = _checkpoint(config, seed=n_rows)
    reference = package.OrionMSP(**config)
    reference.load_state_dict(checkpoint["state_dict"])
    reference.eval()
    ours = from_checkpoint(checkpoint, window="reference", memory="reference", links="reference")
    x, y = _table(n_rows, n_rows, n_features, n_classes, n_train, batch)
    with torch.no_grad():
        torch.manual_seed(7)  # the reference draws its random links from the global RNG
        expected = reference(x, y, return_logits=True)
        torch.manual_seed(7)
        got = ours(x, y)
    assert got.shape == expected.shape == (batch, n_rows - n_train, n_classes)
    assert torch.allclose(got, expected, atol=1e-5, rtol=0), (got - expected).abs().max()


def test_window_does_nothing_under_reference_and_something_under_paper():
    base = _checkpoint(TINY, seed=1)
    x, y = _table(1, 20, 12, 2, 14)
    out = {}
    for mode in ("reference", "paper"):
        for window in (1, 4):
            checkpoint = {"config": {**TINY, "row_window": window}, "state_dict": base["state_dict"]}
            with torch.no_grad():
                out[mode, window] = from_checkpoint(checkpoint, window=mode)(x, y)
    assert torch.equal(out["reference", 1], out["reference", 4])
    assert not torch.allclose(out["paper", 1], out["paper", 4], atol=1e-4)
    # what a feature token sees: specials, itself, and (paper only) its window
    for mode, keys in (("reference", 6 + 1), ("paper", 6 + 9)):
        mask = block_sparse_mask(30, 6, 4, 0, window_mode=mode, generator=None)
        assert int(mask[18].sum()) == keys


@pytest.mark.parametrize(("memory", "independent"), [("reference", False), ("split", True)])
def test_a_test_rows_prediction_and_the_other_test_rows(memory, independent):
    model = from_checkpoint(_checkpoint(TINY, seed=2), memory=memory)
    x, y = _table(2, 24, 5, 2, 16)
    with torch.no_grad():
        together = model(x, y)[0, 0]  # the first test row beside 7 others
        alone = model(x[:, :17], y)[0, 0]  # the same row with no other test row
    assert torch.allclose(together, alone, atol=1e-6) == independent


def test_seeded_links_repeat_and_ignore_the_global_rng():
    model = from_checkpoint(_checkpoint({**TINY, "row_num_random": 2}, seed=3), links="seeded", link_seed=5)
    x, y = _table(3, 20, 9, 2, 14)
    with torch.no_grad():
        torch.manual_seed(0)
        first = model(x, y)
        torch.manual_seed(1)
        second = model(x, y)
    assert torch.equal(first, second)
    other = from_checkpoint(_checkpoint({**TINY, "row_num_random": 2}, seed=3), links="seeded", link_seed=6)
    with torch.no_grad():
        assert not torch.allclose(other(x, y), first, atol=1e-5)


def test_bad_checkpoint_is_refused_with_its_keys():
    with pytest.raises(ValueError, match="'config' dict and a 'state_dict'"):
        from_checkpoint({"model": {}})
    with pytest.raises(ValueError, match="does not know"):
        from_checkpoint({"config": {"embed_dimm": 3}, "state_dict": {}})


@pytest.mark.parametrize("switch", [{"window": "paper"}, {"memory": "split"}])
def test_the_fixed_switches_depart_from_the_reference(switch):
    package = _reference_package()
    checkpoint = _checkpoint(TINY, seed=4)
    reference = package.OrionMSP(**TINY)
    reference.load_state_dict(checkpoint["state_dict"])
    x, y = _table(4, 24, 9, 2, 16)
    with torch.no_grad():
        expected = reference.eval()(x, y, return_logits=True)
        got = from_checkpoint(checkpoint, **switch)(x, y)
    assert (got - expected).abs().max() > 1e-3
