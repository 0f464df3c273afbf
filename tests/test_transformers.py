"""The transformer models (MultiTab-Net, SAINT, FT-Transformer, TabTransformer) and the tokenizer:
attention masks, which inputs make outputs batch dependent, the tokenizer against per-feature modules.
The contract every model keeps is tests/test_model_contract.py."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from _models_tiny import CASES, IDS, SCHEMA, TINY, batch, build
from multitab.models.multitab_net import MASKS, MultiTabNet, attention_mask
from multitab.models.tokenizer import FeatureTokenizer

torch.set_num_threads(1)

TRANSFORMERS = ("multitab_net", "saint", "ft_transformer", "tab_transformer")
TRANSFORMER_CASES = [c for c in CASES if c[0] in TRANSFORMERS]
TRANSFORMER_IDS = [i for c, i in zip(CASES, IDS) if c[0] in TRANSFORMERS]


# ---------------------------------------------------------------------------------------------- masks
@pytest.mark.parametrize("mode", MASKS)
@pytest.mark.parametrize("multi_token", [True, False])
def test_masked_attention_weights_are_exactly_zero(mode: str, multi_token: bool) -> None:
    torch.manual_seed(0)
    model = MultiTabNet(schema=SCHEMA, multi_token=multi_token, mask=mode, inter_sample="none", **TINY["multitab_net"])
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
    model = MultiTabNet(schema=SCHEMA, multi_token=True, mask=mode, inter_sample="none", **TINY["multitab_net"])
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
@pytest.mark.parametrize(("name", "overrides"), TRANSFORMER_CASES, ids=TRANSFORMER_IDS)
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
    # SAINT wraps one MultiTab-Net per task: ask every module
    batch_dependent = any(getattr(m, "inter_sample", None) in ("attention", "rope_attention") for m in model.modules())
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
