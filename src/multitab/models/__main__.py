"""`python -m multitab.models check <package.module:Class | name>`: a model class against the model contract
(multitab.models.contract), every check; one line per failure, exit status 3 when any fails.

    python -m multitab.models check own_model.nets:TwoExpertMMoE     # with PYTHONPATH holding own_model's folder
    python -m multitab.models check two_expert                      # a model params.yaml's `models:` declares
    python -m multitab.models check own_model.nets:TwoExpertMMoE --hparams examples/own_model/hparams.yaml

The constructor keywords: `--hparams FILE`'s `model:`, else those of the class's declaration in params.yaml
(`--params`, default params.yaml when there is one: `models.<name>.hparams`, inline or its file), else the
constructor's defaults. Importing the class runs its package's code.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path
from typing import Any

from multitab.config import ConfigError, load_params
from multitab.files.io import read_yaml_file
from multitab.models import ModelImportError, import_class
from multitab.models.contract import check_class
from multitab.runtime.exit_codes import BAD_INPUT


def _tuples(value: Any) -> Any:
    """YAML lists as tuples (as multitab.hparams reads a file: sequence keywords)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return {k: _tuples(v) for k, v in value.items()} if isinstance(value, dict) else value


def _file_keywords(path: Path) -> dict[str, Any]:
    data = read_yaml_file(path)
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise ConfigError(f"{path}: expected a mapping with `model:` (the constructor keywords)")
    return dict(_tuples(data["model"]))


def target(name: str, params: str | None, hparams: str | None) -> tuple[str, dict[str, Any] | None, bool | None]:
    """(import path, constructor keywords or None for the constructor's defaults, declared `epochs` or None) of
    `name`: an import path or a model params.yaml declares."""
    declared = None
    path = Path(params or "params.yaml")
    if params is not None or path.is_file():
        models = load_params(path).models  # ConfigError: a params.yaml that does not load
        declared = models.get(name) or next((d for d in models.values() if d.cls == name), None)
        if declared is None and ":" not in name:
            raise ConfigError(f"{path}: models: no model {name!r} declared (declared: {sorted(models)}); or give an "
                              "import path `package.module:Class`")
    if declared is None and ":" not in name:
        raise ConfigError(f"{name!r}: not an import path `package.module:Class` (no params.yaml here declares it)")
    cls = declared.cls if declared is not None else name
    epochs = None if declared is None else declared.epochs
    if hparams is not None:
        return cls, _file_keywords(Path(hparams)), epochs
    if declared is None:
        return cls, None, epochs
    if isinstance(declared.hparams, str):
        return cls, _file_keywords(path.parent / declared.hparams), epochs
    return cls, dict(_tuples(declared.hparams["model"])), epochs


def _defaults(cls: type[Any]) -> dict[str, Any]:
    """The constructor's keywords but `schema` at their defaults; ConfigError naming those without one."""
    params = [p for p in inspect.signature(cls.__init__).parameters.values()
              if p.name not in ("self", "schema") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    lacking = [p.name for p in params if p.default is p.empty]
    if lacking:
        raise ConfigError(f"{cls.__module__}:{cls.__name__}: keyword(s) {lacking} have no default: give them in a "
                          "hyperparameter file (--hparams FILE, with `model: {...}`) or declare the model in "
                          "params.yaml (`models:`, docs/extending.md)")
    return {p.name: p.default for p in params}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m multitab.models", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="check a model class against the model contract")
    c.add_argument("model", help="`package.module:Class`, or the name of a model params.yaml declares")
    c.add_argument("--params", default=None, help="params.yaml declaring it (default: ./params.yaml if present)")
    c.add_argument("--hparams", default=None, help="a YAML file whose `model:` holds the constructor keywords")
    a = p.parse_args(argv)
    try:
        path, keywords, epochs = target(a.model, a.params, a.hparams)
        cls = import_class(path)
        keywords = _defaults(cls) if keywords is None else keywords
    except (ConfigError, ModelImportError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return BAD_INPUT
    failures, facts = check_class(cls, keywords, epochs=epochs)
    for line in failures:
        print(f"{path}: {line}", file=sys.stderr)
    if failures:
        return BAD_INPUT
    counted = "" if facts.get("params") is None or facts.get("flops") is None else \
        f"; {facts['params']:,} parameters, {facts['flops']:,.0f} FLOPs per sample on the check's schema"
    checks = "outputs, gradients, overfit, determinism, batch of one, counted"
    print(f"{path}: keeps the model contract ({checks}){counted}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
