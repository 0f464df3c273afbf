"""Rotary positions under bf16 autocast (train.precision bf16): the angles and their cos / sin are computed in
float32 and only the result is bfloat16. Before, the angles themselves were rounded to bfloat16, so position
p's rotation was off by up to 0.25 rad at p = 127 and 4 rad at p = 2047 (the batch is MultiTab-Net's
inter-sample sequence). Float32 is unchanged bit for bit."""

from __future__ import annotations

import torch

from multitab.models.blocks import Rotary, rotate_half


def reference(x: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """The exact rotation in float64 of x's values."""
    pos = torch.arange(x.shape[-2], dtype=torch.float64)
    freqs = torch.outer(pos, inv_freq.double())
    emb = torch.cat((freqs, freqs), dim=-1)
    x = x.double()
    return x * emb.cos() + rotate_half(x) * emb.sin()


def test_bf16_rotary_angles_are_not_rounded_to_bf16() -> None:
    torch.manual_seed(0)
    rot = Rotary(16)
    x = torch.randn(2, 4, 2048, 16).to(torch.bfloat16)  # (B, heads, L = the batch of 2048, d_head)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = rot(x)
    assert y.dtype == torch.bfloat16
    err = (y.double() - reference(x, rot.inv_freq)).abs().max().item()
    # bf16 rounding of the products and their sum (relative 2^-8 each, |x| <~ 5); the rounded angles gave ~7
    assert err < 0.1, err


def test_fp32_rotary_is_unchanged() -> None:
    torch.manual_seed(0)
    rot = Rotary(16)
    x = torch.randn(2, 4, 300, 16)
    pos = torch.arange(300, dtype=torch.float32)
    freqs = torch.outer(pos, rot.inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1).to(x.dtype)  # the previous formula
    assert torch.equal(rot(x), x * emb.cos() + rotate_half(x) * emb.sin())
