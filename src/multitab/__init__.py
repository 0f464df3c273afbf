"""multitab: a benchmark pipeline for multitask learning on tabular data (MultiTab, AAAI'26).

`from multitab import MultiTaskEstimator`: the models as a scikit-learn estimator (multitab.estimator), imported
on first use so that `import multitab` stays light (the stages' and the checks' start-up import no torch).
"""

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~20 ms): type checkers take the name as true

if TYPE_CHECKING:  # type checkers see the class; at run time __getattr__ imports it on first use
    from multitab.estimator import MultiTaskEstimator

__version__ = "0.1.0"
__all__ = ["MultiTaskEstimator", "__version__"]


def __getattr__(name: str) -> object:
    if name == "MultiTaskEstimator":
        from multitab.estimator import MultiTaskEstimator

        return MultiTaskEstimator
    raise AttributeError(f"module 'multitab' has no attribute {name!r}")
