"""The model contract (models/base.py) checked on any class: a model of the registry or a user's own
(`package.module:Class`), built with given constructor keywords on a small schema of three tasks (binary, 3-class
multiclass, regression) and mixed features. Each failure is one line naming what broke and how to fix it.

    failures, facts = check_class(TwoExpertMMoE, {"d_embedding": 8, ...})   # [] and {"params": ..., "flops": ...}
    python -m multitab.models check own_model.nets:TwoExpertMMoE            # the same, every check (exit 3: failed)

The checks (tests/test_model_contract.py checks the registry's models the same way):
- construct: `Model(schema=..., **keywords)`;
- outputs: one per task, keyed by the schema's task names in order, float, shaped binary [B], multiclass
  [B, n_classes], regression [B], finite; on mixed, categorical-only and numerical-only features;
- gradients: every parameter gets a non-zero gradient from the summed task losses;
- overfit (full only): 400 Adam steps on one batch of 64 rows bring every task's loss below half of what the
  best input-blind prediction scores;
- determinism (full only): the same seed gives the same weights and predictions, another seed others;
- batch of one: a training step on one row and a prediction of one row are finite;
- counted: parameters and forward FLOPs per sample (multitab.models.counting: a module holding parameters of its
  own needs a `flops` method).
`quick=True` leaves out overfitting and determinism: what `python -m multitab.runs` runs on every declared model.
A model that is no torch module (it trains itself, as XGBoost) must have `fit`, `predict` and `save`; it is
fitted on the batch and its predictions checked as the outputs are.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multitab.datasets.schema import DatasetSchema, Feature, RawColumn, Task
from multitab.models.counting import complexity

STEPS = 400  # the overfitting check's Adam steps (tests/test_model_contract.py: the same)
RUN_SETTINGS = {"seed": 0, "early_stopping_rounds": 5, "device": "cpu", "n_threads": 1}  # a self-training model's


def contract_schema(n_num: int = 3, cards: tuple[int, ...] = (4, 3)) -> DatasetSchema:
    """The check's schema: `n_num` numerical features, categorical ones of cardinalities `cards`, and the tasks
    b (binary), m (multiclass, 3 classes), r (regression)."""
    feats = tuple(Feature(f"n{i}", "numerical") for i in range(n_num)) + tuple(
        Feature(f"c{i}", "categorical", cardinality=c) for i, c in enumerate(cards))
    tasks = (Task("b", "binary", column="b"), Task("m", "multiclass", column="m", n_classes=3),
             Task("r", "regression", column="r"))
    raw = tuple(RawColumn(f.name, "float", "feature") for f in feats)
    return DatasetSchema(name="contract", raw_columns=raw, features=feats, tasks=tasks)


SCHEMA = contract_schema()
SCHEMAS = {"mixed features": SCHEMA, "categorical features only": contract_schema(0, (5, 2, 3)),
           "numerical features only": contract_schema(4, ())}


def batch(schema: DatasetSchema, n: int, seed: int = 0) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    g = torch.Generator().manual_seed(seed)
    x_num = torch.randn(n, schema.n_num, generator=g)
    cards = [f.cardinality or 1 for f in schema.features if f.kind == "categorical"]
    x_cat = (torch.stack([torch.randint(0, c, (n,), generator=g) for c in cards], 1) if cards
             else torch.zeros(n, 0, dtype=torch.long))
    y = {"b": torch.randint(0, 2, (n,), generator=g).float(), "m": torch.randint(0, 3, (n,), generator=g),
         "r": torch.randn(n, generator=g)}
    return x_num, x_cat, y


def task_loss(name: str, out: Tensor, y: Tensor) -> Tensor:
    if name == "b":
        return F.binary_cross_entropy_with_logits(out, y.float())
    if name == "m":
        return F.cross_entropy(out, y)
    return F.mse_loss(out, y)


class Broken(Exception):
    """One check failed; the message is its line."""


def _call(what: str, fn: Callable[[], Any]) -> Any:
    """`fn()`, the user's code: an exception becomes the failure line of check `what` (no traceback)."""
    try:
        return fn()
    except Broken:
        raise
    except Exception as e:  # noqa: BLE001 - any error of the model's code is a failed check, said in one line
        raise Broken(f"{what}: {type(e).__name__}: {e}") from None


