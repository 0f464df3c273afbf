"""Blocks shared by the MLP baselines (STL MLP, shared bottom, MMoE, PLE, STEM).

The authors' MLP baselines build every hidden layer as Linear -> BatchNorm1d -> ReLU -> Dropout and
initialise every Linear and Embedding weight from N(0, 0.01^2) with zero biases (their STL MLP keeps
PyTorch's defaults). Those facts are what make our parameter counts equal theirs
(docs/deviations.md, "Reference figures").

Speed: a model with several experts (or towers, or gates) that have the same shape runs them as one
batched matrix product (`BatchedLinear`) instead of a Python loop over `nn.Linear` modules. The parameter
count and the function are those of separate layers: expert i owns `weight[i]` and `bias[i]`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multitab.datasets.schema import Task
from multitab.models.base import task_output_dim


def check_dims(name: str, dims: Sequence[int], *, allow_empty: bool = False) -> list[int]:
    """Validate a list of layer widths (a constructor argument) and return it as a list."""
    dims = list(dims)
    if not dims and not allow_empty:
        raise ValueError(f"{name}={dims} must name at least one hidden width")
    if any(not isinstance(d, int) or d < 1 for d in dims):
        raise ValueError(f"{name}={dims}: every width must be an int >= 1")
    return dims


def check_dropout(dropout: float) -> float:
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"{dropout=} must be in [0, 1)")
    return float(dropout)


def task_output(task: Task, y: Tensor) -> Tensor:
    """The contract's output shape: [B] for binary logits and regression, [B, n_classes] for multiclass."""
    return y if task.type == "multiclass" else y.squeeze(-1)


def init_normal_(module: nn.Module, std: float = 0.01) -> None:
    """The authors' initialisation: Linear / Embedding / BatchedLinear weights ~ N(0, std^2), biases 0."""
    for m in module.modules():
        if isinstance(m, nn.Linear | nn.Embedding | BatchedLinear):
            nn.init.normal_(m.weight, mean=0.0, std=std)
            bias = getattr(m, "bias", None)
            if isinstance(bias, Tensor):
                nn.init.zeros_(bias)


class BatchNorm1d(nn.BatchNorm1d):
    """BatchNorm1d that accepts a training batch of one sample (the last batch of an epoch can be one
    row): there batch statistics do not exist, so it normalises with the running statistics and leaves
    them unchanged, as in evaluation."""

    def forward(self, x: Tensor) -> Tensor:
        if self.training and x.shape[0] == 1:
            return F.batch_norm(
                x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
            )
        return super().forward(x)


class BatchedLinear(nn.Module):
    """`n` independent Linear(d_in, d_out) layers applied at once. Input [n, B, d_in] (each layer its own
    input) or [B, d_in] (one input shared by all); output [n, B, d_out]."""

    def __init__(self, n: int, d_in: int, d_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, d_in, d_out))
        self.bias = nn.Parameter(torch.empty(n, 1, d_out))
        # PyTorch's nn.Linear default initialisation, layer by layer.
        bound = d_in**-0.5
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def flops(self, inputs: tuple[Tensor, ...], output: Tensor) -> int:
        """MACs as ptflops counts `n` separate nn.Linear layers (the bias once per layer and call)."""
        n, _, d_out = output.shape
        return output.numel() * self.weight.shape[1] + n * d_out

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 2:  # shared input: (B, d_in) @ (n, d_in, d_out) broadcasts to (n, B, d_out)
            return torch.matmul(x, self.weight) + self.bias
        return torch.baddbmm(self.bias, x, self.weight)


