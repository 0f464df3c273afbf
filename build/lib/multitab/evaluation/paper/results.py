"""The numbers behind the paper's tables, from the runs: seed means, Δm (headline and per seed).

`PaperResults` answers "what is X for (dataset, model)" with a number or None (missing: a run absent, a seed
short, a value undefined, or the STL baseline itself incomplete). paper_tables.py lays those answers out
as the paper's tables.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import pandas as pd

from multitab.config.aggregate import AggregateConfig, SyntheticConfig
from multitab.datasets.schema import SCHEMAS
from multitab.evaluation.delta_m import UndefinedDeltaM, delta_m, delta_m_per_seed, task_gains_per_seed
from multitab.evaluation.paper.published import Published
from multitab.evaluation.paper.runs import RunSet
from multitab.evaluation.tables import MISSING

log = logging.getLogger(__name__)

METRIC_LABEL = {"binary": "AUC", "multiclass": "AUC", "regression": "EV"}


class PaperResults:
    def __init__(self, runs: RunSet, config: AggregateConfig, published: Published,
                 synthetic: dict[str, SyntheticConfig] | None = None) -> None:
        self.runs = runs
        self.config = config
        self.published = published
        self.synthetic = synthetic or {}

    # --------------------------------------------------------------------------------------- inputs
    def tasks(self, dataset: str) -> dict[str, str]:
        """task -> type, from the runs, else from the dataset registry (so an empty dataset still lists
        its tasks, each "missing")."""
        found = self.runs.task_types(dataset)
        if found:
            return dict(found)
        if dataset in SCHEMAS:
            return {t.name: t.type for t in SCHEMAS[dataset].tasks}
        return {}

    def standin(self, datasets: Sequence[str]) -> list[str]:
        """Those of `datasets` whose runs used stand-in data."""
        return [d for d in datasets if self.runs.standin(d)]

    def missing_text(self, dataset: str, model: str) -> str:
        n = len(self.runs.seeds(dataset))
        k = self.runs.n_found(dataset, model)
        return MISSING if k == 0 or n == 0 else f"{MISSING} ({k}/{n} seeds)"

    def lower_is_better(self, dataset: str) -> set[str]:
        if self.config.regression_metric == "mse":
            return {t for t, tt in self.tasks(dataset).items() if tt == "regression"}
        return set()

    def delta_inputs(self, dataset: str, model: str) -> pd.DataFrame | None:
        """Seeds x tasks of the metrics Δm uses: AUC, and EV or MSE (`regression_metric`)."""
        test = self.runs.matrix(dataset, model, "test")
        if test is None or self.config.regression_metric == "ev":
            return test
        mse = self.runs.matrix(dataset, model, "test_mse")
        if mse is None:
            return None
        test = test.copy()
        test[mse.columns] = mse
        return test

    # ------------------------------------------------------------------------------------ answers
    def mean(self, dataset: str, model: str, key: str = "test") -> pd.Series | None:
        m = self.runs.matrix(dataset, model, key)  # type: ignore[arg-type]
        return None if m is None else m.mean(axis=0)

    def std(self, dataset: str, model: str, key: str = "test") -> pd.Series | None:
        m = self.runs.matrix(dataset, model, key)  # type: ignore[arg-type]
        return None if m is None else m.std(axis=0, ddof=self.config.std_ddof)

    def delta_m(self, dataset: str, model: str) -> float | None:
        """Headline Δm (Table 3): seed-mean metrics against the STL seed-mean."""
        runs = self.delta_inputs(dataset, model)
        base = self.delta_inputs(dataset, self.config.baseline)
        if runs is None or base is None:
            return None
        try:
            return delta_m(runs.mean(axis=0).to_dict(), base.mean(axis=0).to_dict(), self.lower_is_better(dataset))
        except UndefinedDeltaM as e:  # printed as n/a: the runs exist, the value does not
            log.warning("%s / %s: %s", dataset, model, e)
            return math.nan

    def delta_m_per_seed(self, dataset: str, model: str) -> pd.Series | None:
        runs = self.delta_inputs(dataset, model)
        base = self.delta_inputs(dataset, self.config.baseline)
        if runs is None or base is None:
            return None
        try:
            return delta_m_per_seed(runs, base, pairing=self.config.pairing,
                                    lower_is_better=self.lower_is_better(dataset))
        except UndefinedDeltaM as e:
            log.warning("%s / %s: %s", dataset, model, e)
            return pd.Series(math.nan, index=runs.index)

    def task_gains_per_seed(self, dataset: str, model: str) -> pd.DataFrame | None:
        runs = self.delta_inputs(dataset, model)
        base = self.delta_inputs(dataset, self.config.baseline)
        if runs is None or base is None:
            return None
        try:
            return task_gains_per_seed(runs, base, pairing=self.config.pairing,
                                       lower_is_better=self.lower_is_better(dataset))
        except UndefinedDeltaM as e:
            log.warning("%s / %s: %s", dataset, model, e)
            return pd.DataFrame(math.nan, index=runs.index, columns=runs.columns)

    def delta_m_spread(self, dataset: str, model: str) -> tuple[float, float, int] | None:
        """(std, standard error, n) of the per-seed Δm."""
        per_seed = self.delta_m_per_seed(dataset, model)
        if per_seed is None:
            return None
        n = len(per_seed)
        if n - self.config.std_ddof < 1:
            return (math.nan, math.nan, n)
        std = float(per_seed.std(ddof=self.config.std_ddof))
        return std, std / math.sqrt(n), n
