"""benchmarks/step_profile.py sorts a profiled training step's op time into kinds and phases: checked on a
small model whose ops are known (a linear layer, ReLU, an MSE loss, backward, an Adam step)."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from _benchmarks import load_benchmark

sp = load_benchmark("step_profile")


def test_kinds_of_known_ops():
    assert sp.kind_of("aten::addmm") == "matmul"
    assert sp.kind_of("aten::bmm") == "matmul"
    assert sp.kind_of("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert sp.kind_of("aten::native_batch_norm_backward") == "normalization"
    assert sp.kind_of("aten::copy_") == "memory"
    assert sp.kind_of("aten::sum") == "reduction"
    assert sp.kind_of("aten::gelu_backward") == "elementwise"
    assert sp.kind_of("Optimizer.step#Adam.step") == "other"


def test_breakdown_of_a_training_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
    opt = torch.optim.Adam(model.parameters())
    x, y = torch.randn(512, 64), torch.randn(512, 4)
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    out = sp.breakdown(prof.events(), wall_us=1e12)
    assert abs(sum(out["share"].values()) - 1) < 1e-3 and abs(sum(out["phase_share"].values()) - 1) < 1e-3
    assert out["share"]["matmul"] > 0 and out["share"]["elementwise"] > 0
    assert out["share"]["attention"] == 0 and out["share"]["normalization"] == 0
    assert out["phase_share"]["backward"] > 0 and out["phase_share"]["optimizer"] > 0
    # forward + backward of two linear layers at batch 512: 3 x 2 x 512 x (64 x 256 + 256 x 4) FLOPs per step,
    # less the first layer's input gradient, which autograd does not compute for a leaf input
    per_step = 2 * 512 * (64 * 256 + 256 * 4) * 3 - 2 * 512 * 64 * 256
    assert out["matmul_flops"] == 3 * per_step
    assert out["top_ops"] and all(o["kind"] in sp.KINDS for o in out["top_ops"])
