"""The MLP baselines (STL MLP, shared bottom, MMoE, PLE, STEM) and MAYA beyond the model contract
(tests/test_model_contract.py): batch independence, STEM's stop-gradient, MAYA's branch weights and
training context. Parameter counts: test_model_params.py; FLOPs: test_model_complexity.py."""

from __future__ import annotations

import pytest
import torch

from _models_tiny import SCHEMA, TINY, batch, build, make_schema, task_loss
from multitab.models.maya import MAYA
from multitab.models.mlp_blocks import ExtractionLayer

torch.set_num_threads(1)


@pytest.mark.parametrize("name", ["mtl_shared_bottom", "mmoe", "ple", "stem", "stl_mlp"])
def test_prediction_does_not_depend_on_the_rest_of_the_batch(name: str) -> None:
    model = build(name, {}).eval()
    x_num, x_cat, _ = batch(SCHEMA, 8)
    full = model(x_num, x_cat)
    perm = torch.randperm(8)
    permuted = model(x_num[perm], x_cat[perm])
    for k in full:
        torch.testing.assert_close(permuted[k], full[k][perm])


# --- STEM's stop-gradient ----------------------------------------------------------------------------
def test_stem_task_gate_stops_gradient_to_other_tasks_experts() -> None:
    torch.manual_seed(0)
    layer = ExtractionLayer(
        n_tasks=3,
        n_task_experts=2,
        n_shared_experts=1,
        d_in=6,
        d_hidden=(8,),
        dropout=0.0,
        gate_all_experts=True,
    )
    x = torch.randn(4, 5, 6, requires_grad=True)  # 3 task inputs + the shared input
    out = layer(x)
    out[1].sum().backward()  # task 1's output only
    # (n_experts, d_in, d_hidden); experts of task 0: 0-1, task 1: 2-3, task 2: 4-5; shared: 6
    w = layer.experts.linears[0].weight.grad
    assert w is not None
    assert w[[0, 1, 4, 5]].abs().sum() == 0, "task 1's gate updated other tasks' experts"
    assert w[[2, 3, 6]].abs().sum() > 0, "task 1's own and the shared experts get gradient"
    assert x.grad is not None and x.grad[[0, 2]].abs().sum() == 0 and x.grad[[1, 3]].abs().sum() > 0
    # ... while the forward value still mixes every expert: the other experts change task 1's output.
    with torch.no_grad():
        layer.experts.norms[0].bias[:8] += 1.0  # expert 0 (BatchNorm channels 0..7)
        assert not torch.allclose(layer(x)[1], out[1])


def test_stem_stop_gradient_shared_reproduces_the_authors_code() -> None:
    torch.manual_seed(0)
    layer = ExtractionLayer(
        n_tasks=2,
        n_task_experts=1,
        n_shared_experts=1,
        d_in=4,
        d_hidden=(8,),
        dropout=0.0,
        gate_all_experts=True,
        stop_gradient_shared=True,
    )
    layer(torch.randn(3, 5, 4))[0].sum().backward()
    w = layer.experts.linears[0].weight.grad
    assert w is not None and w[0].abs().sum() > 0 and w[1:].abs().sum() == 0


def test_stem_papers_design_isolates_tasks_end_to_end() -> None:
    # Towers read the task outputs alone; one layer (a deeper stack's intermediate shared gate mixes all
    # experts into the next layer's shared input without stop-gradient, in the paper as here).
    model = build("stem", {"towers_read_shared": False, "n_layers": 1})
    x_num, x_cat, _ = batch(SCHEMA, 16)
    model(x_num, x_cat)["b"].sum().backward()  # task 0 only
    d = TINY["stem"]["d_embedding"]
    assert isinstance(d, int)
    num_w = model.tokenizer.num_weight.grad  # (n_num, (n_tasks + 1) * d): task 0, 1, 2, shared
    assert num_w is not None
    assert num_w[:, d : 3 * d].abs().sum() == 0, "task 0's loss reached other tasks' embeddings"
    assert num_w[:, :d].abs().sum() > 0 and num_w[:, 3 * d :].abs().sum() > 0
    assert model.layers[-1].shared_gate is None
    deeper = build("stem", {"towers_read_shared": False})
    assert deeper.layers[0].shared_gate is not None and deeper.layers[1].shared_gate is None
    # The authors' design (default) lets task 0's loss reach them through the shared output.
    model = build("stem", {"n_layers": 1})
    model(x_num, x_cat)["b"].sum().backward()
    assert model.tokenizer.num_weight.grad[:, d : 3 * d].abs().sum() > 0


