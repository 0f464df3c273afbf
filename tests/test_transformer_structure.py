"""Structural facts of the transformer models that make them compute what the authors' code computes
(docs/deviations.md, "Transformer layers", "Dropout sites"), checked without their code: the FFN
activation, where dropout acts and at which rate, the attention masks, and that the CPU kernels compute
the same function as the module path."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

from _models_tiny import build_authors
from multitab.datasets.schema import DatasetSchema, Feature, RawColumn, Task
from multitab.models.accelerate import accelerate_cpu
from multitab.models.blocks import FeedForward, MixingLayer, PerSampleMixing, SelfAttention
from multitab.models.multitab_net import attention_mask

torch.set_num_threads(1)

FFN_P, ATT_P = 0.3, 0.2
E, H, HEAD = 8, 16, 12  # token width, FFN width, tower width: distinct, so shapes name the site
SIZES = {"d_embedding": E, "n_blocks": 1, "n_heads": 2, "ffn_d_hidden": H, "head_d_hidden": (HEAD,)}


def schema() -> DatasetSchema:
    feats = (Feature("n0", "numerical"), Feature("n1", "numerical"), Feature("c0", "categorical", cardinality=4))
    tasks = (Task("a", "binary", column="a"), Task("b", "regression", column="b"))
    raw = tuple(RawColumn(f.name, "float", "feature") for f in feats)
    return DatasetSchema(name="tiny", raw_columns=raw, features=feats, tasks=tasks)


SCHEMA = schema()
B = 5
N_TOKENS = 2 + 3  # two task tokens + three features (multi_token)


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(B, 2, generator=g), torch.randint(0, 4, (B, 1), generator=g)


def dropout_calls(model: nn.Module) -> list[tuple[str, float, tuple[int, ...]]]:
    """(module name, p, input shape) of every nn.Dropout call in one training forward pass, in order,
    on the plain model (not accelerate_cpu'd: the CPU kernels would fuse the FFN's dropout)."""
    calls: list[tuple[str, float, tuple[int, ...]]] = []
    hooks = []
    for name, m in model.named_modules():
        if isinstance(m, nn.Dropout):
            def hook(mod: nn.Module, args: tuple[Any, ...], _n: str = name) -> None:
                calls.append((_n, mod.p, tuple(args[0].shape)))  # type: ignore[attr-defined]
            hooks.append(m.register_forward_pre_hook(hook))
    model.train()
    model(*inputs())
    for h in hooks:
        h.remove()
    return calls


def build(name: str, **overrides: Any) -> Any:
    torch.manual_seed(0)
    return build_authors(name, SCHEMA, **{**SIZES, "ffn_dropout": FFN_P, "attention_dropout": ATT_P, **overrides})


# ------------------------------------------------------------------------------------------- activation
@pytest.mark.parametrize("name", ["multitab_net", "saint", "ft_transformer", "tab_transformer"])
def test_every_ffn_is_exact_gelu_and_no_transformer_relu(name: str) -> None:
    model = build(name)
    ffns = [m for m in model.modules() if isinstance(m, FeedForward)]
    assert ffns
    for f in ffns:
        assert f.activation == "gelu"
        assert isinstance(f.act, nn.GELU) and f.act.approximate == "none"  # erf form, as nn.GELU()
    assert not any(isinstance(m, nn.ReLU) for m in model.modules())  # the towers' ReLU is functional


@pytest.mark.parametrize(
    ("name", "overrides"),
    [("multitab_net", {"inter_sample": "per_sample_mixing"}), ("multitab_net", {"inter_sample": "attention"}),
     ("saint", {"inter_sample": "per_sample_mixing"}), ("ft_transformer", {}), ("tab_transformer", {})],
)
def test_cpu_kernels_compute_the_module_path(name: str, overrides: dict[str, Any]) -> None:
    model = build(name, ffn_dropout=0.0, attention_dropout=0.0, **overrides).train()
    x = inputs()
    fast = accelerate_cpu(copy.deepcopy(model))(*x)
    ref = model(*x)
    for k in ref:
        torch.testing.assert_close(fast[k], ref[k])
    # and GELU matters: the same model with ReLU FFNs gives other outputs
    for f in model.modules():
        if isinstance(f, FeedForward):
            f.activation, f.act = "relu", nn.ReLU()
    relu = model(*x)
    assert any(not torch.allclose(relu[k], ref[k]) for k in ref)


# -------------------------------------------------------------------------------------------- dropout
def test_multitab_net_dropout_sites_per_sample_mixing() -> None:
    model = build("multitab_net", inter_sample="per_sample_mixing")
    d = N_TOKENS * E
    assert dropout_calls(model) == [
        ("embedding_dropout", FFN_P, (B, N_TOKENS, E)),  # token embeddings, task tokens included
        ("feature_layers.0.attention_output_dropout", FFN_P, (B, N_TOKENS, E)),  # before the residual
        ("feature_layers.0.ffn.drop", FFN_P, (B, N_TOKENS, H)),  # after GELU
        ("sample_layers.0.attention_output_dropout", FFN_P, (B, d)),
        ("sample_layers.0.ffn.drop", FFN_P, (B, H)),
        ("heads.dropout", FFN_P, (B, 2, HEAD)),  # the task towers
    ]
    # the attention weights of the inter-feature layer take att_dropout; the per-sample mixing layer
    # has no dropout of its own (no per-head dropout: the authors' rotary layer has none)
    assert model.feature_layers[0].attention.dropout == ATT_P
    mixing = model.sample_layers[0]
    assert isinstance(mixing, MixingLayer) and isinstance(mixing.attention, PerSampleMixing)
    assert not any(isinstance(m, nn.Dropout) for m in mixing.attention.modules())
    assert not hasattr(mixing.attention, "dropout")


def test_multitab_net_dropout_sites_true_inter_sample_attention() -> None:
    model = build("multitab_net", inter_sample="attention", mask="t_t")
    d = N_TOKENS * E
    assert dropout_calls(model) == [
        ("embedding_dropout", FFN_P, (B, N_TOKENS, E)),
        ("feature_layers.0.attention_output_dropout", FFN_P, (B, N_TOKENS, E)),
        ("feature_layers.0.ffn.drop", FFN_P, (B, N_TOKENS, H)),
        ("sample_layers.0.attention_output_dropout", FFN_P, (1, B, d)),  # the batch is the sequence
        ("sample_layers.0.ffn.drop", FFN_P, (1, B, H)),
        ("heads.dropout", FFN_P, (B, 2, HEAD)),
    ]
    assert isinstance(model.sample_layers[0].attention, SelfAttention)
    assert model.sample_layers[0].attention.dropout == ATT_P


def test_head_dropout_can_differ_from_the_ffn_rate() -> None:
    model = build("multitab_net", head_dropout=0.0)
    assert model.heads.dropout.p == 0.0 and model.embedding_dropout.p == FFN_P


@pytest.mark.parametrize("name", ["saint", "ft_transformer"])
def test_per_task_baselines_have_the_same_sites_per_task(name: str) -> None:
    model = build(name, **({"inter_sample": "per_sample_mixing"} if name == "saint" else {}))
    calls = dropout_calls(model)
    n = 1 + 3  # one [CLS] token + three features
    expected_one = [
        ("embedding_dropout", FFN_P, (B, n, E)),
        ("feature_layers.0.attention_output_dropout", FFN_P, (B, n, E)),
        ("feature_layers.0.ffn.drop", FFN_P, (B, n, H)),
    ]
    if name == "saint":
        expected_one += [
            ("sample_layers.0.attention_output_dropout", FFN_P, (B, n * E)),
            ("sample_layers.0.ffn.drop", FFN_P, (B, H)),
        ]
    expected_one.append(("heads.dropout", FFN_P, (B, 1, HEAD)))
    expected = [(f"models.{t}.{site}", p, shape) for t in ("a", "b") for site, p, shape in expected_one]
    assert calls == expected


def test_tab_transformer_dropout_is_on_the_residual_path_and_the_tower() -> None:
    model = build("tab_transformer")
    calls = dropout_calls(model)
    one = [
        ("layers.0.residual_dropout", FFN_P, (B, 1, E)),  # x1 = Attn(LN(x)) + dropout(x)
        ("layers.0.residual_dropout", FFN_P, (B, 1, E)),  # out = FFN(LN(x1)) + dropout(x1)
        ("heads.dropout", FFN_P, (B, 1, HEAD)),
    ]
    assert calls == [(f"models.{t}.{site}", p, shape) for t in ("a", "b") for site, p, shape in one]
    for f in model.modules():
        if isinstance(f, FeedForward):
            assert f.dropout == 0.0 and isinstance(f.drop, nn.Identity)  # no FFN-inner dropout


def test_tab_transformer_residual_dropout_acts_on_the_skip_not_on_the_attention() -> None:
    """With the attention and FFN outputs zeroed, a layer outputs dropout(dropout(x) ...) of its input:
    zeros and rescaled values of x only, so the skip path is where dropout acts."""
    model = build("tab_transformer")
    layer = model.models["a"].layers[0]
    for lin in (layer.attention.out, layer.ffn.linear2):
        nn.init.zeros_(lin.weight)
        nn.init.zeros_(lin.bias)
    layer.train()
    torch.manual_seed(1)
    x = torch.randn(400, 1, E)
    y = layer(x)
    ratio = y[y != 0] / x[y != 0]
    scale = 1 / (1 - FFN_P)
    # each element: x * m1 * scale (first draw) then * m2 * scale (second draw) when both keep it
    torch.testing.assert_close(ratio, torch.full_like(ratio, scale * scale))
    kept = (y != 0).float().mean().item()
    assert abs(kept - (1 - FFN_P) ** 2) < 0.05
    layer.eval()
    torch.testing.assert_close(layer(x), x)


def test_eval_mode_turns_every_dropout_off() -> None:
    model = build("multitab_net", inter_sample="attention").eval()
    x = inputs()
    a, b = model(*x), model(*x)
    for k in a:
        assert torch.equal(a[k], b[k])


# ---------------------------------------------------------------------------------------------- masks
T, D = 3, 2  # three task tokens, two features; rows = queries, 1 = blocked
EXPECTED = {
    "none": None,
    "t_t": [[0, 1, 1, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0]],
    "f_t": [[0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 0, 0]],
    "both": [[0, 1, 1, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 0, 0]],
}


@pytest.mark.parametrize("mode", list(EXPECTED))
def test_masks_block_exactly_the_stated_entries(mode: str) -> None:
    mask = attention_mask(T, D, mode)
    if EXPECTED[mode] is None:
        assert mask is None
        return
    assert mask is not None
    assert torch.equal(torch.isinf(mask).int(), torch.tensor(EXPECTED[mode]))
    assert (mask[~torch.isinf(mask)] == 0).all()


def test_one_shared_task_token_makes_t_not_t_empty() -> None:
    """With a single task token the T-not-T mask blocks nothing (the authors' AliExpress configuration)."""
    mask = attention_mask(1, 4, "t_t")
    assert mask is not None and not torch.isinf(mask).any()


@pytest.mark.parametrize("mode", ["t_t", "both"])
def test_the_mask_holds_in_training_and_evaluation(mode: str) -> None:
    model = build("multitab_net", mask=mode, inter_sample="none", ffn_dropout=0.0, attention_dropout=0.0)
    expected = attention_mask(2, 3, mode)
    assert expected is not None and torch.equal(model.mask, expected)
    layer = model.feature_layers[0]
    tokens = torch.randn(B, N_TOKENS, E)
    for train in (True, False):
        model.train(train)
        _, w = layer.attention(layer.attention_norm(tokens), model.mask, need_weights=True)
        assert (w[..., torch.isinf(expected)] == 0).all()
