"""The dataset registry: every column with its kind, every task with its type.

Everything downstream (stand-ins, validation suites, model input sizes, metrics, tables) derives from
these objects; nothing re-types them. Facts: the datasets' sources (UCI HIGGS, ACS Income, AliExpress)
and the paper's Table 1.

Two views of a dataset:
- raw: the columns of the source files (`RawColumn`), as the real files name and type them;
- canonical: the input features (`Feature`, after dropping ids and constant columns) followed by one
  column per task (`Task`), named by the task (`click`, `income`, `m_jj` ...). `split@D` writes it.

Facts and estimates. What each release publishes is a *fact* and is enforced (a file that breaks it is
the wrong file): column names and order, label sets, Higgs' per-jet b-tag levels, which AliExpress columns
are constant. Everything else is an *estimate* and is only compared with what the data says (validation
reports a difference as a warning or an error by the per-dataset policy in params.yaml): the AliExpress
cardinalities (`Feature.cardinality` with `cardinality_is_estimate`), Table 1's class balance
(`Task.class_ratio`) and the plausible ranges (`Feature.low/high` of numerical features, `Task.low/high`).
Encoders and embedding sizes always come from the training split, never from an estimate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

FeatureKind = Literal["numerical", "categorical"]
TaskType = Literal["binary", "multiclass", "regression"]
RawDtype = Literal["float", "int"]


# Level values are matched within this distance (files round the published float32 values differently).
LEVEL_TOLERANCE = 1e-3


@dataclass(frozen=True)
class RawColumn:
    """A column of the source files. `role`: feature input, task label source, or dropped."""

    name: str
    dtype: RawDtype
    role: Literal["feature", "label", "drop"]


@dataclass(frozen=True)
class Feature:
    """An input feature. For categorical features `cardinality` counts the known values of the real
    data (raw); processed data adds one reserved index for values unseen in train (see meta.json)."""

    name: str
    kind: FeatureKind
    cardinality: int | None = None
    # Plausible range of the raw values (for stand-ins and validation); None = unbounded.
    low: float | None = None
    high: float | None = None
    # Raw values of a categorical column stored as floats (Higgs' b-tags): canonical code i = levels[i].
    # A fact: acquire rejects a missing value or a value at none of the levels (file, column, line).
    levels: tuple[float, ...] | None = None
    # The cardinality (and code range) is a guess, not published: validation compares val/test codes
    # with train's range instead of enforcing it (AliExpress). Such columns hold long-tailed ids: values
    # unseen in train are expected in val/test (preprocessing maps them to the reserved index 0), and are
    # judged against the rate train itself predicts (validation's `unseen_ids` policy group).
    cardinality_is_estimate: bool = False
    # A declared numerical feature with missing values (features.missing: median): validate_raw lets them pass,
    # preprocess fills them with the training split's median (meta.json `imputed`).
    imputed: bool = False

    def level_code(self, values: Any) -> tuple[np.ndarray, np.ndarray]:
        """Codes 0..len(levels)-1 of raw level values, and a mask of values at none of the levels (or NaN)."""
        assert self.levels is not None
        v = np.asarray(values, dtype=np.float64)
        levels = np.asarray(self.levels, dtype=np.float64)
        idx = np.abs(v[:, None] - levels[None, :]).argmin(axis=1) if len(v) else np.zeros(0, np.int64)
        with np.errstate(invalid="ignore"):
            bad = ~(np.abs(v - levels[idx]) <= LEVEL_TOLERANCE)
        return idx.astype(np.int64), bad


@dataclass(frozen=True)
class Task:
    """A prediction target derived from raw column `column` by `rule`:
    identity (binary 0/1 or regression value), `threshold` (value > threshold -> 1), or
    `codes` (multiclass: raw codes listed in `codes` map to classes 0..n-1 in that order)."""

    name: str
    type: TaskType
    column: str
    n_classes: int | None = None
    threshold: float | None = None
    codes: tuple[int, ...] | None = None
    # Class shares in percent from the paper's Table 1 (binary: (neg, pos)); None for regression. An estimate.
    class_ratio: tuple[float, ...] | None = None
    # Plausible range of a regression target (an estimate; validation also checks robust train statistics).
    low: float | None = None
    high: float | None = None

    @property
    def metric(self) -> str:
        return "ev" if self.type == "regression" else "auc"


@dataclass(frozen=True)
class DatasetSchema:
    name: str
    raw_columns: tuple[RawColumn, ...]
    features: tuple[Feature, ...]
    tasks: tuple[Task, ...]
    # Source files of the raw data: AliExpress keeps its official train/test files.
    raw_files: tuple[str, ...] = ("data",)
    # Expected real row counts per raw file (for validation of `remote`).
    real_rows: Mapping[str, int] = field(default_factory=dict)
    headerless: bool = False  # Higgs' CSV has no header row
    # Identical records are part of the data's nature: survey microdata (ACS) holds different people who
    # gave the same coarse answers, so rows that repeat within a split, and val/test rows equal to a train
    # row, are expected there (validation.raw.repeated_records_max_fraction). Physics events (Higgs) and
    # search logs (AliExpress, with their continuous features) do not repeat: a repeat is a copied row.
    records_repeat: bool = False

    @property
    def n_num(self) -> int:
        return sum(f.kind == "numerical" for f in self.features)

    @property
    def n_cat(self) -> int:
        return sum(f.kind == "categorical" for f in self.features)

    @property
    def feature_names(self) -> list[str]:
        return [f.name for f in self.features]

    @property
    def task_names(self) -> list[str]:
        return [t.name for t in self.tasks]

    @property
    def canonical_columns(self) -> list[str]:
        return self.feature_names + self.task_names

    def task(self, name: str) -> Task:
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(f"dataset {self.name!r} has no task {name!r}; tasks: {self.task_names}")


# --------------------------------------------------------------------------------------------------
# Higgs: 21 low-level inputs (17 numerical + 4 jet b-tags as categorical), label + 7 high-level targets.
_HIGGS_LOW = ["lepton_pT", "lepton_eta", "lepton_phi", "missing_energy_magnitude", "missing_energy_phi"]
for _j in range(1, 5):
    _HIGGS_LOW += [f"jet{_j}_pt", f"jet{_j}_eta", f"jet{_j}_phi", f"jet{_j}_btag"]
_HIGGS_HIGH = ["m_jj", "m_jjj", "m_lv", "m_jlv", "m_bb", "m_wbb", "m_wwbb"]


# The b-tag of each jet takes three values in the UCI release, 0 and two levels of its own (the second is
# twice the first): jet 1 {0, 1.0865, 2.1731}, jet 2 {0, 1.1074, 2.2149}, jet 3 {0, 1.2741, 2.5482},
# jet 4 {0, 1.5510, 3.1020} (the raw b-tag 0/1/2 times a per-jet scale, so 0 stays 0 and the middle level is
# half the top one: exactly so for jets 1 and 2). The four top levels, and jet 1's and jet 2's middle levels,
# are as printed in public copies of HIGGS.csv's first lines; jets 3 and 4's middle levels are half the top
# (not seen printed). Values are matched within LEVEL_TOLERANCE.
HIGGS_BTAG_TOP = {1: 2.1730761528015137, 2: 2.214872121810913, 3: 2.548224449157715, 4: 3.101961374282837}


def _higgs_feature(name: str) -> Feature:
    if name.endswith("_btag"):
        top = HIGGS_BTAG_TOP[int(name[3])]
        return Feature(name, "categorical", cardinality=3, levels=(0.0, top / 2, top))
    if name.endswith("_phi"):
        return Feature(name, "numerical", low=-1.75, high=1.75)
    if name.endswith("_eta"):
        return Feature(name, "numerical", low=-3.0, high=3.0)
    return Feature(name, "numerical", low=0.0, high=15.0)  # momenta / energies (scaled), heavy right tail


HIGGS = DatasetSchema(
    name="higgs",
    raw_columns=(
        RawColumn("label", "float", "label"),
        *(RawColumn(n, "float", "feature") for n in _HIGGS_LOW),
        *(RawColumn(n, "float", "label") for n in _HIGGS_HIGH),
    ),
    features=tuple(_higgs_feature(n) for n in _HIGGS_LOW),
    tasks=(
        Task("target", "binary", column="label", class_ratio=(47.01, 52.99)),
        # Invariant masses: never negative (no published upper bound: validation uses train's quantiles).
        *(Task(n, "regression", column=n, low=0.0) for n in _HIGGS_HIGH),
    ),
    real_rows={"data": 11_000_000},
    headerless=True,
)

# --------------------------------------------------------------------------------------------------
# ACS Income (folktables ACSIncome, OpenML 43137). MAR is a target, so it cannot be an input: the tenth
# input column is ST (state code, 51 states + Puerto Rico), which the OpenML/fairlearn version carries.
# All ten inputs are categorical as in the paper's Table 1 (AGEP and WKHP are small integers).
_ACS_CATS = {
    "AGEP": (79, 17, 95),
    "COW": (8, 1, 8),
    "SCHL": (24, 1, 24),
    "OCCP": (529, 10, 9920),
    "POBP": (219, 1, 554),
    "RELP": (18, 0, 17),
    "WKHP": (99, 1, 99),
    "SEX": (2, 1, 2),
    "RAC1P": (9, 1, 9),
    "ST": (52, 1, 72),
}
ACS_INCOME = DatasetSchema(
    name="acs_income",
    raw_columns=(
        *(RawColumn(n, "int", "feature") for n in ["AGEP", "COW", "SCHL"]),
        RawColumn("MAR", "int", "label"),
        *(RawColumn(n, "int", "feature") for n in ["OCCP", "POBP", "RELP", "WKHP", "SEX", "RAC1P", "ST"]),
        RawColumn("PINCP", "float", "label"),
    ),
    features=tuple(Feature(n, "categorical", cardinality=c, low=lo, high=hi) for n, (c, lo, hi) in _ACS_CATS.items()),
    tasks=(
        Task("income", "binary", column="PINCP", threshold=50_000.0, class_ratio=(60.56, 39.44)),
        Task(
            "marital",
            "multiclass",
            column="MAR",
            n_classes=5,
            codes=(1, 2, 3, 4, 5),
            class_ratio=(54.59, 2.08, 10.74, 1.71, 30.88),
        ),
    ),
    real_rows={"data": 1_664_500},
    records_repeat=True,  # one state's real extract: 1.7 % of rows repeat an earlier one (ten coarse columns)
)

# --------------------------------------------------------------------------------------------------
# AliExpress_NL (MTReclib). Dropped: search_id and the constant columns categorical_1, numerical_58..60.
# Cardinalities of the real categorical columns are not published; these are the stand-in's guesses
# (estimates: the real files hold codes far above them; validation never enforces them).
_ALI_DROPPED = {"categorical_1", "numerical_58", "numerical_59", "numerical_60"}
_ALI_CARDS = [0, 0, 3, 7, 4, 12, 20, 40, 8, 60, 100, 150, 250, 500, 1000, 2000, 5000]  # index = column no.
ALIEXPRESS = DatasetSchema(
    name="aliexpress",
    raw_columns=(
        RawColumn("search_id", "int", "drop"),
        *(
            RawColumn(f"categorical_{i}", "int", "drop" if f"categorical_{i}" in _ALI_DROPPED else "feature")
            for i in range(1, 17)
        ),
        *(
            RawColumn(f"numerical_{i}", "float", "drop" if f"numerical_{i}" in _ALI_DROPPED else "feature")
            for i in range(1, 64)
        ),
        RawColumn("click", "int", "label"),
        RawColumn("conversion", "int", "label"),
    ),
    features=(
        *(
            Feature(f"categorical_{i}", "categorical", cardinality=_ALI_CARDS[i], cardinality_is_estimate=True)
            for i in range(2, 17)
        ),
        *(
            Feature(f"numerical_{i}", "numerical", low=0.0, high=1.0)
            for i in range(1, 64)
            if f"numerical_{i}" not in _ALI_DROPPED
        ),
    ),
    tasks=(
        Task("click", "binary", column="click", class_ratio=(97.99, 2.01)),
        Task("conversion", "binary", column="conversion", class_ratio=(99.93, 0.07)),
    ),
    raw_files=("train", "test"),
    real_rows={"train": 12_157_894, "test": 5_559_301},
)

SCHEMAS: dict[str, DatasetSchema] = {s.name: s for s in (ALIEXPRESS, ACS_INCOME, HIGGS)}


def get_schema(name: str) -> DatasetSchema:
    try:
        return SCHEMAS[name]
    except KeyError:
        raise KeyError(f"unknown dataset {name!r}; known: {sorted(SCHEMAS)}") from None


def schema_from_meta(meta: Mapping[str, Any]) -> DatasetSchema:
    """A schema from a processed meta.json (processed cardinalities include the reserved index).
    Works for MultiTab-Bench datasets too, which are not in the registry."""
    feats = tuple(
        Feature(f["name"], f["kind"], cardinality=f.get("cardinality")) for f in meta["features"]
    )
    tasks = tuple(
        Task(t["name"], t["type"], column=t["name"], n_classes=t.get("n_classes")) for t in meta["tasks"]
    )
    raw = tuple(RawColumn(f.name, "float" if f.kind == "numerical" else "int", "feature") for f in feats)
    return DatasetSchema(name=meta.get("dataset", "unknown"), raw_columns=raw, features=feats, tasks=tasks)
