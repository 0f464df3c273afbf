"""Every registered model documents its shapes and shows itself at work: its class docstring has a
``Shape:`` section and a ``>>>`` example, and the examples of the models package run here as doctests
(so ``make test`` runs them).

The doctests are run by this file rather than by ``--doctest-modules`` in pyproject.toml: the modules are
imported by name (the installed package, whatever the import mode or layout), under this folder's
conftest.py, and nothing else changes in what pytest collects (``--doctest-modules`` in addopts would
also import every test file as a doctest module and apply to any path passed to pytest).
Examples print shapes, dtypes, keys and counts only, never float values, which differ in the last bits
between CPUs (their float kernels)."""

from __future__ import annotations

import doctest
import importlib
import io
import pkgutil
import re
import types

import pytest
import torch

import multitab.models
from multitab.models import MODELS

SHAPE = re.compile(r"^\s*Shape:\s*$", re.M)
EXAMPLE = re.compile(r"^\s*>>> ", re.M)

# Every module of the models package, and the module of every registered class (wherever it lives).
MODULES = sorted(
    {"multitab.models"}
    | {m.name for m in pkgutil.iter_modules(multitab.models.__path__, "multitab.models.")}
    | {cls.__module__ for cls in MODELS.values()}
)


def missing_docs(cls: type) -> list[str]:
    """What the class docstring lacks (the class's own docstring: one is never inherited here)."""
    doc = cls.__dict__.get("__doc__")
    if not doc:
        return ["no docstring"]
    return [what for what, pattern in (("no Shape: section", SHAPE), ("no >>> example", EXAMPLE))
            if not pattern.search(doc)]


def run_doctests(module: types.ModuleType) -> tuple[int, int, str]:
    """(examples run, examples failed, doctest's report) for the docstrings defined in `module`. The torch
    random state is restored afterwards (the examples seed it)."""
    runner = doctest.DocTestRunner(verbose=False)
    report = io.StringIO()
    with torch.random.fork_rng(devices=[]):
        for test in doctest.DocTestFinder().find(module):
            runner.run(test, out=report.write)
    return runner.tries, runner.failures, report.getvalue()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_registered_model_documents_shapes_with_an_example(name: str) -> None:
    assert not missing_docs(MODELS[name]), f"{MODELS[name].__qualname__}: {missing_docs(MODELS[name])}"


class _Bare:
    pass


class _NoShape:
    """A model.

    Examples:
        >>> 1 + 1
        2
    """


class _NoExample:
    """A model.

    Shape:
        - output: ``(B,)``.
    """


@pytest.mark.parametrize(("cls", "expected"), [
    (_Bare, ["no docstring"]),
    (type("_Inherits", (_NoShape,), {}), ["no docstring"]),  # a base class's docstring does not count
    (_NoShape, ["no Shape: section"]),
    (_NoExample, ["no >>> example"]),
])
def test_the_docstring_check_catches_what_is_missing(cls: type, expected: list[str]) -> None:
    assert missing_docs(cls) == expected


@pytest.mark.parametrize("module_name", MODULES)
def test_the_examples_of_the_models_run(module_name: str) -> None:
    module = importlib.import_module(module_name)
    tries, failures, report = run_doctests(module)
    assert failures == 0, f"{module_name}: {failures} of {tries} examples failed:\n{report}"
    has_model = any(cls.__module__ == module_name for cls in MODELS.values())
    assert tries or not has_model, f"{module_name} defines a registered model but runs no example"


def test_the_doctest_runner_reports_a_failing_example() -> None:
    fake = types.ModuleType("fake_model_module")
    fake.Model = type("Model", (), {"__module__": fake.__name__, "__doc__": """
        >>> (4, 2)
        (4, 3)
        >>> len("ok")
        2
    """})
    tries, failures, report = run_doctests(fake)
    assert (tries, failures) == (2, 1)
    assert "Expected:\n    (4, 3)\nGot:\n    (4, 2)" in report
