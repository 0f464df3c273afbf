"""The chunked CPU kernels (models/cpu_kernels.py) against the reference PyTorch ops they replace, and a
layer against its accelerated self (models/accelerate.py)."""

from __future__ import annotations

import copy
import sys

import pytest
import torch
import torch.nn.functional as F

from multitab.models import accelerate as A
from multitab.models import cpu_kernels as K
from multitab.models.accelerate import CPUFeedForward, CPUSelfAttention, accelerate_cpu
from multitab.models.blocks import FeedForward, SelfAttention, TransformerLayer
from multitab.models.multitab_net import MASKS, attention_mask
from multitab.runtime.cpu import keep_freed_memory, tune_cpu_runtime


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of a few rows, so that every test crosses chunk boundaries and ends on a partial chunk."""
    monkeypatch.setattr(K, "_CHUNK_BYTES", 4 * 40 * 7)


def ffn_reference(
    x: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
    activation: str = "gelu",
) -> torch.Tensor:
    act = F.gelu if activation == "gelu" else F.relu  # F.gelu: the exact erf form, as nn.GELU()
    return F.linear(act(F.linear(x, w1, b1)), w2, b2)


def ffn_params(d: int, h: int, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(h, d, generator=g, dtype=dtype) / d**0.5).requires_grad_(),
        torch.randn(h, generator=g, dtype=dtype).requires_grad_(),
        (torch.randn(d, h, generator=g, dtype=dtype) / h**0.5).requires_grad_(),
        torch.randn(d, generator=g, dtype=dtype).requires_grad_(),
    ]


@pytest.mark.parametrize("activation", K.ACTIVATIONS)
@pytest.mark.parametrize("shape", [(3, 29, 8), (37, 8), (1, 8)])
def test_feed_forward_matches_reference(shape: tuple[int, ...], activation: str, small_chunks: None) -> None:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0)).requires_grad_()
    params = ffn_params(8, 40)
    g = torch.randn(*shape)
    ref = ffn_reference(x, *params, activation=activation)
    ref_grads = torch.autograd.grad(ref, [x, *params], g)
    out = K.feed_forward(x, *params, activation=activation)
    grads = torch.autograd.grad(out, [x, *params], g)
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b)
    with torch.no_grad():  # the inference path keeps no hidden layer
        torch.testing.assert_close(K.feed_forward(x, *params, activation=activation), ref)


@pytest.mark.parametrize("activation", K.ACTIVATIONS)
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_feed_forward_gradcheck(dropout: float, activation: str, small_chunks: None) -> None:
    x = torch.randn(11, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).requires_grad_()
    params = ffn_params(5, 9, torch.float64)

    def f(*args: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(3)  # the same dropout mask in every evaluation gradcheck makes
        return K.feed_forward(*args, dropout=dropout, activation=activation)

    assert torch.autograd.gradcheck(f, (x, *params))


def test_feed_forward_gelu_dropout_matches_the_reference_with_the_same_mask() -> None:
    """GELU with dropout: the kernel's output and gradients equal Linear -> GELU -> mask -> Linear
    with the mask the kernel drew (read back from the output of a unit-gain probe)."""
    x = torch.randn(300, 4, generator=torch.Generator().manual_seed(0)).requires_grad_()
    w1, b1 = torch.eye(4).repeat(2, 1).requires_grad_(), torch.zeros(8, requires_grad=True)
    w2, b2 = torch.eye(4, 8).requires_grad_(), torch.zeros(4, requires_grad=True)
    torch.manual_seed(0)
    out = K.feed_forward(x, w1, b1, w2, b2, dropout=0.5)  # y = dropout(gelu(x)) on the first 4 units
    keep = (out != 0).float()
    ref = F.gelu(x) * keep * 2.0
    torch.testing.assert_close(out, ref)
    g = torch.randn(300, 4)
    (gx,) = torch.autograd.grad(out, x, g)
    (rx,) = torch.autograd.grad(ref, x, g)
    torch.testing.assert_close(gx, rx)
    assert 0.4 < keep.mean() < 0.6


def test_feed_forward_rejects_an_unknown_activation() -> None:
    x = torch.randn(2, 3)
    with pytest.raises(ValueError, match="activation"):
        K.feed_forward(x, torch.ones(4, 3), torch.zeros(4), torch.ones(3, 4), torch.zeros(3), activation="tanh")


def test_feed_forward_dropout_zeroes_and_rescales() -> None:
    x = torch.randn(2000, 4)
    w1, b1 = torch.eye(4).repeat(2, 1), torch.zeros(8)
    w2, b2 = torch.eye(4, 8), torch.zeros(4)
    torch.manual_seed(0)
    out = K.feed_forward(x, w1, b1, w2, b2, dropout=0.5, activation="relu")  # dropout(relu(x))
    kept = out != 0
    positive = x > 0
    assert not (kept & ~positive).any()
    torch.testing.assert_close(out[kept], 2 * x[kept])
    assert 0.4 < kept[positive].float().mean() < 0.6


def attention_reference(qkv: torch.Tensor, mask: torch.Tensor | None, n_heads: int) -> torch.Tensor:
    b, length, d3 = qkv.shape
    q, k, v = qkv.view(b, length, 3, n_heads, d3 // 3 // n_heads).permute(2, 0, 3, 1, 4)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return y.transpose(1, 2).reshape(b, length, d3 // 3)


@pytest.mark.parametrize("mode", MASKS)
def test_attention_matches_reference(mode: str, small_chunks: None) -> None:
    n_heads, length, d = 2, 7, 8
    mask = attention_mask(3, length - 3, mode)
    qkv = torch.randn(9, length, 3 * d, generator=torch.Generator().manual_seed(0)).requires_grad_()
    g = torch.randn(9, length, d)
    ref = attention_reference(qkv, mask, n_heads)
    (ref_grad,) = torch.autograd.grad(ref, qkv, g)
    out = K.small_head_attention(qkv, mask, n_heads)
    (grad,) = torch.autograd.grad(out, qkv, g)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(grad, ref_grad)


@pytest.mark.parametrize("dropout", [0.0, 0.25])
def test_attention_gradcheck(dropout: float, small_chunks: None) -> None:
    mask = attention_mask(2, 3, "both").double()
    qkv = torch.randn(
        5, 5, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    ).requires_grad_()

    def f(t: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(3)
        return K.small_head_attention(t, mask, 2, dropout)

    assert torch.autograd.gradcheck(f, (qkv,))


def test_attention_blocked_keys_get_exactly_zero_gradient() -> None:
    t, n_feat, n_heads, d = 3, 4, 2, 4
    mask = attention_mask(t, n_feat, "t_t")
    qkv = torch.randn(6, t + n_feat, 3 * d).requires_grad_()
    out = K.small_head_attention(qkv, mask, n_heads)
    (grad,) = torch.autograd.grad(out[:, 0].sum(), qkv)  # task token 0's output
    k_slice, v_slice = slice(d, 2 * d), slice(2 * d, 3 * d)
    assert (grad[:, 1:t, k_slice] == 0).all() and (grad[:, 1:t, v_slice] == 0).all()  # other task tokens
    assert (grad[:, t:, v_slice] != 0).any()


def test_accelerated_layer_takes_the_kernels_and_agrees_with_the_plain_layer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch.manual_seed(0)
    layer = TransformerLayer(d=8, n_heads=2, ffn_d_hidden=32)
    fast = accelerate_cpu(copy.deepcopy(layer))
    assert type(fast.ffn) is CPUFeedForward and type(fast.attention) is CPUSelfAttention
    assert type(layer.ffn) is FeedForward and type(layer.attention) is SelfAttention  # the plain model is plain
    assert list(fast.state_dict()) == list(layer.state_dict())  # checkpoints are interchangeable
    mask = attention_mask(2, 5, "t_t")
    x = torch.randn(4, 7, 8, requires_grad=True)
    assert K.use_cpu_kernels(x) and K.uses_small_head_kernel(2, 7)
    calls: list[str] = []
    monkeypatch.setattr(A, "feed_forward", lambda *a: calls.append("ffn") or K.feed_forward(*a))
    monkeypatch.setattr(A, "small_head_attention", lambda *a: calls.append("att") or K.small_head_attention(*a))
    out = fast(x, mask)
    assert calls == ["att", "ffn"]  # the accelerated layer took both kernels
    (grad,) = torch.autograd.grad(out.sum(), x)
    ref = layer(x, mask)
    assert calls == ["att", "ffn"]  # the plain layer took none
    (ref_grad,) = torch.autograd.grad(ref.sum(), x)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(grad, ref_grad)
    assert accelerate_cpu(fast) is fast and type(fast.ffn) is CPUFeedForward  # idempotent


def test_long_sequences_and_autocast_keep_the_reference_path() -> None:
    assert not K.uses_small_head_kernel(4, 2048)  # inter-sample attention over a batch: flash attention
    x = torch.randn(2, 3)
    assert not K.use_cpu_kernels(x.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not K.use_cpu_kernels(x)
    torch.manual_seed(0)
    layer = TransformerLayer(d=8, n_heads=2, ffn_d_hidden=32)
    fast = accelerate_cpu(copy.deepcopy(layer))
    x = torch.randn(4, 7, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # bf16: the FFN takes the reference ops (same bits) ...
        assert torch.equal(fast.ffn(x), layer.ffn(x))
        att, ref_bf16 = fast.attention(x), layer.attention(x)
    # ... and attention over short sequences the float32 kernel: the float32 result, not the bf16 one
    assert att.dtype == torch.float32 and ref_bf16.dtype == torch.bfloat16
    torch.testing.assert_close(att, layer.attention(x))
    assert not torch.equal(att, ref_bf16.float())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_cpu_runtime_settings_take_effect() -> None:
    assert keep_freed_memory()
    tune_cpu_runtime()
    tune_cpu_runtime()  # idempotent
    assert torch.tensor([1e-40]).mul(1.0).item() == 0.0  # denormals flushed
