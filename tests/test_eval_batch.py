"""train.eval_batch_size: models whose rows do not see each other are evaluated in larger batches (fewer kernel
launches on a GPU, the same predictions up to float rounding); models whose outputs depend on the batch keep the
training batch. The rule (`sees_the_batch`) is checked against what every model actually does."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from _models_tiny import CASES, IDS, SCHEMA, batch, build, predict
from _training_tiny import TINY_HPARAMS, TINY_TRAIN, register_tiny, train_run, write_tiny_processed
from multitab.config._build import ConfigError
from multitab.config.train import TrainConfig
from multitab.training import evaluate as evaluate_mod
from multitab.training.evaluate import evaluation_batch, sees_the_batch
from multitab.training.run import RunSpec


@pytest.mark.parametrize(("name", "overrides"), CASES, ids=IDS)
def test_a_model_sees_the_batch_exactly_when_its_predictions_depend_on_it(name: str, overrides: dict[str, Any]) -> None:
    """The predictions of 16 rows alone against the same rows in one batch with 32 others far off (x 50):
    equal (to float rounding) for every model the rule lets evaluate in another batch; for the inter-sample
    attention models they differ, so the comparison can tell."""
    model = build(name, overrides).eval()
    with torch.no_grad():  # weights away from their initialisation (some layers start at zero or near it)
        g = torch.Generator().manual_seed(2)
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    x_num, x_cat, y = batch(SCHEMA, 48, seed=1)
    x_far = torch.cat([x_num[:16], 50 * x_num[16:]])
    context = (x_num, x_cat, y)
    with torch.no_grad():
        alone = predict(model, x_num[:16], x_cat[:16], context)
        among = predict(model, x_far, x_cat, context)
    gap = max(float((alone[k] - among[k][:16]).abs().max()) for k in alone)
    if not sees_the_batch(model):
        assert gap < 1e-5, f"{name} {overrides}: predictions depend on the batch ({gap:.3g}) but the rule says not"
    elif getattr(model, "inter_sample", overrides.get("inter_sample")) in ("attention", "rope_attention"):
        assert gap > 1e-3, f"{name} {overrides}: flagged as seeing the batch, predictions equal ({gap:.3g})"


def test_the_evaluation_batch_is_the_training_batch_unless_set_and_the_model_allows_it() -> None:
    mlp, attention = build("stl_mlp", {}), build("multitab_net", {"inter_sample": "attention"})
    assert evaluation_batch(mlp, 2048, None) == 2048
    assert evaluation_batch(mlp, 2048, 65536) == 65536
    assert evaluation_batch(attention, 2048, 65536) == 2048
    with pytest.raises(ConfigError, match="eval_batch_size"):
        TrainConfig(**{**TINY_TRAIN, "eval_batch_size": 0})


def test_a_run_with_eval_batch_size_evaluates_in_it_and_records_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    seen: list[int] = []
    real_predict = evaluate_mod.predict

    def spy(*args: Any, batch_size: int, **kwargs: Any) -> Any:
        seen.append(batch_size)
        return real_predict(*args, batch_size=batch_size, **kwargs)

    monkeypatch.setattr(evaluate_mod, "predict", spy)
    register_tiny(monkeypatch)
    data = tmp_path / "data"
    write_tiny_processed(data)
    config = dataclasses.replace(TrainConfig(**TINY_TRAIN), eval_batch_size=1000, max_epochs=1)
    record, _ = train_run(RunSpec("tiny", "tiny", 0, data, tmp_path / "ckpt"), config, TINY_HPARAMS)
    assert seen and set(seen) == {1000}
    settings = json.loads(json.dumps(record["settings"]))
    assert settings["eval_batch_size"] == 1000
    default = dataclasses.replace(config, eval_batch_size=None)
    seen.clear()
    record, _ = train_run(RunSpec("tiny", "tiny", 0, data, tmp_path / "ckpt2"), default, TINY_HPARAMS)
    assert set(seen) == {config.batch_size} and "eval_batch_size" not in record["settings"]
