"""Orion-MSP's context encoded once (multitab.icl.orion_encoding, context.OrionMSPEnsemble's default) equals the
whole network recomputed on the context and every chunk (`reuse=False`), across chunks and across the tasks of
a dataset, with random weights in small shapes of the released architecture (float32, CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from _icl_tiny import TINY_ORION, orion_state
from multitab.icl import context
from multitab.icl.orion_msp import CONFIG_KEYS, OrionMSP

VARIANTS = {  # over TINY_ORION (max_classes 4)
    "contiguous": {},
    "learned_groups_random_links": {"row_group_mode": "pma", "row_num_random": 2, "row_scales": (1, 2, 4)},
    "no_memory": {"perc_num_latents": 0},
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(variant: str, memory: str, window: str = "reference") -> OrionMSP:
    config = {**TINY_ORION, **VARIANTS[variant]}
    torch.manual_seed(0)
    model = OrionMSP(**{CONFIG_KEYS[k]: v for k, v in config.items()}, memory=memory, window=window)  # type: ignore[arg-type]
    state = model.state_dict()
    reference = orion_state()
    for name, value in state.items():  # the tiny random weights where shapes agree, drawn otherwise
        if name in reference and reference[name].shape == value.shape:
            value.copy_(reference[name])
        elif value.is_floating_point() and value.dim() > 1:
            value.normal_(0, 0.3)
    return model.eval()


def _table(n_train=45, n_sets=(13, 9), n_features=6, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_train, n_features))
    x[:, 2] = rng.integers(0, 3, size=n_train)  # a categorical code
    return x, {f"set{i}": rng.normal(size=(n, n_features)) for i, n in enumerate(n_sets)}


@pytest.mark.parametrize(("variant", "memory"),
                         [(v, "split") for v in sorted(VARIANTS)] + [("contiguous", "reference")])
def test_reused_encoding_equals_the_recomputed_network_across_chunks_and_tasks(variant, memory):
    """One ensemble fitted once predicts two tasks (2 and 6 classes: the second beyond max_classes, through
    the class hierarchy) on two sets, keeping the sets' encodings between tasks; each equals a fresh ensemble
    that runs the whole network on the context and each chunk."""
    model = _model(variant, memory)
    x, sets = _table()
    kept = context.OrionMSPEnsemble(model, n_estimators=2, seed=1, chunk_size=4).fit(x)
    for n_classes in (2, 6):
        y = np.arange(len(x)) % n_classes
        reused = kept.predict_proba(y, sets)
        recomputed = context.OrionMSPEnsemble(model, n_estimators=2, seed=1, chunk_size=4, reuse=False).fit(x)
        for name, proba in recomputed.predict_proba(y, sets).items():
            assert proba.shape == (len(sets[name]), n_classes)
            np.testing.assert_allclose(reused[name], proba, rtol=0, atol=1e-5, err_msg=f"{n_classes} classes, {name}")
    assert kept._rows  # the sets' encodings were kept for the next task


def test_split_memory_makes_the_chunk_size_irrelevant_and_reference_memory_does_not():
    """The reason the reuse is exact under `split` only in part under `reference`: there a test row's
    prediction depends on the other rows of its chunk (docs/deviations.md D21)."""
    x, sets = _table()
    y = np.arange(len(x)) % 3
    for memory, matters in (("split", False), ("reference", True)):
        model = _model("contiguous", memory)
        small = context.OrionMSPEnsemble(model, n_estimators=2, seed=0, chunk_size=3).fit(x).predict_proba(y, sets)
        whole = context.OrionMSPEnsemble(model, n_estimators=2, seed=0, chunk_size=50).fit(x).predict_proba(y, sets)
        assert np.allclose(small["set0"], whole["set0"], atol=1e-5) != matters, memory


def test_the_paper_window_reuses_too():
    model = _model("contiguous", "split", window="paper")
    x, sets = _table()
    y = np.arange(len(x)) % 2
    reused = context.OrionMSPEnsemble(model, n_estimators=2, seed=0, chunk_size=5).fit(x).predict_proba(y, sets)
    recomputed = context.OrionMSPEnsemble(model, n_estimators=2, seed=0, chunk_size=5, reuse=False).fit(x)
    np.testing.assert_allclose(reused["set1"], recomputed.predict_proba(y, sets)["set1"], rtol=0, atol=1e-5)