def _outputs(out: Any, schema: DatasetSchema, n: int, what: str) -> dict[str, Any]:
    """`out` checked against the contract (module docstring); Broken names the first task that breaks it."""
    if not isinstance(out, Mapping):
        raise Broken(f"{what}: the model returned a {type(out).__name__}, not a dict {{task name: output}} (one "
                     "entry per task of the schema: forward(x_num, x_cat) -> dict)")
    names = [t.name for t in schema.tasks]
    missing = [t for t in names if t not in out]
    if missing:
        raise Broken(f"{what}: task {missing[0]!r} missing from the outputs {list(out)} (the schema's tasks are "
                     f"{names}: give every task an output, keyed by its name)")
    extra = [k for k in out if k not in names]
    if extra:
        raise Broken(f"{what}: output {extra[0]!r} is no task of the schema ({names}): key outputs by task name")
    if list(out) != names:
        raise Broken(f"{what}: outputs in the order {list(out)}, not the schema's {names}: add them in task order")
    for t in schema.tasks:
        v = out[t.name]
        want = (n, t.n_classes) if t.type == "multiclass" else (n,)
        shape = tuple(getattr(v, "shape", ()))
        if shape != want:
            kind = f"multiclass, {t.n_classes} classes: logits [B, n_classes]" if t.type == "multiclass" else \
                f"{t.type}: {'logits' if t.type == 'binary' else 'prediction'} [B]"
            raise Broken(f"{what}: task {t.name!r} ({kind}) has shape {shape}, expected {want} for a batch of {n} "
                         "(squeeze a trailing 1 for a binary or regression task)")
        if not _floating(v):
            raise Broken(f"{what}: task {t.name!r}'s output is of type {getattr(v, 'dtype', type(v))}, not float: "
                         "return logits or values, not labels")
        if not bool(np.isfinite(np.asarray(v.detach() if isinstance(v, Tensor) else v, dtype=float)).all()):
            raise Broken(f"{what}: task {t.name!r}'s output holds NaN or infinity on a random batch")
    return dict(out)


def _floating(v: Any) -> bool:
    return v.is_floating_point() if isinstance(v, Tensor) else bool(np.issubdtype(np.asarray(v).dtype, np.floating))


def _loss(model: nn.Module, x_num: Tensor, x_cat: Tensor, y: dict[str, Tensor], schema: DatasetSchema,
          what: str) -> tuple[Tensor, dict[str, Tensor]]:
    """The training loss as the trainer computes it (the model's `training_loss` hook, or the summed task losses)
    and the outputs, checked."""
    hook = callable(getattr(model, "training_loss", None))
    if hook:
        loss, out = _call(what, lambda: model.training_loss(x_num, x_cat, y, task_loss))  # type: ignore[operator]
    else:
        out = _call(what, lambda: model(x_num, x_cat))
    out = _outputs(out, schema, len(x_num), what)
    if not hook:
        loss = sum(task_loss(k, v, y[k]) for k, v in out.items())
    return loss, out


def _predict(model: nn.Module, x_num: Tensor, x_cat: Tensor, context: tuple[Any, ...], what: str) -> dict[str, Tensor]:
    if callable(getattr(model, "fit_context", None)):
        _call(what, lambda: model.fit_context(*context))  # type: ignore[operator]
    with torch.no_grad():
        return _call(what, lambda: model(x_num, x_cat))  # type: ignore[no-any-return]


def _build(make: Callable[[DatasetSchema], Any], schema: DatasetSchema, seed: int = 0) -> Any:
    torch.manual_seed(seed)
    return _call("construct", lambda: make(schema))


