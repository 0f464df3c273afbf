"""STEM: Shared and Task-specific EMbeddings (Su et al., "Ads recommendation in a collapsed and
entangled world", KDD 2024), as the MultiTab paper describes it ("Related Works", "Baselines").

Every task has its own embedding of the inputs and there is one shared embedding (T + 1 tokenizers).
Task t's experts read task t's embedding, the shared experts read the shared embedding. Task t's gate
(from task t's embedding) mixes *all* experts, but the other tasks' experts enter through a
stop-gradient, so task t's loss never updates another task's experts or embedding; a shared gate mixes
every expert for the shared path (`ExtractionLayer(gate_all_experts=True)` in mlp_blocks.py).

Shapes follow the authors' code, so parameter counts equal theirs (docs/deviations.md, Higgs:
1,246,473; MultiTab-Bench example: 3,168,407). The T + 1 embeddings are one FeatureTokenizer of width
(T + 1) * d_embedding, split afterwards: the same parameters and function as T + 1 tokenizers in one op.
# NOTE[DIFF] (docs/deviations.md D5) (from the STEM paper, kept from the authors' code): each tower reads
# [task output, shared output] concatenated (2 * expert_d_hidden[-1] wide), and the shared gate is kept in the
# last layer. The shared output mixes every expert without stop-gradient, so through it task t's loss does
# reach the other tasks' experts and embeddings: the stop-gradient holds only inside the task gates. The STEM
# paper's design (towers read the task outputs alone; with one layer, task t's loss never reaches task s's
# experts or embedding) is `towers_read_shared=False`.
# NOTE[DIFF] (docs/deviations.md D6) (from the authors' code): their task gates also detach the shared experts
# (a test against index -1 that never matches), so shared experts learn only through the shared path. We
# follow the paper (shared experts get task gradients); `stop_gradient_shared=True` reproduces their code.
"""

from __future__ import annotations

from collections.abc import Sequence

from multitab.datasets.schema import DatasetSchema
from multitab.models._extraction import ExtractionModel


class STEM(ExtractionModel):
    """Shared and task-specific embeddings with all-expert, stop-gradient gating.

    forward(x_num [B, n_num] float, x_cat [B, n_cat] long) -> {task: [B] (binary logits, regression) or
    [B, n_classes] (multiclass logits)}.

    Shape:
        - ``x_num``: ``(B, n_num)``, float32, the numerical features in schema order (``(B, 0)`` if none).
        - ``x_cat``: ``(B, n_cat)``, int64, the categorical codes in schema order, column j in
          ``0 .. cardinality_j - 1`` of the schema the model was built with (in processed data code 0 is
          reserved for values unseen in train); ``(B, 0)`` if none.
        - output: ``{task: Tensor}`` in the schema's task order, float32: ``(B,)`` for a binary task
          (logits) or a regression task (predictions), ``(B, C)`` for a C-class task (logits).
        - inside: T + 1 embeddings of the features (T tasks and a shared one), each concatenated
          ``(B, (n_num + n_cat) * d_embedding)``; every expert gives ``(B, expert_d_hidden[-1])``; a tower
          reads ``(B, 2 * expert_d_hidden[-1])`` (task and shared outputs) or, with
          ``towers_read_shared=False``, ``(B, expert_d_hidden[-1])``.
        - rows: the hidden layers' BatchNorm normalises with the batch's statistics in training mode, so
          there a row's outputs depend on the other rows of its batch (a batch of one row uses the running
          statistics); in evaluation mode each row's outputs depend on that row alone.

    Examples:
        >>> import torch
        >>> from multitab.datasets.schema import get_schema
        >>> from multitab.models.stem import STEM
        >>> schema = get_schema("higgs")  # 17 numerical, 4 categorical (codes 0..2); binary + 7 regression
        >>> model = STEM(schema=schema, d_embedding=4, expert_d_hidden=(32, 16), tower_d_hidden=(8,))
        >>> _ = torch.manual_seed(0)
        >>> x_num, x_cat = torch.randn(4, schema.n_num), torch.randint(0, 3, (4, schema.n_cat))
        >>> {name: tuple(y.shape) for name, y in model(x_num, x_cat).items()}  # doctest: +NORMALIZE_WHITESPACE
        {'target': (4,), 'm_jj': (4,), 'm_jjj': (4,), 'm_lv': (4,), 'm_jlv': (4,),
         'm_bb': (4,), 'm_wbb': (4,), 'm_wwbb': (4,)}
    """

    def __init__(
        self,
        *,
        schema: DatasetSchema,
        d_embedding: int = 16,
        n_layers: int = 1,
        n_task_experts: int = 1,
        n_shared_experts: int = 1,
        expert_d_hidden: Sequence[int] = (256, 128),
        tower_d_hidden: Sequence[int] = (64,),
        dropout: float = 0.0,
        towers_read_shared: bool = True,
        stop_gradient_shared: bool = False,
    ) -> None:
        super().__init__(
            schema=schema, d_embedding=d_embedding, n_layers=n_layers, n_task_experts=n_task_experts,
            n_shared_experts=n_shared_experts, expert_d_hidden=expert_d_hidden, tower_d_hidden=tower_d_hidden,
            dropout=dropout, towers_read_shared=towers_read_shared, task_embeddings=True, gate_all_experts=True,
            min_task_experts=1, stop_gradient_shared=stop_gradient_shared,
        )