class BatchedMLP(nn.Module):
    """`n` independent MLPs of the same shape, each hidden layer Linear -> BatchNorm -> ReLU -> Dropout.
    Input [n, B, d_in] or [B, d_in] (shared); output [n, B, d_hidden[-1]]."""

    def __init__(self, n: int, d_in: int, d_hidden: Sequence[int], dropout: float) -> None:
        super().__init__()
        self.n = n
        dims = [d_in, *d_hidden]
        self.linears = nn.ModuleList(BatchedLinear(n, a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.norms = nn.ModuleList(BatchNorm1d(n * b) for b in dims[1:])
        self.activation = nn.ReLU()  # a module, so that ptflops-style counting sees it
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        for linear, norm in zip(self.linears, self.norms):
            x = linear(x)  # (n, B, d)
            n, b, d = x.shape
            # Each (layer i, unit j) is its own BatchNorm channel, as with separate MLPs.
            x = norm(x.transpose(0, 1).reshape(b, n * d)).reshape(b, n, d).transpose(0, 1)
            x = self.dropout(self.activation(x))
        return x


class Towers(nn.Module):
    """One tower per task: an MLP (`d_hidden`, BatchNorm) and an output layer sized for the task.
    Input [n_tasks, B, d_in] (each tower its own input); output {task: prediction} per the contract."""

    def __init__(self, tasks: Sequence[Task], d_in: int, d_hidden: Sequence[int], dropout: float) -> None:
        super().__init__()
        self.tasks = list(tasks)
        self.mlp = BatchedMLP(len(self.tasks), d_in, d_hidden, dropout) if d_hidden else None
        d_last = d_hidden[-1] if d_hidden else d_in
        self.heads = nn.ModuleList(nn.Linear(d_last, task_output_dim(t)) for t in self.tasks)

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        h = self.mlp(x) if self.mlp is not None else x  # (n_tasks, B, d_last)
        return {t.name: task_output(t, head(h[i])) for i, (t, head) in enumerate(zip(self.tasks, self.heads))}


class ExtractionLayer(nn.Module):
    """One extraction layer of PLE (Tang et al. 2020, customized gate control) or STEM (Su et al. 2024).

    Each task owns `n_task_experts` experts reading the task's input; `n_shared_experts` experts read the
    shared input. Task gate t (a softmax over a linear map of task t's input) mixes task t's and the
    shared experts (PLE), or every expert (STEM, `gate_all_experts`); the shared gate mixes every expert.
    In STEM's all-expert gates, the experts of the other tasks enter through a stop-gradient, so task t's
    loss never updates them; `stop_gradient_shared` also stops the shared experts there.

    Input [n_tasks + 1, B, d_in] (task inputs, then the shared input) or [B, d_in] (one input for all);
    output [n_tasks + 1, B, d_hidden[-1]] (task outputs, then the shared output; [n_tasks, B, ...]
    without `shared_gate`). Experts are ordered
    task 0's, ..., task T-1's, then the shared ones.
    """

    own: Tensor  # (n_tasks, n_experts) bool buffer, only with gate_all_experts
    source: Tensor  # (n_experts,): the input row (task t, or n_tasks for shared) each expert reads

    def __init__(
        self,
        *,
        n_tasks: int,
        n_task_experts: int,
        n_shared_experts: int,
        d_in: int,
        d_hidden: Sequence[int],
        dropout: float,
        gate_all_experts: bool,
        stop_gradient_shared: bool = False,
        shared_gate: bool = True,
    ) -> None:
        super().__init__()
        if n_task_experts < 0 or n_shared_experts < 0 or n_task_experts + n_shared_experts < 1:
            raise ValueError(f"{n_task_experts=} and {n_shared_experts=} must be >= 0 with a positive sum")
        self.n_tasks, self.k, self.s = n_tasks, n_task_experts, n_shared_experts
        n_all = n_tasks * n_task_experts + n_shared_experts
        self.experts = BatchedMLP(n_all, d_in, d_hidden, dropout)
        self.task_gates = BatchedLinear(n_tasks, d_in, n_all if gate_all_experts else self.k + self.s)
        # The last layer of the PLE / STEM papers has no shared gate (nothing reads the shared output).
        self.shared_gate = nn.Linear(d_in, n_all) if shared_gate else None
        self.gate_all_experts = gate_all_experts
        source = [t for t in range(n_tasks) for _ in range(n_task_experts)] + [n_tasks] * n_shared_experts
        self.register_buffer("source", torch.tensor(source), persistent=False)
        self.identity_source = source == list(range(n_tasks + 1))
        if gate_all_experts:
            # own[t, e]: expert e passes gradient to task t's loss through task t's gate.
            own = torch.zeros(n_tasks, n_all, dtype=torch.bool)
            for t in range(n_tasks):
                own[t, t * self.k : (t + 1) * self.k] = True
            own[:, n_tasks * self.k :] = not stop_gradient_shared
            self.register_buffer("own", own, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        t, k = self.n_tasks, self.k
        if x.dim() == 2:
            expert_in, gate_in, shared_in = x, x, x
        else:
            # Expert i reads input row source[i] (its task's, or the shared one); no copy when that is x.
            expert_in = x if self.identity_source else x.index_select(0, self.source)
            gate_in, shared_in = x[:t], x[t]
        e = self.experts(expert_in)  # (n_all, B, d)
        gates = torch.softmax(self.task_gates(gate_in), dim=-1)  # (T, B, n_gated)
        if not self.gate_all_experts:
            own_e = e[: t * k].view(t, k, *e.shape[1:])  # (T, K, B, d)
            task_out = torch.einsum("tbk,tkbd->tbd", gates[..., :k], own_e)
            task_out = task_out + torch.einsum("tbs,sbd->tbd", gates[..., k:], e[t * k :])
        else:
            # Stop-gradient without a per-task copy: the value is sum_e g_te * e (all detached), and the
            # zero-valued term g_te * (e - e.detach()) carries the gradient only where own[t, e].
            e_det = e.detach()
            task_out = torch.einsum("tbe,ebd->tbd", gates, e_det)
            task_out = task_out + torch.einsum("tbe,ebd->tbd", gates * self.own[:, None, :], e - e_det)
        if self.shared_gate is None:
            return task_out
        shared_out = torch.einsum("be,ebd->bd", torch.softmax(self.shared_gate(shared_in), dim=-1), e)
        return torch.cat([task_out, shared_out[None]])
