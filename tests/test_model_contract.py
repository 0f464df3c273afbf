"""The model contract (models/base.py), checked for every registered torch model and the variants that
change its code path: output names, shapes and dtypes, a gradient for every parameter, overfitting one
batch, determinism under a seed, and a training batch of one row.

Every torch model of the registry (multitab.models.MODELS) must have a tiny configuration in ``TINY``:
a new model without one fails here. Models that are not torch modules have their own test file
(``OWN_TESTS``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from _models_tiny import (
    CASES,
    IDS,
    OWN_TESTS,
    SCHEMA,
    TINY,
    TORCH_MODELS,
    batch,
    build,
    dropout,
    loss_and_outputs,
    make_schema,
    predict,
)
from multitab.models import MODELS, hyperparameters

torch.set_num_threads(1)


def test_every_registered_model_is_covered() -> None:
    assert set(TORCH_MODELS) | set(OWN_TESTS) == set(MODELS)
    missing = sorted(set(TORCH_MODELS) - set(TINY))
    assert not missing, f"registered torch models without a tiny configuration in TINY: {missing}"
    for name, config in TINY.items():
        assert set(config) <= set(hyperparameters(name)), name


@pytest.mark.parametrize(("name", "overrides"), CASES, ids=IDS)
def test_shapes_types_and_gradients(name: str, overrides: dict[str, Any]) -> None:
    # mixed features, categorical only, numerical only
    for schema in (SCHEMA, make_schema(n_num=0, cards=(5, 2, 3)), make_schema(n_num=4, cards=())):
        model = build(name, overrides, schema)
        x_num, x_cat, y = batch(schema, 10)
        loss, out = loss_and_outputs(model, x_num, x_cat, y)
        assert list(out) == ["b", "m", "r"]
        assert out["b"].shape == (10,) and out["r"].shape == (10,) and out["m"].shape == (10, 3)
        assert all(v.dtype == torch.float32 for v in out.values())
        loss.backward()
        missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
        assert not missing, f"parameters without gradient: {missing}"
        model.eval()
        pred = predict(model, x_num, x_cat, (x_num, x_cat, y))
        assert {k: tuple(v.shape) for k, v in pred.items()} == {k: tuple(v.shape) for k, v in out.items()}


@pytest.mark.parametrize(("name", "overrides"), CASES, ids=IDS)
def test_overfits_a_batch_of_64(name: str, overrides: dict[str, Any]) -> None:
    if "init" in hyperparameters(name):  # rtdl's init (larger than the authors' N(0, 0.01^2)) keeps this short
        overrides = {**overrides, "d_embedding": 16, "ffn_d_hidden": 32, "head_d_hidden": (64,), "init": "rtdl"}
    model = build(name, overrides)
    x_num, x_cat, y = batch(SCHEMA, 64)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3 if "init" in overrides else 3e-3)
    model.train()
    first = loss_and_outputs(model, x_num, x_cat, y)[0].item()
    for _ in range(300):
        loss, _ = loss_and_outputs(model, x_num, x_cat, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    # The training loss (batch statistics; eval-mode BatchNorm lags behind weights that move this fast).
    with torch.no_grad():
        last = loss_and_outputs(model, x_num, x_cat, y)[0].item()
    assert last < 0.1 * first, f"{name}: loss {first:.3f} -> {last:.3f}"


@pytest.mark.parametrize(("name", "overrides"), CASES, ids=IDS)
def test_deterministic_with_a_seed(name: str, overrides: dict[str, Any]) -> None:
    x_num, x_cat, y = batch(SCHEMA, 16)
    runs = []
    for _ in range(2):
        model = build(name, {**overrides, **dropout(name, 0.1)}, seed=3)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        torch.manual_seed(5)
        for _ in range(2):
            loss, _ = loss_and_outputs(model, x_num, x_cat, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        runs.append(predict(model, x_num, x_cat, (x_num, x_cat, y)))
    for k in runs[0]:
        assert torch.equal(runs[0][k], runs[1][k])
    # and the seed matters
    other, same = build(name, overrides, seed=4).eval(), build(name, overrides, seed=3).eval()
    ctx = (x_num, x_cat, y)
    assert not torch.equal(predict(other, x_num, x_cat, ctx)["r"], predict(same, x_num, x_cat, ctx)["r"])


@pytest.mark.parametrize(("name", "overrides"), CASES, ids=IDS)
def test_batch_of_one_is_finite(name: str, overrides: dict[str, Any]) -> None:
    model = build(name, {**overrides, **dropout(name, 0.2)})
    x_num, x_cat, y = batch(SCHEMA, 1)
    model.train()
    loss, out = loss_and_outputs(model, x_num, x_cat, y)  # training mode, one row
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(v).all() for v in out.values())
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    pred = predict(model, x_num, x_cat, batch(SCHEMA, 8, seed=1))
    assert all(torch.isfinite(v).all() and v.shape[0] == 1 for v in pred.values())
