"""A tiny end-to-end run of every registered model (each family: MultiTab-Net, the transformers, the
MLP / expert family, MAYA, XGBoost) through the real training path on a stand-in-shaped dataset."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import torch

from _training_tiny import ROOT, train_run, write_tiny_processed
from multitab.config.train import TrainConfig
from multitab.hparams import BENCH, load
from multitab.models import MODELS
from multitab.training.metrics_record import METRICS_SCHEMA
from multitab.training.run import RunSpec

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("processed") / "tiny"
    write_tiny_processed(path, n={"train": 400, "val": 150, "test": 150})
    return path


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_trains_end_to_end(name: str, tiny: Path, tmp_path: Path) -> None:
    config = TrainConfig(
        device="cpu", precision="fp32", compile=False,
        deterministic=True, num_threads=1, batch_size=128, max_epochs=2, max_train_rows=None, patience={"default": 5},
        xgboost_early_stopping_rounds=3, progress=False,
    )
    spec = RunSpec(dataset="tiny", model=name, seed=0, data_path=tiny, checkpoint_dir=tmp_path / "ck")
    # the authors' MultiTab-Bench example configuration under the default protocol
    # (the tiny data is no dataset of theirs)
    record, history = train_run(spec, config, load(BENCH, name, root=ROOT))
    jsonschema.validate(record, METRICS_SCHEMA)
    assert record["standin"] is True
    assert set(record["test"]) == {"click", "marital", "m_jj"}
    assert all(v is not None and 0.0 <= v <= 1.0 for k, v in record["test"].items() if k != "m_jj")
    assert record["test"]["m_jj"] is not None and record["test"]["m_jj"] <= 1.0
    assert record["epochs"] >= 1 and len(history) >= 1
    # Every run leaves its checkpoint folder (the train stages declare it as an output).
    assert (tmp_path / "ck").is_dir() and any((tmp_path / "ck").iterdir())


def test_cpu_training_swaps_in_the_kernels_and_bf16_autocast_takes_effect(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from multitab.models.accelerate import CPUFeedForward, CPUSelfAttention, accelerate_cpu
    from multitab.training import loop

    trained: list[torch.nn.Module] = []
    monkeypatch.setattr(loop, "accelerate_cpu", lambda m: trained.append(accelerate_cpu(m)) or m)
    records = {}
    for precision in ("fp32", "bf16"):
        config = TrainConfig(
            device="cpu", precision=precision,  # type: ignore[arg-type]
            compile=False, deterministic=True, num_threads=1, batch_size=128, max_epochs=1, max_train_rows=None,
            patience={"default": 5}, xgboost_early_stopping_rounds=3, progress=False,
        )
        spec = RunSpec(dataset="tiny", model="multitab_net", seed=0, data_path=tiny,
                       checkpoint_dir=tmp_path / precision)
        records[precision], _ = train_run(spec, config, load(BENCH, "multitab_net", root=ROOT))
    assert len(trained) == 2
    kinds = {type(m) for m in trained[0].modules()}
    assert CPUFeedForward in kinds and CPUSelfAttention in kinds
    assert all(v is not None for v in records["bf16"]["test"].values())
    assert records["bf16"]["test"] != records["fp32"]["test"]  # bf16 is not silently float32 on CPU any more
