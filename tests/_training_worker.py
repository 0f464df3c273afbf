"""Subprocess worker for the resume test: one tiny run, optionally SIGKILLed at (epoch, step).

    python tests/_training_worker.py DATA CHECKPOINTS OUT_JSON [KILL_EPOCH KILL_STEP]
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _training_tiny import TINY_HPARAMS, TinyModel, train_run  # noqa: E402
from multitab.config.train import TrainConfig  # noqa: E402
from multitab.models import MODELS  # noqa: E402
from multitab.training.run import RunSpec  # noqa: E402


def main() -> None:
    data, ck, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    kill = (int(sys.argv[4]), int(sys.argv[5])) if len(sys.argv) > 5 else None
    torch.set_num_threads(1)

    def on_step(epoch: int, step: int) -> None:
        if kill == (epoch, step):
            os.kill(os.getpid(), signal.SIGKILL)

    config = TrainConfig(
        device="cpu", precision="fp32", compile=False,
        deterministic=True, num_threads=1, batch_size=128, max_epochs=5, max_train_rows=None, patience={"default": 5},
        xgboost_early_stopping_rounds=5, progress=False,
    )
    MODELS["tiny"] = TinyModel  # this process's registry: the tiny model
    spec = RunSpec(dataset="tiny", model="tiny", seed=3, data_path=data, checkpoint_dir=ck)
    record, history = train_run(spec, config, TINY_HPARAMS, on_step=on_step)
    out.write_text(json.dumps({"record": record, "history": history}))


if __name__ == "__main__":
    main()
