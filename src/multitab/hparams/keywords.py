"""A model's keywords as a hyperparameter file gives them: which (every keyword of the constructor but those the
pipeline supplies, multitab.models.file_keywords) and of which type (the constructor's annotations).

    problems("mmoe", {"d_embedding": "fast", ...})   # [("d_embedding", "expected an integer, got 'fast'"), ...]

Types as YAML writes them: an integer is fine where a float is annotated, a list where a sequence is (`[64]`
for `Sequence[int]`), `null` only where the annotation allows None, a string only among a Literal's choices.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from multitab.files.yaml_data import short_repr
from multitab.hparams import Hparams

_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def keyword_types(model: str) -> dict[str, Any]:
    """Keyword -> annotation of every keyword a hyperparameter file of registered `model` gives, in the
    constructor's order (Any where it has none)."""
    from multitab.models import file_keywords, model_class

    hints = typing.get_type_hints(model_class(model).__init__)
    return {k: hints.get(k, Any) for k in file_keywords(model)}


def expected(annotation: Any) -> str:
    """What `annotation` asks for, in words (`an integer`, `null or a number`, `one of ['t_t', 'none']`)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return f"one of {list(args)}"
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else expected(a) for a in args)
    if _is_sequence(origin):
        return f"a list (each {expected(args[0] if args else Any)})"
    if annotation is Any or annotation is inspect.Parameter.empty:
        return "any value"
    return _WORDS.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _is_sequence(origin: Any) -> bool:
    return origin in (list, tuple, Sequence)


def fits(annotation: Any, value: Any) -> bool:
    """Whether a value read from YAML (lists as tuples, multitab.hparams) is of `annotation`'s type."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any or annotation is inspect.Parameter.empty:
        return True
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return any(value is None if a is type(None) else fits(a, value) for a in args)
    if _is_sequence(origin):
        if not isinstance(value, list | tuple):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:  # a fixed-length tuple
            return len(value) == len(args) and all(fits(a, v) for a, v in zip(args, value))
        return all(fits(args[0] if args else Any, v) for v in value)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    raise TypeError(f"annotation {annotation!r} cannot be checked against a YAML value")


def problems(model: str, values: Mapping[str, Any], *, complete: bool = True) -> list[tuple[str, str]]:
    """(keyword, what is wrong) of each keyword of `values` (a file's `model:`, or an overlay's keywords when not
    `complete`) that registered `model` does not take or whose value is not of its type, and, when `complete`,
    of each keyword it lacks; in the constructor's order, unknown ones last."""
    wanted = keyword_types(model)
    out = [(k, "missing (no constructor default is used)") for k in wanted if complete and k not in values]
    out += [(k, f"expected {expected(a)}, got {short_repr(values[k])}") for k, a in wanted.items()
            if k in values and not fits(a, values[k])]
    out += [(k, f"not a keyword of {model} (it takes {list(wanted)})") for k in values if k not in wanted]
    order = {k: i for i, k in enumerate(wanted)}
    return sorted(out, key=lambda p: order.get(p[0], len(order)))


# A class of the user's own without a hyperparameter file: the paper's shared optimiser (hparams/recipe/*.yaml)
OWN_CLASS_OPTIM = {"optimizer": "adam", "lr": 0.001, "weight_decay": 1e-05, "max_epochs": 100}


def own_class_hparams(path: str) -> Hparams:
    """The hyperparameters of `MultiTaskEstimator("package.module:Class")` without `hparams`: the constructor's
    defaults (`model_params` gives or replaces keywords; one with neither is refused, naming it) and
    OWN_CLASS_OPTIM for a torch module. Importing the class runs its package's code."""
    import torch

    from multitab.models import RUN_KEYWORDS, model_class

    cls = model_class(path)  # multitab.models.ModelImportError (an ImportError) naming the path
    skip = ("self", "schema", *(() if issubclass(cls, torch.nn.Module) else RUN_KEYWORDS))
    given = {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()
             if k not in skip and p.default is not p.empty and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    optim = dict(OWN_CLASS_OPTIM) if issubclass(cls, torch.nn.Module) else None
    return Hparams(given, optim, f"{path} (constructor defaults)", None)