def _shapes_and_gradients(make: Callable[[DatasetSchema], Any]) -> None:
    for name, schema in SCHEMAS.items():
        model = _build(make, schema)
        x_num, x_cat, y = batch(schema, 10)
        model.train()
        loss, out = _loss(model, x_num, x_cat, y, schema, f"outputs ({name})")
        if schema is SCHEMA:
            params = list(model.named_parameters())
            if not params:
                raise Broken("gradients: the model has no parameters (nn.Parameter or layers registered as "
                             "attributes): nothing would train")
            detached = [k for k, v in out.items() if not v.requires_grad]
            if detached:
                raise Broken(f"gradients: task {detached[0]!r}'s output does not depend on any parameter (detached, "
                             "or computed without the model's layers): it cannot learn")
            _call("gradients", loss.backward)
            none = [n for n, p in params if p.grad is None or not bool(p.grad.abs().sum() > 0)]
            if none:
                raise Broken(f"gradients: {len(none)} of {len(params)} parameters get no gradient from the task "
                             f"losses ({', '.join(none[:3])}{' ...' if len(none) > 3 else ''}): a parameter off "
                             "the path from the inputs to the outputs, or a .detach() / torch.no_grad() in forward")
        model.eval()
        pred = _predict(model, x_num, x_cat, (x_num, x_cat, y), f"outputs in evaluation mode ({name})")
        _outputs(pred, schema, len(x_num), f"outputs in evaluation mode ({name})")


def _overfits(make: Callable[[DatasetSchema], Any]) -> None:
    model = _build(make, SCHEMA)
    x_num, x_cat, y = batch(SCHEMA, 64)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1 - k / STEPS)
    model.train()
    for _ in range(STEPS):
        loss, _ = _loss(model, x_num, x_cat, y, SCHEMA, "overfit")
        opt.zero_grad()
        _call("overfit", loss.backward)
        opt.step()
        schedule.step()
    with torch.no_grad():
        _, out = _loss(model, x_num, x_cat, y, SCHEMA, "overfit")
    blind = blind_losses(y)
    ratios = {k: task_loss(k, v, y[k]).item() / blind[k] for k, v in out.items()}
    worst = max(ratios, key=lambda k: ratios[k])
    if not ratios[worst] < 0.5:
        raise Broken(f"overfit: after {STEPS} Adam steps on one batch of 64 rows the loss of task {worst!r} is "
                     f"{ratios[worst]:.2f} of the best input-blind prediction's (below 0.5 expected): its output "
                     "hardly reads the inputs (a path cut, an activation at the output, a frozen layer)")


def blind_losses(y: dict[str, Tensor]) -> dict[str, float]:
    """The loss of the best prediction that ignores the inputs: label entropy (b, m), target variance (r)."""
    p = y["b"].float().mean()
    shares = torch.bincount(y["m"], minlength=3).float() / len(y["m"])
    shares = shares[shares > 0]
    return {"b": float(-(p * p.log() + (1 - p) * (1 - p).log())), "m": float(-(shares * shares.log()).sum()),
            "r": float(y["r"].var(unbiased=False))}


def _deterministic(make: Callable[[DatasetSchema], Any]) -> None:
    x_num, x_cat, y = batch(SCHEMA, 16)
    runs = []
    for _ in range(2):
        model = _build(make, SCHEMA, seed=3)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        torch.manual_seed(5)
        for _ in range(2):
            loss, _ = _loss(model, x_num, x_cat, y, SCHEMA, "determinism")
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        runs.append(_predict(model, x_num, x_cat, (x_num, x_cat, y), "determinism"))
    differ = [k for k in runs[0] if not torch.equal(runs[0][k], runs[1][k])]
    if differ:
        raise Broken(f"determinism: two runs under the same seed predict task {differ[0]!r} differently: draw every "
                     "random number from torch's generator (no numpy / random / time in the model)")
    other = _predict(_build(make, SCHEMA, seed=4).eval(), x_num, x_cat, (x_num, x_cat, y), "determinism")
    same = _predict(_build(make, SCHEMA, seed=3).eval(), x_num, x_cat, (x_num, x_cat, y), "determinism")
    if all(torch.equal(other[k], same[k]) for k in same):
        raise Broken("determinism: two seeds give the same predictions: initialise the weights from torch's "
                     "generator (a constant initialisation gives every seed one model)")


