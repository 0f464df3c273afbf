"""MAYA: Mixture of Attention Yields Accurate results for tabular data (Li et al. 2025), an
encoder-decoder transformer, adapted to multitask learning.

Encoder (section 3.4). Tokens = ReLU(FeatureTokenizer(x)) (the activation after the tokenizer of
section 3.2) with a [CLS] token in front. Each MOA block runs `n_branches` parallel multi-head attention
branches, Branch_j(z) = LayerNorm_j(FFN(Attention_j(z) + z)) with one FFN shared by the branches, and
mixes them with branch weights w_j: z' = LayerNorm(sum_j w_j Branch_j(z) + z) (eqs. 7, 10). The branch
weights are W_B = EMA(softmax(s)) (eq. 8), s_j = the loss of the shared Predictor on branch j's [CLS]
token (eq. 9), updated at every training step and frozen at evaluation. The encoder output is
LayerNorm(mean over blocks of each block's output) (inter-block averaging, eq. 11), read at [CLS].

Decoder (section 3.5). IAIL blocks attend from a sample (query: the previous block's output) to a set of
encoded samples (keys: their encoder outputs) whose values are label embeddings (LEL: a lookup table
for class labels, a linear map for regression targets). Query and key share one projection; similarity
is the negative squared L2 distance, single head (as the paper says). Training: the set is the batch
(`training_loss`); inference: the training set, given by `fit_context`. A Linear Predictor reads the
decoder output.

Multitask adaptation (ours): the label embedding of a sample is the sum of one LEL per task, so every
value carries all of its labels; the Predictor has one output block per task; a branch's loss s_j is the
sum over tasks of the trainer's per-task losses (the multitask loss of the paper's Eq. 9).
# NOTE[DIFF] (docs/deviations.md D9): the paper does not say whether a training sample attends to itself; with
# its own label as a value that is a label leak (it learns to copy it), so a sample's own entry is masked out
# in training.
# NOTE[DIFF] (docs/deviations.md D10): the branch losses only set the branch weights (computed without
# gradient); they are not added to the training loss, which is the plain sum of the per-task losses of the
# final prediction.
# NOTE[DIFF] (docs/deviations.md D11): inference attends to at most `context_size` training rows (a seeded
# random subset) to bound memory and time on millions of rows; set it above the training size for the paper's
# setting.
Complexity: a prediction's cost grows with the context (every IAIL block scores all context rows and
projects their keys and values), so FLOPs per sample depend on `context_size` and the batch.
"""

from __future__ import annotations

import typing
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multitab.datasets.schema import DatasetSchema
from multitab.models.base import MultitaskModel, cat_cardinalities, module_key
from multitab.models.mlp_blocks import BatchedLinear, check_dropout
from multitab.models.tokenizer import FeatureTokenizer

TaskLossFn = Callable[[str, Tensor, Tensor], Tensor]


def _ffn(d: int, d_hidden: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d, d_hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_hidden, d))