# --- MAYA ----------------------------------------------------------------------------------------------
def test_maya_branch_weights_sum_to_one_and_follow_branch_losses() -> None:
    model = build("maya", {"ema_momentum": 0.0})  # no smoothing: weights = softmax(this step's losses)
    x_num, x_cat, y = batch(SCHEMA, 32)
    model.training_loss(x_num, x_cat, y, task_loss)
    block = model.blocks[0]
    losses = model.last_branch_losses[0]
    torch.testing.assert_close(block.branch_weights, torch.softmax(losses, 0))
    assert torch.equal(block.branch_weights.argsort(), losses.argsort())  # larger loss, larger weight
    # With smoothing: an EMA of points of the simplex stays on it and moves toward the larger losses.
    smooth = build("maya", {"ema_momentum": 0.9}).blocks[0]
    for _ in range(50):
        smooth.update_branch_weights(torch.tensor([0.1, 2.0, 1.0]), 0.9)
    w = smooth.branch_weights
    torch.testing.assert_close(w.sum(), torch.tensor(1.0))
    assert w[1] > w[2] > w[0]
    torch.testing.assert_close(w, torch.softmax(torch.tensor([0.1, 2.0, 1.0]), 0), atol=0.01, rtol=0)


def test_maya_branch_weights_frozen_in_eval_and_sum_to_one_after_training() -> None:
    model = build("maya", {})
    x_num, x_cat, y = batch(SCHEMA, 32)
    for _ in range(3):
        model.training_loss(x_num, x_cat, y, task_loss)
    w = model.blocks[0].branch_weights.clone()
    torch.testing.assert_close(w.sum(), torch.tensor(1.0))
    model.eval()
    model.training_loss(x_num, x_cat, y, task_loss)
    assert torch.equal(model.blocks[0].branch_weights, w)


def test_maya_training_sample_does_not_see_its_own_label() -> None:
    model = build("maya", {}).eval()  # eval: no dropout, no branch-weight update
    x_num, x_cat, y = batch(SCHEMA, 16)
    _, out = model.training_loss(x_num, x_cat, y, task_loss)
    y2 = {k: v.clone() for k, v in y.items()}
    y2["r"][3] += 5.0
    y2["m"][3] = (y2["m"][3] + 1) % 3
    _, out2 = model.training_loss(x_num, x_cat, y2, task_loss)
    torch.testing.assert_close(out2["r"][3], out["r"][3])  # its own label is masked out
    assert not torch.allclose(out2["r"][:3], out["r"][:3])  # the others attend to it


def test_maya_inference_attends_to_the_training_set() -> None:
    model = build("maya", {}).eval()
    x_num, x_cat, y = batch(SCHEMA, 16)
    with pytest.raises(RuntimeError, match="fit_context"):
        model(x_num, x_cat)
    model.fit_context(x_num, x_cat, y)
    a = model(x_num[:4], x_cat[:4])
    y2 = {k: v.clone() for k, v in y.items()}
    y2["r"] += 3.0
    model.fit_context(x_num, x_cat, y2)
    b = model(x_num[:4], x_cat[:4])
    assert not torch.allclose(a["r"], b["r"])
    small = MAYA(schema=SCHEMA, d_embedding=8, n_heads=2, context_size=5)
    small.fit_context(x_num, x_cat, y)
    assert small._context is not None and small._context[0].shape == (5, 8)


def test_maya_generalises_through_the_training_context() -> None:
    # A learnable signal: held-out predictions, made by attending to the training set, must carry it.
    schema = make_schema(n_num=3, cards=(3, 5))  # categorical c0 has as many values as task m has classes
    torch.manual_seed(0)
    x_num, x_cat, _ = batch(schema, 768, seed=3)
    y = {
        "b": (x_num[:, 0] > 0).long(),
        "m": x_cat[:, 0],
        "r": x_num[:, 1] + 0.5 * x_num[:, 2],
    }
    tr, te = slice(0, 512), slice(512, 768)
    model = build("maya", {}, schema)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        for i in torch.randperm(512).split(128):
            loss, _ = model.training_loss(x_num[i], x_cat[i], {k: v[i] for k, v in y.items()}, task_loss)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    model.fit_context(x_num[tr], x_cat[tr], {k: v[tr] for k, v in y.items()})
    with torch.no_grad():
        out = model(x_num[te], x_cat[te])
    # Margins measured over 8 initialisations (AMD EPYC): the regression's correlation was 0.976 or more.
    # The classification tasks are not learned reliably: in 2 of 8 initialisations the binary task stayed
    # at chance (accuracy 0.53-0.54) while the 3-class one was near perfect, and in others the reverse held
    # (binary 0.98, 3-class 0.66); which one happens depends on the trajectory, so on the CPU's kernels. The
    # assertion is on their mean skill above chance, which was 0.50 or more in every initialisation.
    assert torch.corrcoef(torch.stack([out["r"], y["r"][te]]))[0, 1] > 0.8
    acc_b = ((out["b"] > 0).long() == y["b"][te]).float().mean().item()
    acc_m = (out["m"].argmax(1) == y["m"][te]).float().mean().item()
    skill = ((acc_b - 1 / 2) / (1 / 2) + (acc_m - 1 / 3) / (2 / 3)) / 2  # 0 = chance, 1 = perfect
    assert skill > 0.25, (acc_b, acc_m)
