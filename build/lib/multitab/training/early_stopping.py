"""Early stopping on the mean validation metric (paper, Implementation Details): after each epoch, the
mean over tasks of validation AUC / EV, mode max; patience 3 for AliExpress and 5 for the others. As in
PyTorch Lightning's EarlyStopping (which the authors used, min_delta 0), an epoch improves only when its
value is strictly greater than the best so far; after `patience` epochs without improvement training
stops; a non-finite value never improves. The best epoch's weights are the ones tested.

Opt-in, not the paper's (params.yaml `train.early_stopping_smoothing`, null by default): with a
smoothing factor `a` (0 < a < 1) the rule above runs on an exponential moving average of the per-epoch
values instead of the raw value, s_1 = v_1 and s_t = a * s_{t-1} + (1 - a) * v_t (the first finite value
starts the average; a non-finite value is a bad epoch and leaves the average as it was). An improvement
(a new best smoothed value) marks that epoch's weights as the ones tested, and `best` is the best smoothed
value. One noisy epoch moves the average by (1 - a) of its swing only, so it neither sets a best that the
next `patience` epochs must beat nor ends the run; the current epoch still weighs most of any single
epoch, so the tested weights are rarely those of a dip. Off (`smoothing` None), the state dict is exactly
the raw rule's (no smoothing keys), so checkpoints written before the option resume unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class EarlyStopping:
    patience: int
    best: float = -math.inf  # the best criterion value (the smoothed one with `smoothing`)
    best_epoch: int = -1  # 0-based epoch of `best`; -1 before the first improvement
    bad_epochs: int = 0
    smoothing: float | None = None  # the moving average's factor `a`; None: the raw value (the paper's rule)
    smoothed: float = math.nan  # the moving average so far (with `smoothing`); NaN before the first finite value

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise ValueError(f"{self.patience=} must be >= 1")
        if self.smoothing is not None and not 0.0 < self.smoothing < 1.0:
            raise ValueError(f"{self.smoothing=} must be in (0, 1), or None for no smoothing")

    def criterion(self, value: float) -> float:
        """Fold epoch value `value` into the moving average (with `smoothing`) and return the value the rule
        compares: the average, or NaN for a non-finite `value`; without smoothing `value` itself."""
        if self.smoothing is None:
            return value
        if not math.isfinite(value):
            return math.nan
        a = self.smoothing
        self.smoothed = value if math.isnan(self.smoothed) else a * self.smoothed + (1.0 - a) * value
        return self.smoothed

    def step(self, value: float, epoch: int) -> bool:
        """Record epoch `epoch`'s value; True when it is a new best (save that checkpoint)."""
        value = self.criterion(value)
        if math.isfinite(value) and value > self.best:
            self.best, self.best_epoch, self.bad_epochs = value, epoch, 0
            return True
        self.bad_epochs += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.bad_epochs >= self.patience

    def history_fields(self, value: float) -> dict[str, float]:
        """What the history row of the epoch just stepped with `value` records about the criterion: with
        smoothing `val_mean_smoothed`, the average after it (NaN when `value` was not finite: it entered no
        average); without smoothing nothing (the row is the raw rule's)."""
        if self.smoothing is None:
            return {}
        return {"val_mean_smoothed": self.smoothed if math.isfinite(value) else math.nan}

    def state_dict(self) -> dict[str, float | int]:
        state: dict[str, float | int] = {"patience": self.patience, "best": self.best, "best_epoch": self.best_epoch,
                                         "bad_epochs": self.bad_epochs}
        if self.smoothing is not None:  # off: the raw rule's state exactly (older checkpoints' keys)
            state |= {"smoothing": self.smoothing, "smoothed": self.smoothed}
        return state

    @classmethod
    def from_state_dict(cls, state: dict[str, float | int]) -> EarlyStopping:
        smoothing = state.get("smoothing")
        return cls(patience=int(state["patience"]), best=float(state["best"]),
                   best_epoch=int(state["best_epoch"]), bad_epochs=int(state["bad_epochs"]),
                   smoothing=None if smoothing is None else float(smoothing),
                   smoothed=float(state.get("smoothed", math.nan)))

    @classmethod
    def resume(cls, state: dict[str, float | int], smoothing: float | None) -> EarlyStopping:
        """`from_state_dict` of a checkpoint's state, refused (ValueError) when its smoothing is not this
        run's: a run never continues under a criterion its checkpoint was not trained under. (The pipeline's
        checkpoint fingerprint covers the setting already; this guards callers that pass their own.)"""
        stopper = cls.from_state_dict(state)
        if stopper.smoothing != smoothing:
            raise ValueError(f"the checkpoint's early stopping ran with smoothing {stopper.smoothing}, this run's "
                             f"is {smoothing} (train.early_stopping_smoothing): train it from scratch")
        return stopper
