"""Early stopping on the mean validation metric (paper, Implementation Details): after each epoch, the
mean over tasks of validation AUC / EV, mode max; patience 3 for AliExpress and 5 for the others. As in
PyTorch Lightning's EarlyStopping (which the authors used, min_delta 0), an epoch improves only when its
value is strictly greater than the best so far; after `patience` epochs without improvement training
stops; a non-finite value never improves. The best epoch's weights are the ones tested."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass
class EarlyStopping:
    patience: int
    best: float = -math.inf
    best_epoch: int = -1  # 0-based epoch of `best`; -1 before the first improvement
    bad_epochs: int = 0

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise ValueError(f"{self.patience=} must be >= 1")

    def step(self, value: float, epoch: int) -> bool:
        """Record epoch `epoch`'s value; True when it is a new best (save that checkpoint)."""
        if math.isfinite(value) and value > self.best:
            self.best, self.best_epoch, self.bad_epochs = value, epoch, 0
            return True
        self.bad_epochs += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.bad_epochs >= self.patience

    def state_dict(self) -> dict[str, float | int]:
        return asdict(self)

    @classmethod
    def from_state_dict(cls, state: dict[str, float | int]) -> EarlyStopping:
        return cls(patience=int(state["patience"]), best=float(state["best"]),
                   best_epoch=int(state["best_epoch"]), bad_epochs=int(state["bad_epochs"]))
