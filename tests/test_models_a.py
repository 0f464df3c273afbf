"""Models of part A (MultiTab-Net, SAINT, FT-Transformer, TabTransformer), the tokenizer, the registry
and the defaults: shapes, training sanity, determinism, batch-1, masks, batch (in)dependence."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from multitab.datasets.schema import DatasetSchema, Feature, RawColumn, Task
from multitab.models import MODELS, build_model, hyperparameters, model_defaults
from multitab.models.defaults import SELECTED_HPARAMS
from multitab.models.multitab_net import INTER_SAMPLE, MASKS, MultiTabNet, attention_mask
from multitab.models.tokenizer import FeatureTokenizer

torch.set_num_threads(1)


def make_schema(n_num: int = 3, cards: tuple[int, ...] = (4, 3), name: str = "tiny") -> DatasetSchema:
    feats = tuple(Feature(f"n{i}", "numerical") for i in range(n_num)) + tuple(
        Feature(f"c{i}", "categorical", cardinality=c) for i, c in enumerate(cards)
    )
    tasks = (
        Task("b", "binary", column="b"),
        Task("m", "multiclass", column="m", n_classes=3),
        Task("r", "regression", column="r"),
    )
    raw = tuple(RawColumn(f.name, "float", "feature") for f in feats)
    return DatasetSchema(name=name, raw_columns=raw, features=feats, tasks=tasks)


SCHEMA = make_schema()
TINY = {"d_embedding": 8, "n_blocks": 1, "n_heads": 2, "ffn_d_hidden": 16, "head_d_hidden": (16,)}
# (registry name, overrides): every model of part A and MultiTab-Net's inter-sample modes
CASES: list[tuple[str, dict[str, Any]]] = [
    *[("multitab_net", {"inter_sample": m, "mask": "t_t"}) for m in INTER_SAMPLE],
    ("multitab_net", {"multi_token": False, "mask": "f_t", "inter_sample": "attention"}),
    ("saint", {"inter_sample": "attention"}),
    ("saint", {"inter_sample": "per_sample_mixing"}),
    ("ft_transformer", {}),
    ("ft_transformer", {"backbone": "rtdl"}),
    ("tab_transformer", {}),
]
IDS = [f"{n}-{'-'.join(str(v) for v in o.values()) or 'default'}" for n, o in CASES]


def batch(schema: DatasetSchema, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    x_num = torch.randn(n, schema.n_num, generator=g)
    cards = [f.cardinality or 1 for f in schema.features if f.kind == "categorical"]
    x_cat = (
        torch.stack([torch.randint(0, c, (n,), generator=g) for c in cards], 1)
        if cards
        else torch.zeros(n, 0, dtype=torch.long)
    )
    y = {
        "b": torch.randint(0, 2, (n,), generator=g).float(),
        "m": torch.randint(0, 3, (n,), generator=g),
        "r": torch.randn(n, generator=g),
    }
    return x_num, x_cat, y


def loss_fn(out: dict[str, torch.Tensor], y: dict[str, torch.Tensor]) -> torch.Tensor:
    return (
        F.binary_cross_entropy_with_logits(out["b"], y["b"])
        + F.cross_entropy(out["m"], y["m"])
        + F.mse_loss(out["r"], y["r"])
    )


def build(name: str, overrides: dict[str, Any], schema: DatasetSchema = SCHEMA, seed: int = 0) -> Any:
    torch.manual_seed(seed)
    return build_model(name, schema, **{**TINY, **overrides})


@pytest.mark.parametrize(("name", "overrides"), CASES, ids=IDS)
def test_shapes_types_and_gradients(name: str, overrides: dict[str, Any]) -> None:
    for schema in (SCHEMA, make_schema(n_num=0, cards=(5, 2, 3)), make_schema(n_num=4, cards=())):
        model = build(name, overrides, schema)
        x_num, x_cat, y = batch(schema, 10)
        out = model(x_num, x_cat)
        assert list(out) == ["b", "m", "r"]
        assert out["b"].shape == (10,) and out["r"].shape == (10,) and out["m"].shape == (10, 3)
        assert all(v.dtype == torch.float32 for v in out.values())
        loss_fn(out, y).backward()
        missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
        assert not missing, f"parameters without gradient: {missing}"


@pytest.mark.parametrize(("name", "overrides"), CASES, ids=IDS)
def test_overfits_a_batch_of_64(name: str, overrides: dict[str, Any]) -> None:
    # rtdl's init (larger than the authors' N(0, 0.01^2)) keeps this test short
    overrides = {**overrides, "d_embedding": 16, "ffn_d_hidden": 32, "head_d_hidden": (64,), "init": "rtdl"}
    model = build(name, overrides)
    x_num, x_cat, y = batch(SCHEMA, 64)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    model.train()
    first = loss_fn(model(x_num, x_cat), y).item()
    for _ in range(300):
        loss = loss_fn(model(x_num, x_cat), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    last = loss_fn(model(x_num, x_cat), y).item()
    assert last < 0.1 * first, f"loss {first:.3f} -> {last:.3f}"


@pytest.mark.parametrize(("name", "overrides"), CASES, ids=IDS)
def test_deterministic_with_a_seed(name: str, overrides: dict[str, Any]) -> None:
    runs = []
    for _ in range(2):
        model = build(name, {**overrides, "attention_dropout": 0.1, "ffn_dropout": 0.1}, seed=3)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        x_num, x_cat, y = batch(SCHEMA, 16)
        torch.manual_seed(5)
        for _ in range(2):
            loss = loss_fn(model(x_num, x_cat), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        runs.append(model(x_num, x_cat))
    for k in runs[0]:
        assert torch.equal(runs[0][k], runs[1][k])
    other = build(name, overrides, seed=4)
    assert not torch.equal(other(*batch(SCHEMA, 16)[:2])["r"], build(name, overrides, seed=3)(*batch(SCHEMA, 16)[:2])["r"])


@pytest.mark.parametrize(("name", "overrides"), CASES, ids=IDS)
def test_batch_of_one_is_finite(name: str, overrides: dict[str, Any]) -> None:
    model = build(name, {**overrides, "attention_dropout": 0.2, "ffn_dropout": 0.2})
    x_num, x_cat, y = batch(SCHEMA, 1)
    model.train()
    out = model(x_num, x_cat)
    loss = loss_fn(out, y)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    assert all(torch.isfinite(v).all() for v in model(x_num, x_cat).values())


# ---------------------------------------------------------------------------------------------- masks
@pytest.mark.parametrize("mode", MASKS)
@pytest.mark.parametrize("multi_token", [True, False])
def test_masked_attention_weights_are_exactly_zero(mode: str, multi_token: bool) -> None:
    torch.manual_seed(0)
    model = MultiTabNet(schema=SCHEMA, multi_token=multi_token, mask=mode, inter_sample="none", **TINY)
    x_num, x_cat, _ = batch(SCHEMA, 8)
    t = model.n_task_tokens
    tokens = torch.cat([model.task_tokens(8), model.tokenizer(x_num, x_cat)], 1)
    layer = model.feature_layers[0]
    h = layer.attention_norm(tokens)
    y, w = layer.attention(h, model.mask, need_weights=True)  # w: (B, heads, L, L)
    n = tokens.shape[1]
    blocked = torch.zeros(n, n, dtype=torch.bool)
    if mode in ("t_t", "both"):
        blocked[:t, :t] = ~torch.eye(t, dtype=torch.bool)
    if mode in ("f_t", "both"):
        blocked[t:, :t] = True
    assert (w[..., blocked] == 0).all()
    assert (w[..., ~blocked] > 0).all()
    assert (w.diagonal(dim1=-2, dim2=-1)[..., :t] > 0).all()  # a task token attends to itself
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))
    # the fused (SDPA) path computes the same thing as the explicit one
    torch.testing.assert_close(layer.attention(h, model.mask), y, rtol=1e-5, atol=1e-6)
    if mode == "none":
        assert model.mask is None
    mask = attention_mask(t, n - t, mode)
    assert mask is None or torch.equal(torch.isinf(mask), blocked)


@pytest.mark.parametrize("mode", ["t_t", "both", "none", "f_t"])
def test_task_to_task_mask_cuts_the_gradient_between_task_tokens(mode: str) -> None:
    torch.manual_seed(0)
    model = MultiTabNet(schema=SCHEMA, multi_token=True, mask=mode, inter_sample="none", **TINY)
    x_num, x_cat, _ = batch(SCHEMA, 8)
    for i, name in enumerate(model.task_names):
        model.zero_grad()
        model(x_num, x_cat)[name].sum().backward()
        g = model.task_tokens.weight.grad
        assert g is not None and g[i].abs().sum() > 0
        others = torch.cat([g[:i], g[i + 1 :]])
        if mode in ("t_t", "both"):
            assert (others == 0).all(), f"task {name} depends on other task tokens under {mode}"
        else:
            assert others.abs().sum() > 0  # the test can fail: without T->T blocking tasks do interact


# ------------------------------------------------------------------------------ batch (in)dependence
@pytest.mark.parametrize(("name", "overrides"), CASES, ids=IDS)
def test_inter_sample_attention_and_only_it_makes_outputs_batch_dependent(
    name: str, overrides: dict[str, Any]
) -> None:
    model = build(name, {**overrides, "init": "rtdl"}).eval()  # rtdl init: outputs of order 1
    x_num, x_cat, _ = batch(SCHEMA, 12)
    base = model(x_num, x_cat)
    x2 = x_num.clone()
    x2[0] += 3.0
    moved = model(x2, x_cat)
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(1))
    permuted = model(x_num[perm], x_cat[perm])
    batch_dependent = overrides.get("inter_sample") in ("attention", "rope_attention")
    for k in base:
        rest_changed = not torch.allclose(base[k][1:], moved[k][1:], rtol=1e-6, atol=0)
        assert rest_changed == batch_dependent, f"{k}: other rows changed={rest_changed}"
        if not batch_dependent:
            torch.testing.assert_close(permuted[k], base[k][perm], rtol=1e-5, atol=1e-6)


def test_rope_attention_depends_on_batch_order_plain_attention_is_equivariant() -> None:
    x_num, x_cat, _ = batch(SCHEMA, 12)
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(1))
    for mode, equivariant in (("attention", True), ("rope_attention", False)):
        model = build("multitab_net", {"inter_sample": mode, "init": "rtdl"}).eval()
        a, b = model(x_num, x_cat)["r"][perm], model(x_num[perm], x_cat[perm])["r"]
        assert torch.allclose(a, b, rtol=1e-4, atol=0) == equivariant


# --------------------------------------------------------------------------------------- tokenizer
def test_tokenizer_matches_per_feature_modules() -> None:
    torch.manual_seed(0)
    tok = FeatureTokenizer(n_num=3, cat_cardinalities=[4, 3], d_embedding=5, cat_bias=True, init="rtdl")
    x_num, x_cat, _ = batch(SCHEMA, 7)
    out = tok(x_num, x_cat)
    assert out.shape == (7, 5, 5)
    for j in range(3):
        torch.testing.assert_close(out[:, j], x_num[:, j : j + 1] * tok.num_weight[j] + tok.num_bias[j])
    assert tok.cat_embedding is not None and tok.cat_bias is not None
    table = tok.cat_embedding.weight
    torch.testing.assert_close(out[:, 3], table[x_cat[:, 0]] + tok.cat_bias[0])
    torch.testing.assert_close(out[:, 4], table[4 + x_cat[:, 1]] + tok.cat_bias[1])
    with pytest.raises(ValueError, match="x_cat must have shape"):
        tok(x_num, x_cat[:, :1])
    with pytest.raises(ValueError, match="at least one feature"):
        FeatureTokenizer(n_num=0, cat_cardinalities=[], d_embedding=4)


# ------------------------------------------------------------------------------ registry & defaults
def test_registry_and_build_model_from_meta() -> None:
    meta = {
        "dataset": "some_bench_config",
        "features": [{"name": "x0", "kind": "numerical", "cardinality": None}]
        + [{"name": "c0", "kind": "categorical", "cardinality": 4}],
        "tasks": [{"name": "t0", "type": "regression", "n_classes": None}],
    }
    model = build_model("multitab_net", meta)
    # MultiTab-Bench configurations use the authors' multitab_bench_example entry
    assert model.inter_sample == "per_sample_mixing" and model.mask is None
    assert build_model("multitab_net", meta, mask="f_t").mask is not None
    with pytest.raises(ValueError, match="no hyperparameter"):
        build_model("multitab_net", meta, learning_rat=1e-3)
    with pytest.raises(KeyError, match="unknown model"):
        build_model("nope", meta)
    with pytest.raises(ValueError, match="inter_sample"):
        build_model("multitab_net", meta, inter_sample="rope")


@pytest.mark.parametrize("dataset", [*SELECTED_HPARAMS, "some_bench_config"])
def test_defaults_are_constructor_keywords(dataset: str) -> None:
    for name in MODELS:
        assert set(model_defaults(dataset, name)) <= set(hyperparameters(name)), name


def test_higgs_defaults_reproduce_the_published_configuration() -> None:
    d = model_defaults("higgs", "multitab_net")
    assert d["inter_sample"] == "per_sample_mixing" and d["mask"] == "t_t" and d["multi_token"] is True
    assert model_defaults("acs_income", "multitab_net")["inter_sample"] == "attention"
    assert model_defaults("aliexpress", "multitab_net")["multi_token"] is False
