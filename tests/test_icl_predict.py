"""Predicting with the pretrained in-context models on random-weight checkpoints written in their released
formats: context sampling, fixed seeded test chunks, Orion-MSP's ensemble, TabICL through its package.
Random weights: these check plumbing and determinism, never accuracy."""

from __future__ import annotations

import numpy as np
import pytest

from _icl_tiny import TINY_ORION, orion_state, tabicl_file
from multitab.icl import context, tabicl_model
from multitab.icl.orion_msp import from_checkpoint

pytestmark = pytest.mark.usefixtures("one_torch_thread")



def _orion(memory: str = "reference"):
    return from_checkpoint({"config": TINY_ORION, "state_dict": orion_state()}, memory=memory)


def _data(n_train=40, n_test=11, n_features=4, n_classes=3, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n_train, n_features)), np.arange(n_train) % n_classes,
            rng.normal(size=(n_test, n_features)))


def test_context_rows_are_a_seeded_sample():
    assert context.context_rows(5, 10, seed=0).tolist() == [0, 1, 2, 3, 4]
    rows = context.context_rows(100, 10, seed=3)
    assert len(set(rows.tolist())) == 10 and rows.tolist() == sorted(rows.tolist())
    assert np.array_equal(rows, context.context_rows(100, 10, seed=3))
    assert not np.array_equal(rows, context.context_rows(100, 10, seed=4))


def test_scored_rows_are_a_seeded_sample_per_split():
    assert context.eval_rows(5, 10, seed=0, split="test").tolist() == [0, 1, 2, 3, 4]
    assert context.eval_rows(7, None, seed=0, split="test").tolist() == list(range(7))
    rows = context.eval_rows(100, 10, seed=3, split="test")
    assert len(set(rows.tolist())) == 10 and rows.tolist() == sorted(rows.tolist())
    assert np.array_equal(rows, context.eval_rows(100, 10, seed=3, split="test"))
    assert not np.array_equal(rows, context.eval_rows(100, 10, seed=4, split="test"))
    assert not np.array_equal(rows, context.eval_rows(100, 10, seed=3, split="val"))
    with pytest.raises(ValueError, match="max_rows=0"):
        context.eval_rows(100, 0, seed=3, split="test")


@pytest.mark.parametrize(("memory", "chunking_matters"), [("reference", True), ("split", False)])
def test_chunks_fix_the_numbers(memory, chunking_matters):
    model = _orion(memory)
    x, y, x_test = _data()
    run = lambda chunk, seed: context.predict_in_chunks(model, x, y, x_test, chunk_size=chunk, seed=seed)  # noqa: E731
    first = run(4, 0)
    assert first.shape == (11, 3) and np.array_equal(first, run(4, 0))
    assert np.allclose(first, run(11, 0), atol=1e-5) != chunking_matters
    assert np.allclose(first, run(4, 1), atol=1e-5) != chunking_matters


def test_orion_ensemble_gives_probabilities_and_repeats():
    x, y, x_test = _data()
    ensemble = context.OrionMSPEnsemble(_orion("split"), n_estimators=4, seed=0, chunk_size=8).fit(x)
    proba = ensemble.predict_proba(y, {"test": x_test})["test"]
    assert proba.shape == (11, 3) and np.allclose(proba.sum(axis=1), 1)
    assert np.array_equal(proba, ensemble.predict_proba(y, {"test": x_test})["test"])
    single = context.OrionMSPEnsemble(_orion("split"), n_estimators=1, seed=0, chunk_size=8).fit(x)
    assert not np.allclose(single.predict_proba(y, {"test": x_test})["test"], proba, atol=1e-4)


def test_context_rows_none_is_every_training_row():
    """`context_size: null` (the gpu profile, the released wrappers): the whole training set, in order."""
    assert context.context_rows(7, None, seed=0).tolist() == list(range(7))


@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_tabicl_from_a_local_checkpoint(tmp_path, kind):
    path, pin = tabicl_file(tmp_path, regression=kind == "regressor")
    x, y, x_test = _data(n_train=30, n_test=5)
    if kind == "regressor":
        y = x[:, 0] * 2.0
    estimator, found = tabicl_model.build(kind, path=path, sha256=pin, n_estimators=2, seed=0)
    out = tabicl_model.predict(estimator, x, y, x_test)
    assert found == pin and np.isfinite(out).all()
    assert out.shape == ((5, 3) if kind == "classifier" else (5,))
    again, _ = tabicl_model.build(kind, path=path, sha256=pin, n_estimators=2, seed=0)
    assert np.allclose(tabicl_model.predict(again, x, y, x_test), out)
    with pytest.raises(ValueError, match="expected sha256"):
        tabicl_model.build(kind, path=path, sha256="f" * 64, n_estimators=2, seed=0)