def _batch_of_one(make: Callable[[DatasetSchema], Any]) -> None:
    model = _build(make, SCHEMA)
    x_num, x_cat, y = batch(SCHEMA, 1)
    model.train()
    loss, out = _loss(model, x_num, x_cat, y, SCHEMA, "batch of one (training)")
    _call("batch of one (training)", loss.backward)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not torch.isfinite(loss) or not all(torch.isfinite(g).all() for g in grads):
        raise Broken("batch of one (training): the loss or a gradient is NaN or infinite on one row (a batch "
                     "statistic, e.g. BatchNorm or a variance over the batch, needs two rows)")
    model.eval()
    pred = _predict(model, x_num, x_cat, batch(SCHEMA, 8, seed=1), "batch of one (evaluation)")
    _outputs(pred, SCHEMA, 1, "batch of one (evaluation)")


def _counted(model: Any) -> dict[str, Any]:
    try:
        c = complexity(model, SCHEMA)
    except ValueError as e:
        raise Broken(f"counted: {str(e).removeprefix('complexity: ')}") from None
    except Exception as e:  # noqa: BLE001 - the model's own flops() failed
        raise Broken(f"counted: {type(e).__name__}: {e}") from None
    return {"params": c["params"], "flops": c["flops"]}


def _self_training(make: Callable[[DatasetSchema], Any]) -> dict[str, Any]:
    """The contract of a model that trains itself (fit / predict / save, as XGBoost)."""
    model = _build(make, SCHEMA)
    lacking = [m for m in ("fit", "predict", "save") if not callable(getattr(model, m, None))]
    if lacking:
        raise Broken(f"construct: {type(model).__name__} is no torch.nn.Module and has no {', '.join(lacking)}: a "
                     "model is a torch module (forward(x_num, x_cat) -> {task: output}) or trains itself "
                     "(fit, predict, save: models/base.py)")
    x_num, x_cat, y = batch(SCHEMA, 64)
    v_num, v_cat, v = batch(SCHEMA, 32, seed=1)
    as_np = lambda d: {k: t.numpy() for k, t in d.items()}  # noqa: E731
    _call("fit", lambda: model.fit(x_num.numpy(), x_cat.numpy(), as_np(y), x_num_val=v_num.numpy(),
                                   x_cat_val=v_cat.numpy(), targets_val=as_np(v)))
    _outputs(_call("predict", lambda: model.predict(v_num.numpy(), v_cat.numpy())), SCHEMA, 32, "predict")
    _outputs(_call("batch of one", lambda: model.predict(v_num[:1].numpy(), v_cat[:1].numpy())), SCHEMA, 1,
             "batch of one")
    with tempfile.TemporaryDirectory(prefix="multitab-contract-") as tmp:
        _call("save", lambda: model.save(Path(tmp) / "model"))
    return _counted(model)


def check_class(cls: type[Any], keywords: Mapping[str, Any], *, quick: bool = False,
                epochs: bool | None = None) -> tuple[list[str], dict[str, Any]]:
    """(failure lines, facts) of `cls` built with constructor `keywords` (module docstring): the lines are empty
    when it keeps the contract; facts: `torch` (a torch module), `params` and `flops` per sample when counted.
    `epochs`: what its declaration says (params.yaml `models.<name>.epochs`), checked against what it is."""
    torch_module = isinstance(cls, type) and issubclass(cls, nn.Module)
    facts: dict[str, Any] = {"torch": torch_module}
    extra = RUN_SETTINGS if not torch_module else {}
    make = lambda schema: cls(schema=schema, **keywords, **extra)  # noqa: E731
    if epochs is not None and epochs != torch_module:
        return [f"epochs: declared {str(epochs).lower()}, but {cls.__name__} is "
                + ("a torch module, which the pipeline trains in epochs: declare `epochs: true`" if torch_module else
                   "no torch module: it trains itself (fit / predict), with no epochs: declare `epochs: false`")], facts
    failures: list[str] = []
    try:
        if not torch_module:
            facts.update(_self_training(make))
            return failures, facts
        _shapes_and_gradients(make)
    except Broken as e:
        return [str(e)], facts  # the model cannot be built or run: the other checks would say the same
    steps: list[Callable[[Callable[[DatasetSchema], Any]], None]] = [_batch_of_one]
    if not quick:
        steps = [_overfits, _deterministic, *steps]
    for step in steps:
        try:
            step(make)
        except Broken as e:
            failures.append(str(e))
    try:
        facts.update(_counted(_build(make, SCHEMA)))
    except Broken as e:
        failures.append(str(e))
    return failures, facts