class _MOABlock(nn.Module):
    """Mixture of attention: [B, L, d] -> [B, L, d]; `branches(z)` -> [n_branches, B, L, d], `mix` mixes
    them with the branch weights."""

    branch_weights: Tensor

    def __init__(self, *, d: int, n_branches: int, n_heads: int, ffn_d_hidden: int, dropout: float) -> None:
        super().__init__()
        self.n, self.h = n_branches, n_heads
        self.qkv = nn.Linear(d, 3 * n_branches * d)  # every branch its own q, k, v (width d each)
        self.out = BatchedLinear(n_branches, d, d)  # every branch its own output projection
        self.ffn = _ffn(d, ffn_d_hidden, dropout)  # shared by the branches
        self.branch_norm_weight = nn.Parameter(torch.ones(n_branches, 1, 1, d))
        self.branch_norm_bias = nn.Parameter(torch.zeros(n_branches, 1, 1, d))
        self.norm = nn.LayerNorm(d)
        self.dropout = dropout
        self.register_buffer("branch_weights", torch.full((n_branches,), 1.0 / n_branches))

    def branches(self, z: Tensor) -> Tensor:
        b, length, d = z.shape
        n, h = self.n, self.h
        qkv = self.qkv(z).view(b, length, 3, n * h, d // h).permute(2, 0, 3, 1, 4)  # (3, B, n*h, L, d_head)
        p = self.dropout if self.training else 0.0
        a = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], dropout_p=p)  # (B, n*h, L, d_head)
        a = a.view(b, n, h, length, d // h).permute(1, 0, 3, 2, 4).reshape(n, b * length, d)
        x = self.ffn(self.out(a).view(n, b, length, d) + z)  # (n, B, L, d)
        return F.layer_norm(x, (d,)) * self.branch_norm_weight + self.branch_norm_bias

    @torch.no_grad()
    def update_branch_weights(self, losses: Tensor, momentum: float) -> None:
        """W_B <- momentum * W_B + (1 - momentum) * softmax(losses): larger loss, larger weight (eq. 8)."""
        self.branch_weights.mul_(momentum).add_(torch.softmax(losses.float(), 0), alpha=1.0 - momentum)

    def mix(self, branches: Tensor, z: Tensor) -> Tensor:
        """LayerNorm(sum_j w_j Branch_j(z) + z) (eq. 10 with the residual of eq. 7)."""
        return self.norm(torch.einsum("n,nbld->bld", self.branch_weights, branches) + z)

    def forward(
        self, z: Tensor, branch_loss: Callable[[Tensor], Tensor] | None = None, momentum: float = 0.0
    ) -> tuple[Tensor, Tensor | None]:
        """-> (the block's output, the branch losses or None). With `branch_loss` (training), the branch
        weights are first updated from branch_loss([n_branches, B, d] branch [CLS] tokens) -> [n_branches]."""
        branches = self.branches(z)  # (n_branches, B, L, d)
        losses = None
        if branch_loss is not None:
            with torch.no_grad():
                losses = branch_loss(branches[:, :, 0].detach())
            self.update_branch_weights(losses, momentum)
        return self.mix(branches, z), losses

    def flops(self, inputs: tuple[Tensor, ...], output: Tensor) -> int:
        """MACs beyond the child layers (qkv, out, FFN, final norm), in SelfAttention's convention:
        per branch scaling, scores, softmax, weighted sum; residual; branch LayerNorm; weighted mix."""
        b, length, d = inputs[0].shape
        attention = b * (length * d + 2 * length * length * d + self.h * length * length)
        return self.n * (attention + 2 * b * length * d) + self.n * b * length * d


class _IAILBlock(nn.Module):
    """Inter-instance attention with labels: query [Q, d], keys [N, d], values [N, d] -> [Q, d]."""

    def __init__(self, *, d: int, ffn_d_hidden: int, dropout: float) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d)  # shared by query and key
        self.value = nn.Linear(d, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ffn = _ffn(d, ffn_d_hidden, dropout)
        self.dropout = nn.Dropout(dropout)

    def project(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """The context's projected keys and values (computed once for all query chunks)."""
        return self.proj(keys), self.value(values)

    def forward(self, q: Tensor, kp: Tensor, vp: Tensor, exclude_self: bool) -> Tensor:
        """q [Q, d]; kp, vp [N, d] from `project`."""
        qp = self.proj(q)
        # -||qp - kp||^2 expanded (no sqrt: finite gradients at distance zero).
        sim = 2 * qp @ kp.T - qp.pow(2).sum(-1, keepdim=True) - kp.pow(2).sum(-1)  # (Q, N)
        if exclude_self:  # training: query i is key i; a finite fill keeps a batch of one finite
            sim = sim.masked_fill(torch.eye(*sim.shape, dtype=torch.bool, device=sim.device), -1e9)
        h = self.norm1(q + self.dropout(torch.softmax(sim, -1)) @ vp)
        return self.norm2(h + self.ffn(h))

    def flops(self, inputs: tuple[Tensor, ...], output: Tensor) -> int:
        """MACs beyond the child layers: distances, softmax and weighted sum over the N context rows
        (the context's key and value projections are counted by their layers, in `project`)."""
        q, keys = inputs[0], inputs[1]
        return q.shape[0] * keys.shape[0] * (2 * q.shape[1] + 1)


class MAYA(MultitaskModel):
    """MAYA, multitask. forward(x_num [B, n_num] float, x_cat [B, n_cat] long) -> {task: [B] (binary
    logits, regression) or [B, n_classes]}, attending to the context set by `fit_context` (call it after
    training and before evaluating). Training goes through `training_loss`, which attends to the batch.

    Shape:
        - ``x_num``: ``(B, n_num)``, float32, the numerical features in schema order (``(B, 0)`` if none).
        - ``x_cat``: ``(B, n_cat)``, int64, the categorical codes in schema order, column j in
          ``0 .. cardinality_j - 1`` of the schema the model was built with (in processed data code 0 is
          reserved for values unseen in train); ``(B, 0)`` if none.
        - output of ``forward``: ``{task: Tensor}`` in the schema's task order, float32: ``(B,)`` for a
          binary task (logits) or a regression task (predictions), ``(B, C)`` for a C-class task (logits).
        - ``fit_context(x_num (N, n_num), x_cat (N, n_cat), targets {task: (N,)})``: targets are 0/1 for a
          binary task, 0 .. C - 1 for a C-class task, floats for a regression task. The context keeps at
          most ``context_size`` of the N rows: keys ``(min(N, context_size), d_embedding)``.
        - ``training_loss(x_num, x_cat, targets {task: (B,)}, task_loss_fn)`` -> (loss ``()``, outputs as
          ``forward``'s).
        - inside: tokens ``(B, 1 + n_num + n_cat, d_embedding)``, the [CLS] token first. Each MOA block
          runs ``n_branches`` branches at once, ``(n_branches, B, 1 + n_num + n_cat, d_embedding)``, and mixes
          them with its ``branch_weights`` ``(n_branches,)``; the branch losses come from the branches'
          [CLS] tokens ``(n_branches, B, d_embedding)``, and after a training step ``last_branch_losses``
          holds one ``(n_branches,)`` tensor per block. The encoder gives ``(B, d_embedding)`` per row.
        - rows: in ``forward`` each row attends to the context rows only, so its outputs depend on that row
          and the context, not on the rest of its batch; in ``training_loss`` the batch is the context, so a
          row's outputs depend on the other rows of its batch (never on its own label).

    Examples:
        >>> import torch
        >>> from multitab.datasets.schema import get_schema
        >>> from multitab.models.base import cat_cardinalities
        >>> from multitab.models.maya import MAYA
        >>> schema = get_schema("acs_income")  # 10 categorical features, no numerical; binary + 5-class task
        >>> model = MAYA(schema=schema, d_embedding=8, n_heads=2, n_branches=3, ffn_d_hidden=16,
        ...              decoder_ffn_d_hidden=16)
        >>> _ = torch.manual_seed(0)
        >>> cards = torch.tensor(cat_cardinalities(schema))  # codes of column j: 0 .. cards[j] - 1
        >>> x_num, x_cat = torch.randn(4, 0), (torch.rand(4, schema.n_cat) * cards).long()
        >>> targets = {"income": torch.randint(0, 2, (4,)), "marital": torch.randint(0, 5, (4,))}
        >>> loss, outputs = model.training_loss(x_num, x_cat, targets, lambda task, out, y: out.sum())
        >>> tuple(loss.shape), [tuple(w.shape) for w in model.last_branch_losses]  # 1 block, 3 branches
        ((), [(3,)])
        >>> model.fit_context(x_num, x_cat, targets)  # before forward: the rows to attend to (here the batch)
        >>> {name: tuple(y.shape) for name, y in model(x_num, x_cat).items()}
        {'income': (4,), 'marital': (4, 5)}
    """

    def __init__(
        self,
        *,
        schema: DatasetSchema,
        d_embedding: int = 16,
        n_blocks: int = 1,
        n_branches: int = 4,
        n_heads: int = 4,
        ffn_d_hidden: int = 256,
        dropout: float = 0.0,
        n_decoder_blocks: int = 1,
        decoder_ffn_d_hidden: int = 256,
        decoder_dropout: float = 0.0,
        ema_momentum: float = 0.9,
        context_size: int = 50_000,
        context_seed: int = 0,
    ) -> None:
        super().__init__(schema=schema)
        for name, value in [("n_blocks", n_blocks), ("n_branches", n_branches), ("n_heads", n_heads)]:
            if value < 1:
                raise ValueError(f"{name}={value} must be >= 1")
        if d_embedding % n_heads:
            raise ValueError(f"{d_embedding=} must be divisible by {n_heads=}")
        if n_decoder_blocks < 1 or ffn_d_hidden < 1 or decoder_ffn_d_hidden < 1 or context_size < 1:
            raise ValueError(
                f"{n_decoder_blocks=}, {ffn_d_hidden=}, {decoder_ffn_d_hidden=}, {context_size=} must be >= 1"
            )
        if not 0.0 <= ema_momentum < 1.0:
            raise ValueError(f"{ema_momentum=} must be in [0, 1)")
        dropout, decoder_dropout = check_dropout(dropout), check_dropout(decoder_dropout)
        self.ema_momentum, self.context_size, self.context_seed = ema_momentum, context_size, context_seed
        self.tokenizer = FeatureTokenizer(
            n_num=schema.n_num,
            cat_cardinalities=cat_cardinalities(schema),
            d_embedding=d_embedding,
            init="rtdl",
        )
        self.cls = nn.Parameter(torch.empty(d_embedding).uniform_(-(d_embedding**-0.5), d_embedding**-0.5))
        self.blocks = nn.ModuleList(
            _MOABlock(
                d=d_embedding,
                n_branches=n_branches,
                n_heads=n_heads,
                ffn_d_hidden=ffn_d_hidden,
                dropout=dropout,
            )
            for _ in range(n_blocks)
        )
        self.encoder_norm = nn.LayerNorm(d_embedding)
        self.decoder = nn.ModuleList(
            _IAILBlock(d=d_embedding, ffn_d_hidden=decoder_ffn_d_hidden, dropout=decoder_dropout)
            for _ in range(n_decoder_blocks)
        )
        # Label embedding layers (LEL): lookup for class labels (binary: 2 rows), linear for regression.
        self.lel = nn.ModuleDict()
        for t in schema.tasks:
            n_labels = {"binary": 2, "multiclass": t.n_classes or 0}.get(t.type, 0)
            embed = nn.Embedding(n_labels, d_embedding) if n_labels else nn.Linear(1, d_embedding)
            self.lel[module_key(t.name)] = embed
        self.predictor = nn.Linear(d_embedding, sum(self.d_out))  # one output block per task
        self._context: tuple[Tensor, dict[str, Tensor]] | None = None
        self.last_branch_losses: list[Tensor] = []  # per block, [n_branches], from the last training step

    def flops(self, inputs: tuple[Tensor, ...], output: dict[str, Tensor]) -> int:
        return 0  # its own work is glue ([CLS] concatenation, block averaging); blocks count themselves

    def _labels(self, targets: dict[str, Tensor]) -> Tensor:
        """Sum over tasks of the label embeddings: -> [N, d]."""
        parts = []
        for t in self.schema.tasks:
            y = targets[t.name]
            parts.append(
                self.lel[module_key(t.name)](y.float().view(-1, 1))
                if t.type == "regression"
                else self.lel[module_key(t.name)](y.long())
            )
        return torch.stack(parts).sum(0)

    def encode(
        self, x_num: Tensor, x_cat: Tensor, branch_loss: Callable[[Tensor], Tensor] | None = None
    ) -> Tensor:
        """-> [B, d]: the encoder output at [CLS]. With `branch_loss` (training), every block first
        updates its branch weights from branch_loss([n_branches, B, d] branch [CLS] tokens) -> [n_branches]."""
        z = F.relu(self.tokenizer(x_num, x_cat))
        z = torch.cat([self.cls.expand(z.shape[0], 1, -1), z], dim=1)  # (B, 1 + n_features, d)
        outs, self.last_branch_losses = [], []
        for block in self.blocks:
            z, losses = block(z, branch_loss, self.ema_momentum)
            if losses is not None:
                self.last_branch_losses.append(losses)
            outs.append(z)
        return self.encoder_norm(torch.stack(outs).mean(0))[:, 0]

    def _project(self, keys: Tensor, values: Tensor) -> list[tuple[Tensor, Tensor]]:
        return [block.project(keys, values) for block in typing.cast(list[_IAILBlock], self.decoder)]

    def _decode(
        self, q: Tensor, context: list[tuple[Tensor, Tensor]], exclude_self: bool
    ) -> dict[str, Tensor]:
        for block, (kp, vp) in zip(self.decoder, context):
            q = block(q, kp, vp, exclude_self)
        return self.split_outputs(self.predictor(q))

    def training_loss(
        self, x_num: Tensor, x_cat: Tensor, targets: dict[str, Tensor], task_loss_fn: TaskLossFn
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The batch is its own context (keys: its encodings, values: its labels, itself excluded)."""

        def total(outputs: dict[str, Tensor]) -> Tensor:
            return torch.stack([task_loss_fn(k, v, targets[k]) for k, v in outputs.items()]).sum()

        def branch_loss(cls: Tensor) -> Tensor:  # (n_branches, B, d) -> (n_branches,)
            return torch.stack([total(self.split_outputs(self.predictor(c))) for c in cls])

        z = self.encode(x_num, x_cat, branch_loss if self.training else None)
        outputs = self._decode(z, self._project(z, self._labels(targets)), exclude_self=True)
        return total(outputs), outputs

    @torch.no_grad()
    def fit_context(self, x_num: Tensor, x_cat: Tensor, targets: dict[str, Tensor]) -> None:
        """Encode (at most `context_size` rows of) the training set as the inference context."""
        n = x_num.shape[0]
        idx = torch.arange(n)
        if n > self.context_size:
            g = torch.Generator().manual_seed(self.context_seed)
            idx = torch.randperm(n, generator=g)[: self.context_size].sort().values
        was_training = self.training
        self.eval()
        keys = torch.cat([self.encode(x_num[i], x_cat[i]) for i in idx.to(x_num.device).split(4096)])
        self.train(was_training)
        self._context = (keys, {k: v[idx.to(v.device)] for k, v in targets.items()})

    def forward(self, x_num: Tensor, x_cat: Tensor) -> dict[str, Tensor]:
        if self._context is None:
            raise RuntimeError(
                "MAYA attends to the training set at inference: call fit_context(x_num, x_cat, targets) first"
            )
        keys, labels = self._context
        keys = keys.to(x_num.device)
        values = self._labels({k: v.to(x_num.device) for k, v in labels.items()})
        q = self.encode(x_num, x_cat)
        context = self._project(keys, values)
        chunks = [self._decode(c, context, exclude_self=False) for c in q.split(1024)]
        return {k: torch.cat([c[k] for c in chunks]) for k in chunks[0]}
