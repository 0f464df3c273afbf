"""Parameters and forward FLOPs per sample, with the convention of the MultiTab paper's Table 4: what the
complexity stage counts (multitab.evaluation.paper.complexity) and the model contract checks can be counted
(multitab.models.contract).

Convention (docs/deviations.md, "Evaluation and counting conventions"): FLOPs = 2 x multiply-
accumulate operations (MACs) of one forward pass, counted per layer as ptflops does
(flops-counter.pytorch, pytorch backend):
- Linear: input elements x out_features, + out_features for the bias (once, as ptflops does);
- LayerNorm: input elements; BatchNorm: input elements (x 2 when affine);
- ReLU / GELU / ELU / LeakyReLU / PReLU / ReLU6: output elements; Dropout, Embedding, Softmax
  modules and parameter-free tensor glue (residual adds, reshapes, concatenations): 0;
- nn.MultiheadAttention: ptflops' formula (q scaling, projections, scores, softmax, weighted sum,
  output projection);
- modules of this package with their own computation define ``flops(inputs, output) -> MACs`` for the
  work that is not done in their child modules (e.g. SelfAttention: the scores, softmax and weighted
  sum; TaskHeads: the batched per-task layers). Any other module that holds its own parameters must do
  the same: an unknown parametrised module raises instead of being silently counted as 0.
Counting runs on a batch of ``batch_size`` samples (default 1, as in Table 4) and divides by it. The
per-sample cost of true inter-sample attention grows with the batch (scores over the batch): the
result records the batch size used. Single-task models (PerTask) sum over their per-task models.
Non-torch models (XGBoost) get None unless they define ``complexity(schema) -> {"params", "flops"}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from multitab.datasets.schema import DatasetSchema
from multitab.models.accelerate import ACCELERATED

_ACTIVATIONS = (nn.ReLU, nn.GELU, nn.ELU, nn.LeakyReLU, nn.PReLU, nn.ReLU6)
_FREE = (nn.Embedding, nn.EmbeddingBag, nn.Dropout, nn.Identity, nn.Softmax, nn.Sigmoid, nn.Tanh)


def _numel(x: Any) -> int:
    return int(x.numel()) if isinstance(x, Tensor) else 0


def _mha_macs(m: nn.MultiheadAttention, inputs: tuple[Any, ...], output: Any) -> int:
    """ptflops' multihead_attention_counter_hook."""
    q, k, v = inputs[:3]
    len_idx = 1 if m.batch_first else 0
    batch = q.shape[0] if m.batch_first else q.shape[1]
    qdim, kdim, vdim = q.shape[2], k.shape[2], v.shape[2]
    qlen, klen, vlen = q.shape[len_idx], k.shape[len_idx], v.shape[len_idx]
    macs = qlen * qdim + qlen * qdim * qdim + klen * kdim * kdim + vlen * vdim * vdim
    if m.in_proj_bias is not None:
        macs += (qlen + klen + vlen) * qdim
    h = m.num_heads
    macs += h * (qlen * klen * (qdim // h) + qlen * klen + qlen * klen * (vdim // h))
    macs += qlen * vdim * (vdim + 1)
    return int(macs * batch)


def _rtdl_rules() -> dict[type, Callable[[nn.Module, tuple[Any, ...], Any], int]]:
    """Rules for the parametrised modules of rtdl_revisiting_models (FT-Transformer backbone="rtdl")."""
    import rtdl_revisiting_models as rtdl

    def attention(m: nn.Module, inputs: tuple[Any, ...], out: Tensor) -> int:
        b, lq, d = inputs[0].shape
        lk, h = inputs[1].shape[1], m._n_heads  # noqa: SLF001
        return int(b * (lq * d + 2 * lq * lk * d + h * lq * lk))  # scaling, scores, softmax, weighted sum

    return {
        rtdl.MultiheadAttention: attention,
        rtdl.LinearEmbeddings: lambda m, i, o: 2 * _numel(o),
        rtdl.CategoricalEmbeddings: lambda m, i, o: _numel(o) if getattr(m, "bias", None) is not None else 0,
        rtdl._CLSEmbedding: lambda m, i, o: 0,  # noqa: SLF001
        rtdl._ReGLU: lambda m, i, o: 2 * _numel(o),  # noqa: SLF001  (ReLU + product)
    }


def _module_macs(m: nn.Module, inputs: tuple[Any, ...], output: Any, rules: dict[type, Any]) -> int:
    own = getattr(m, "flops", None)
    if callable(own):
        return int(own(inputs, output))
    if isinstance(m, nn.Linear):
        return _numel(inputs[0]) * m.out_features + (m.out_features if m.bias is not None else 0)
    if isinstance(m, nn.LayerNorm | nn.GroupNorm):
        return _numel(inputs[0])
    if isinstance(m, nn.modules.batchnorm._BatchNorm):  # noqa: SLF001
        return _numel(inputs[0]) * (2 if m.affine else 1)
    if isinstance(m, _ACTIVATIONS):
        return _numel(output)
    if isinstance(m, nn.MultiheadAttention):
        return _mha_macs(m, inputs, output)
    for cls, rule in rules.items():
        if isinstance(m, cls):
            return int(rule(m, inputs, output))
    if isinstance(m, _FREE) or not any(True for _ in m.parameters(recurse=False)):
        return 0
    raise ValueError(
        f"complexity: module {type(m).__name__} holds its own parameters but has no counting rule; "
        "give it a `flops(inputs, output) -> MACs` method (see multitab.models.counting)"
    )


def count_macs(model: nn.Module, x_num: Tensor, x_cat: Tensor) -> int:
    """MACs of one forward pass of `model` on (x_num, x_cat), ptflops-style (see module docstring).
    A module inside nn.MultiheadAttention is not visited separately (the MHA formula covers it)."""
    fast = sorted({type(m).__name__ for m in model.modules() if type(m) in ACCELERATED})
    if fast:
        raise ValueError(f"complexity: count MACs on a plain model; this one has CPU kernels swapped in ({fast}), "
                         "whose forward calls no Linear module (build it without accelerate_cpu)")
    rules = _rtdl_rules()
    total = 0
    skip: set[int] = set()
    for m in model.modules():
        if isinstance(m, nn.MultiheadAttention):
            skip.update(id(c) for c in m.modules() if c is not m)

    def hook(m: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
        nonlocal total
        if id(m) not in skip:
            total += _module_macs(m, inputs, output, rules)

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    was_training = model.training
    try:
        model.eval()
        # A plain model (not accelerate_cpu'd) calls every Linear as a module, so its hook fires.
        with torch.no_grad():
            model(x_num, x_cat)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return total


def example_inputs(schema: DatasetSchema, n: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Random inputs shaped by the schema (values do not change the counts)."""
    g = torch.Generator().manual_seed(seed)
    x_num = torch.randn(n, schema.n_num, generator=g)
    cards = [f.cardinality or 1 for f in schema.features if f.kind == "categorical"]
    cols = [torch.randint(0, c, (n,), generator=g) for c in cards]
    x_cat = torch.stack(cols, 1) if cols else torch.zeros(n, 0, dtype=torch.long)
    return x_num, x_cat


def _example_targets(schema: DatasetSchema, n: int, device: torch.device) -> dict[str, Tensor]:
    return {
        t.name: torch.zeros(n, device=device)
        if t.type == "regression"
        else torch.zeros(n, dtype=torch.long, device=device)
        for t in schema.tasks
    }


def complexity(model: Any, schema: DatasetSchema, *, batch_size: int = 1) -> dict[str, Any]:
    """{"params", "flops", "macs", "batch_size"} per sample (flops = 2 x MACs, see module docstring)."""
    if batch_size < 1:
        raise ValueError(f"{batch_size=} must be >= 1")
    if not isinstance(model, nn.Module):
        own = getattr(model, "complexity", None)
        info = own(schema) if callable(own) else {"params": None, "flops": None}
        return {"params": info["params"], "flops": info["flops"], "macs": None, "batch_size": None}
    params = sum(p.numel() for p in model.parameters())
    try:
        device = next(model.parameters()).device
    except StopIteration:
        device = torch.device("cpu")
    x_num, x_cat = example_inputs(schema, batch_size)
    fit_context: Any = getattr(model, "fit_context", None)
    if callable(fit_context):
        # MAYA attends to a context at inference; counted with the example batch as its context
        # (cost per sample grows with the context, like the batch of inter-sample attention).
        fit_context(x_num.to(device), x_cat.to(device), _example_targets(schema, batch_size, device))
    macs = count_macs(model, x_num.to(device), x_cat.to(device)) / batch_size
    return {"params": params, "flops": 2 * macs, "macs": macs, "batch_size": batch_size}
