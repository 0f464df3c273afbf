"""Training path: data batching, losses, early stopping, the loop, metrics records, the train stage."""

from __future__ import annotations

import dataclasses
import io
import json
import math
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from _training_tiny import (
    TINY_HPARAMS,
    TINY_OPTIM,
    TinyModel,
    TinyNet,
    loop_settings,
    register_tiny,
    train_run,
    write_tiny_hparams,
    write_tiny_processed,
    write_tiny_project,
)
from multitab import metrics as M
from multitab.config import load_params
from multitab.config.train import TrainConfig
from multitab.datasets.schema import Task
from multitab.hparams import for_run
from multitab.runtime.exit_codes import BAD_INPUT
from multitab.training import loop as loop_mod
from multitab.training.data import DataError, iterate_batches, load_processed
from multitab.training.early_stopping import EarlyStopping
from multitab.training.losses import MultitaskLoss
from multitab.training.metrics_record import METRICS_SCHEMA
from multitab.training.run import RunSpec

torch.set_num_threads(1)


def make_config(**kw: object) -> TrainConfig:
    base: dict[str, object] = dict(
        device="cpu", precision="fp32", compile=False,
        deterministic=True, num_threads=1, batch_size=128, max_epochs=4, max_train_rows=None, patience={"default": 5},
        xgboost_early_stopping_rounds=5, progress=False,
    )
    base.update(kw)
    return TrainConfig(**base)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _tiny_in_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    register_tiny(monkeypatch)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("processed") / "tiny"
    write_tiny_processed(path)
    return path


# ---------------------------------------------------------------------------------------------- data
def test_training_batches_are_a_permutation_and_eval_order_is_fixed(tiny: Path) -> None:
    split = load_processed(tiny).splits["train"]
    g = torch.Generator().manual_seed(0)
    batches = list(iterate_batches(split, 128, generator=g))
    assert [len(b) for b in batches] == [128] * 4 + [600 - 512]
    seen = torch.cat([b.x_num[:, 0] for b in batches])
    assert not torch.equal(seen, split.x_num[:, 0])  # shuffled
    assert torch.equal(seen.sort().values, split.x_num[:, 0].sort().values)  # every row exactly once
    # targets travel with their rows
    b = batches[0]
    idx = torch.nonzero(split.x_num[:, 0][:, None] == b.x_num[:, 0][None, :])[:, 0]
    assert torch.equal(split.targets()["marital"][idx].sort().values, b.targets["marital"].sort().values)
    evals = [torch.cat([x.x_num for x in iterate_batches(split, 128)]) for _ in range(2)]
    assert torch.equal(evals[0], split.x_num) and torch.equal(evals[1], split.x_num)


def test_load_processed_names_the_bad_column_and_row(tmp_path: Path) -> None:
    import pandas as pd

    path = tmp_path / "bad"
    write_tiny_processed(path)
    df = pd.read_parquet(path / "val.parquet")
    df.loc[7, "c2"] = 9  # cardinality 3
    df.to_parquet(path / "val.parquet", index=False)
    with pytest.raises(DataError, match=r"val.parquet: column 'c2' row 7: code 9 outside \[0, 3\)"):
        load_processed(path)
    df.drop(columns=["m_jj"]).to_parquet(path / "val.parquet", index=False)
    with pytest.raises(Exception, match="m_jj"):
        load_processed(path)


# -------------------------------------------------------------------------------------------- losses
def test_multitask_loss_is_the_sum_of_task_losses() -> None:
    tasks = (Task("b", "binary", "b"), Task("m", "multiclass", "m", n_classes=3), Task("r", "regression", "r"))
    out = {"b": torch.tensor([0.3, -1.0]), "m": torch.tensor([[1.0, 0.0, -1.0], [0.0, 2.0, 0.0]]),
           "r": torch.tensor([0.5, 1.5])}
    y = {"b": torch.tensor([1.0, 0.0]), "m": torch.tensor([0, 1]), "r": torch.tensor([0.0, 1.0])}
    total, parts = MultitaskLoss(tasks)(out, y)
    bce = -(math.log(1 / (1 + math.exp(-0.3))) + math.log(1 - 1 / (1 + math.exp(1.0)))) / 2
    assert parts["b"].item() == pytest.approx(bce, rel=1e-6)
    assert parts["r"].item() == pytest.approx((0.25 + 0.25) / 2)
    assert total.item() == pytest.approx(sum(p.item() for p in parts.values()), rel=1e-6)
    # a last batch of one sample works (their code crashed on it)
    one, _ = MultitaskLoss(tasks)({k: v[:1] for k, v in out.items()}, {k: v[:1] for k, v in y.items()})
    assert torch.isfinite(one)


# ------------------------------------------------------------------------------------------- metrics
def test_metrics_match_sklearn_and_handle_missing_classes() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    s = rng.normal(size=(300, 3)) + np.eye(3)[y]
    p = np.exp(s) / np.exp(s).sum(1, keepdims=True)
    assert M.multiclass_auc(y, s) == pytest.approx(roc_auc_score(y, p, multi_class="ovr", average="macro"))
    yb = rng.integers(0, 2, 300)
    sb = rng.normal(size=300) + yb
    assert M.binary_auc(yb, sb) == pytest.approx(M.binary_auc(yb, np.exp(3 * sb)))  # monotone invariance
    assert math.isnan(M.binary_auc(np.zeros(10), rng.normal(size=10)))
    y2 = np.where(y == 2, 0, y)  # class 2 absent
    assert M.multiclass_auc(y2, s) == pytest.approx(np.mean([roc_auc_score(y2 == k, p[:, k]) for k in (0, 1)]))
    assert M.mean_metric({"a": 0.8, "b": math.nan, "c": 0.6}) == pytest.approx(0.7)
    r = rng.normal(size=100)
    assert M.explained_variance(r, r + 1.0) == pytest.approx(1.0)  # EV ignores a constant bias
    assert M.mse(r, r + 1.0) == pytest.approx(1.0)


# ------------------------------------------------------------------------------------ early stopping
def test_early_stopping_stops_on_scripted_curve() -> None:
    es = EarlyStopping(patience=3)
    curve = [0.50, 0.60, 0.62, 0.61, 0.62, 0.60, 0.99]  # 0.62 again is no improvement
    for epoch, value in enumerate(curve):
        es.step(value, epoch)
        if es.should_stop:
            break
    assert (epoch, es.best_epoch, es.best) == (5, 2, 0.62)
    es2 = EarlyStopping(patience=2)
    es2.step(math.nan, 0)
    assert es2.best_epoch == -1 and es2.bad_epochs == 1


# A noisy rising curve (validation EV swinging between epochs, as MMoE's on MultiTab-Bench): a spike at
# epoch 2 (0.98) that the raw rule keeps as its best until patience runs out, while the trend still rises.
NOISY = [0.60, 0.98, 0.71, 0.90, 0.80, 0.93, 0.84, 0.94, 0.88, 0.95, 0.90, 0.94, 0.89, 0.93, 0.88, 0.92, 0.87,
         0.91, 0.86, 0.90]


def _run_stopper(es: EarlyStopping, curve: list[float], start: int = 0) -> tuple[int, list[bool]]:
    """Step `es` through `curve` (epochs from `start`) until it stops: (last epoch stepped, improvements)."""
    improved = []
    for epoch, value in enumerate(curve[start:], start):
        improved.append(es.step(value, epoch))
        if es.should_stop:
            break
    return epoch, improved


def test_smoothed_early_stopping_rides_out_a_noisy_curve() -> None:
    """Raw (off, the default): the spike is the best and patience 5 ends the run at epoch 7. Smoothed
    (a = 0.5): s = 0.5 s + 0.5 v runs on through the swings, its best is epoch 12 (raw 0.94, smoothed
    0.9249) and it stops once the trend falls (epoch 17)."""
    raw = EarlyStopping(patience=5)
    assert _run_stopper(raw, NOISY)[0] == 6 and (raw.best_epoch, raw.best) == (1, 0.98)
    off = EarlyStopping(patience=5, smoothing=None)  # off is exactly the raw rule, state included
    assert _run_stopper(off, NOISY) == _run_stopper(EarlyStopping(patience=5), NOISY)
    assert off.state_dict() == raw.state_dict() and list(off.state_dict()) == ["patience", "best", "best_epoch",
                                                                               "bad_epochs"]
    assert off.history_fields(0.5) == {}
    es = EarlyStopping(patience=5, smoothing=0.5)
    last, improved = _run_stopper(es, NOISY)
    assert (last, es.best_epoch) == (16, 11) and es.should_stop
    assert [i for i, ok in enumerate(improved) if ok] == [0, 1, 3, 5, 7, 9, 11]
    expected = NOISY[0]
    for v in NOISY[1:12]:
        expected = 0.5 * expected + 0.5 * v
    assert es.best == pytest.approx(expected) and es.best == pytest.approx(0.9248633, abs=1e-6)
    assert es.history_fields(0.9) == {"val_mean_smoothed": es.smoothed}


def test_smoothed_early_stopping_skips_non_finite_values_and_resumes_exactly() -> None:
    es = EarlyStopping(patience=2, smoothing=0.5)
    assert not es.step(math.nan, 0) and math.isnan(es.smoothed) and es.best_epoch == -1  # never improves
    assert math.isnan(es.history_fields(math.nan)["val_mean_smoothed"])
    assert es.step(0.6, 1) and es.smoothed == 0.6  # the first finite value starts the average
    assert not es.step(math.inf, 2) and es.smoothed == 0.6 and es.bad_epochs == 1  # a bad epoch, average kept
    assert es.step(0.8, 3) and es.smoothed == pytest.approx(0.7)
    # the state survives a checkpoint (plain data, weights_only) and the resumed stopper decides the same
    full = EarlyStopping(patience=5, smoothing=0.5)
    whole = _run_stopper(full, NOISY)
    first = EarlyStopping(patience=5, smoothing=0.5)
    part = [first.step(v, e) for e, v in enumerate(NOISY[:8])]
    buffer = io.BytesIO()
    torch.save({"early_stopping": first.state_dict()}, buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)["early_stopping"]
    assert set(state) == {"patience", "best", "best_epoch", "bad_epochs", "smoothing", "smoothed"}
    resumed = EarlyStopping.resume(state, 0.5)
    assert resumed == first
    last, rest = _run_stopper(resumed, NOISY, start=8)
    assert (last, part + rest) == whole and resumed == full
    with pytest.raises(ValueError, match="smoothing 0.5, this run's is None"):
        EarlyStopping.resume(state, None)  # a smoothed checkpoint never continues under the raw rule
    with pytest.raises(ValueError, match="smoothing None, this run's is 0.5"):
        EarlyStopping.resume(EarlyStopping(patience=5).state_dict(), 0.5)
    for bad in (0.0, 1.0, -0.5, 2.0):
        with pytest.raises(ValueError, match="smoothing"):
            EarlyStopping(patience=5, smoothing=bad)


def spy_last_weights(monkeypatch: pytest.MonkeyPatch) -> dict[int, dict[str, torch.Tensor]]:
    """epoch (1-based) -> the model weights the loop wrote to last.pt after it (the checkpoints still written)."""
    snapshots: dict[int, dict[str, torch.Tensor]] = {}
    real_save = loop_mod.ckpt.save

    def spy_save(path: Path, payload: dict) -> None:
        if path.name == "last.pt":
            snapshots[payload["epoch"]] = {k: v.clone() for k, v in payload["model"].items()}
        real_save(path, payload)

    monkeypatch.setattr(loop_mod.ckpt, "save", spy_save)
    return snapshots


def test_loop_with_smoothing_stops_on_the_average_tests_its_best_epoch_and_says_so(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop on the scripted noisy curve: off, it stops after epoch 7 (best 2, the spike); with
    `early_stopping_smoothing` 0.5 after epoch 17, testing epoch 12's weights, and its history records the
    smoothed value; a run killed mid-way resumes to the same end."""
    calls: list[float] = []
    monkeypatch.setattr(loop_mod, "mean_metric", lambda metrics: calls.append(NOISY[len(calls)]) or calls[-1])
    snapshots = spy_last_weights(monkeypatch)
    data = load_processed(tiny)

    def run(ck: Path, smoothing: float | None, **kw: object) -> tuple[loop_mod.RunResult, torch.nn.Module]:
        torch.manual_seed(0)
        settings = loop_settings(seed=0, max_epochs=20, patience=5, batch_size=128, device="cpu",
                                        early_stopping_smoothing=smoothing, **kw)  # type: ignore[arg-type]
        model = TinyNet(data.meta)
        return loop_mod.train(model, data, settings, checkpoint_dir=ck, run_fingerprint="x"), model

    off, _ = run(tmp_path / "off", None)
    assert (off.epochs, off.best_epoch, off.stopped_early) == (7, 2, True)
    assert all("val_mean_smoothed" not in row for row in off.history)  # off: the history is the raw rule's
    calls.clear()
    on, model = run(tmp_path / "on", 0.5)
    assert (on.epochs, on.best_epoch, on.stopped_early) == (17, 12, True)
    for k, v in model.state_dict().items():  # the tested weights are epoch 12's
        assert torch.equal(v, snapshots[12][k]), k
    assert [row["val_mean"] for row in on.history] == NOISY[:17]
    assert on.history[11]["val_mean_smoothed"] == pytest.approx(0.9248633, abs=1e-6)
    assert on.val == torch.load(tmp_path / "on" / "best.pt", weights_only=True)["val"]  # epoch 12's raw metrics
    last = torch.load(tmp_path / "on" / "last.pt", weights_only=True)
    assert last["early_stopping"]["smoothing"] == 0.5 and last["early_stopping"]["best_epoch"] == 11

    class Kill(Exception):
        pass

    def kill(epoch: int, step: int) -> None:
        if (epoch, step) == (9, 2):
            raise Kill

    calls.clear()
    with pytest.raises(Kill):
        run(tmp_path / "killed", 0.5, on_step=kill)
    assert len(calls) == 9  # epochs 1-9 validated; epoch 10 killed mid-way
    resumed, _ = run(tmp_path / "killed", 0.5)
    assert resumed.resumed_from_epoch == 9
    timing = ("epoch_seconds", "data_seconds", "samples_per_second")
    assert (resumed.epochs, resumed.best_epoch, resumed.test) == (on.epochs, on.best_epoch, on.test)
    assert [{k: v for k, v in r.items() if k not in timing} for r in resumed.history] == [
        {k: v for k, v in r.items() if k not in timing} for r in on.history]
    with pytest.raises(ValueError, match="smoothing 0.5, this run's is None"):  # not resumed under the raw rule
        run(tmp_path / "killed", None)


def test_loop_stops_at_the_right_epoch_and_tests_the_best_weights(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mean validation metric is scripted; training must stop after epoch 6 (patience 3, best at
    epoch 3) and test epoch 3's weights."""
    curve = iter([0.50, 0.60, 0.62, 0.61, 0.62, 0.60, 0.99, 0.99, 0.99])
    scripted: list[float] = []

    def fake_mean(metrics: dict[str, float]) -> float:
        scripted.append(next(curve))
        return scripted[-1]

    snapshots = spy_last_weights(monkeypatch)
    monkeypatch.setattr(loop_mod, "mean_metric", fake_mean)
    data = load_processed(tiny)
    torch.manual_seed(0)
    model = TinyNet(data.meta)
    settings = loop_settings(seed=0, max_epochs=20, patience=3, batch_size=128, device="cpu")
    result = loop_mod.train(model, data, settings, checkpoint_dir=tmp_path / "ck", run_fingerprint="x")
    assert (result.epochs, result.best_epoch, result.stopped_early) == (6, 3, True)
    assert len(scripted) == 6
    for k, v in model.state_dict().items():  # the tested weights are epoch 3's
        assert torch.equal(v, snapshots[3][k]), k
    assert not all(torch.equal(v, snapshots[6][k]) for k, v in model.state_dict().items())


# -------------------------------------------------------------------------------- single-task models
def test_one_adam_over_independent_submodels_equals_one_adam_each() -> None:
    """The PerTask shortcut: one optimiser over task models that share no parameter and a summed loss
    gives the same parameters as one optimiser per task model."""
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)
    a2, b2 = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)
    a2.load_state_dict(a.state_dict())
    b2.load_state_dict(b.state_dict())
    joint = torch.optim.AdamW([*a.parameters(), *b.parameters()], lr=1e-2, weight_decay=1e-2)
    oa = torch.optim.AdamW(a2.parameters(), lr=1e-2, weight_decay=1e-2)
    ob = torch.optim.AdamW(b2.parameters(), lr=1e-2, weight_decay=1e-2)
    for _ in range(20):
        x, ya, yb = torch.randn(16, 4), torch.randn(16), torch.randn(16)
        joint.zero_grad()
        loss = torch.nn.functional.mse_loss(a(x).squeeze(-1), ya) + torch.nn.functional.mse_loss(b(x).squeeze(-1), yb)
        loss.backward()
        joint.step()
        for m, o, y in ((a2, oa, ya), (b2, ob, yb)):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(x).squeeze(-1), y).backward()
            o.step()
    for p, q in zip([*a.parameters(), *b.parameters()], [*a2.parameters(), *b2.parameters()]):
        assert torch.equal(p, q)


# ------------------------------------------------------------------------------- runs and the record
def test_run_record_matches_schema_and_is_labelled_standin(tiny: Path, tmp_path: Path) -> None:
    spec = RunSpec(dataset="tiny", model="tiny", seed=0, data_path=tiny, checkpoint_dir=tmp_path / "ck")
    record, history = train_run(spec, make_config(), TINY_HPARAMS)
    jsonschema.validate(record, METRICS_SCHEMA)
    assert record["standin"] is True and record["source"] == "standin"
    assert set(record["test"]) == {"click", "marital", "m_jj"} and set(record["test_mse"]) == {"m_jj"}
    assert record["metric_names"] == {"click": "auc", "marital": "auc", "m_jj": "ev"}
    assert record["test"]["click"] > 0.75 and record["test"]["m_jj"] > 0.3  # it learned
    # test_mse in original units = std^2 x standardised (meta target_stats std 0.5)
    assert record["test_mse"]["m_jj"] == pytest.approx(0.25 * record["test_mse_standardised"]["m_jj"], rel=1e-6)
    assert len(history) == record["epochs"] == 4 and 1 <= record["best_epoch"] <= 4
    assert record["val_mean"] == pytest.approx(np.mean(list(record["val"].values())))
    assert (tmp_path / "ck" / "best.pt").is_file() and (tmp_path / "ck" / "last.pt").is_file()
    # a finished run re-run from its checkpoint trains nothing more and reports the same metrics
    again, _ = train_run(spec, make_config(), TINY_HPARAMS)
    assert again["resumed_from_epoch"] == 4 and again["test"] == record["test"]
    # changed settings never resume a foreign checkpoint
    other, _ = train_run(spec, make_config(max_epochs=2), TINY_HPARAMS)
    assert other["resumed_from_epoch"] == 0 and other["epochs"] == 2


def test_raising_the_epoch_budget_continues_from_the_checkpoint(tiny: Path, tmp_path: Path) -> None:
    """max_epochs is a budget: a run checkpointed under a smaller one continues under a larger one, and ends
    exactly where a run under the larger budget from the start ends (weights, curve, metrics)."""
    spec = RunSpec(dataset="tiny", model="tiny", seed=0, data_path=tiny, checkpoint_dir=tmp_path / "ck")
    train_run(spec, make_config(max_epochs=2), TINY_HPARAMS)
    extended, history = train_run(spec, make_config(max_epochs=4), TINY_HPARAMS)
    assert extended["resumed_from_epoch"] == 2 and extended["epochs"] == 4 and extended["max_epochs"] == 4
    fresh_spec = RunSpec(dataset="tiny", model="tiny", seed=0, data_path=tiny, checkpoint_dir=tmp_path / "fresh")
    fresh, fresh_history = train_run(fresh_spec, make_config(max_epochs=4), TINY_HPARAMS)
    assert fresh["resumed_from_epoch"] == 0
    assert (extended["test"], extended["val"], extended["best_epoch"]) == (
        fresh["test"], fresh["val"], fresh["best_epoch"])
    assert [h["val_mean"] for h in history] == [h["val_mean"] for h in fresh_history]
    for name in ("last.pt", "best.pt"):
        a, b = (torch.load(d / name, weights_only=True)["model"] for d in (tmp_path / "ck", tmp_path / "fresh"))
        assert all(torch.equal(a[k], b[k]) for k in a)
    # a checkpoint past a smaller budget cannot stand for a run under it: that run starts over
    shorter, _ = train_run(spec, make_config(max_epochs=3), TINY_HPARAMS)
    assert shorter["resumed_from_epoch"] == 0 and shorter["epochs"] == 3
    # any other change still starts over, budget or not
    other, _ = train_run(spec, make_config(max_epochs=5, batch_size=64), TINY_HPARAMS)
    assert other["resumed_from_epoch"] == 0


def test_real_data_is_not_labelled_standin(tmp_path: Path) -> None:
    write_tiny_processed(tmp_path / "real", standin=False, n={"train": 200, "val": 100, "test": 100})
    spec = RunSpec(dataset="real", model="tiny", seed=1, data_path=tmp_path / "real", checkpoint_dir=tmp_path / "ck")
    record, _ = train_run(spec, make_config(max_epochs=1), TINY_HPARAMS)
    assert record["standin"] is False and record["source"] == "local"


def test_stage_writes_metrics_and_dvclive(tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    from multitab.runs.document import render
    from multitab.runs.types import RUNS_FILE
    from stages import train as stage

    params = write_tiny_project(tmp_path, data=tiny, train={"max_train_rows": 300}, success=False)
    args = ["--run", "real-tiny-tiny-0", "--params", str(params)]
    out = tmp_path / "results" / "runs" / "tiny" / "tiny" / "seed0"
    assert stage.main(args) == BAD_INPUT  # failed validation: no training (and no retry)
    assert not out.exists()
    (tmp_path / "data" / "validated" / "tiny.json").write_text(json.dumps({"success": True}))
    assert stage.main(args) == 0
    record = json.loads((out / "metrics.json").read_text())
    jsonschema.validate(record, METRICS_SCHEMA)
    assert record["n_rows"] == {"train": 300, "val": 200, "test": 200} and record["max_train_rows"] == 300
    assert (tmp_path / "results" / "checkpoints" / "tiny" / "tiny" / "seed0" / "best.pt").is_file()
    tsv = out / "dvclive" / "plots" / "metrics" / "val_mean.tsv"
    assert len(tsv.read_text().strip().splitlines()) == 1 + 2  # header + one row per epoch
    # only what the stage declares (metrics.json, the curves): an undeclared file made a clone that trained
    # hash the runs folder differently from one that restored it from the DVC cache
    assert {f.relative_to(out).parts[:3] for f in out.rglob("*") if f.is_file()} == {
        ("metrics.json",), ("dvclive", "plots", "metrics")}
    assert record["protocol"] == "paper" and record["group"] == "real" == record["params"]["group"]
    # the top-level protocol reaches the run, and a group's `train` is laid over `train`
    raw = yaml.safe_load(params.read_text())
    raw["protocol"] = "authors_code"
    raw["runs"]["real"]["train"] = {"max_epochs": 1}
    params.write_text(yaml.safe_dump(raw))
    assert stage.main(args) == BAD_INPUT  # the run's record (runs.yaml) is older than params.yaml: refused
    (tmp_path / RUNS_FILE).write_text(render(load_params(params)))
    assert stage.main(args) == 0
    record = json.loads((out / "metrics.json").read_text())
    assert record["protocol"] == "authors_code" and record["epochs"] == 1
    raw["runs"]["real"]["seeds"] = [0, 1]  # the matrix changed: runs.yaml must be written again first
    params.write_text(yaml.safe_dump(raw))
    assert stage.main(args) == BAD_INPUT
    (tmp_path / RUNS_FILE).write_text(render(load_params(params)))
    assert stage.main(args) == 0
    assert stage.main(["--run", "real-tiny-nope-0", "--params", str(params)]) == BAD_INPUT


class HookedNet(TinyNet):
    """TinyNet with the optional hooks: its own training objective and a context fitted on train."""

    def __init__(self, meta: dict) -> None:
        super().__init__(meta)
        self.loss_calls = 0
        self.context_rows: list[int] = []

    def training_loss(self, x_num, x_cat, targets, task_loss_fn):  # type: ignore[no-untyped-def]
        self.loss_calls += 1
        outputs = self(x_num, x_cat)
        return 2.0 * sum(task_loss_fn(k, v, targets[k]) for k, v in outputs.items()), outputs

    def fit_context(self, x_num, x_cat, targets) -> None:  # type: ignore[no-untyped-def]
        assert not self.training
        self.context_rows.append(len(x_num))


def test_loop_honours_training_loss_and_fit_context(tiny: Path, tmp_path: Path) -> None:
    data = load_processed(tiny)
    torch.manual_seed(0)
    model = HookedNet(data.meta)
    settings = loop_settings(seed=0, max_epochs=2, patience=3, batch_size=128, device="cpu")
    result = loop_mod.train(model, data, settings, checkpoint_dir=tmp_path / "ck", run_fingerprint="x")
    assert model.loss_calls == 2 * 5  # 600 rows / 128 per batch = 5 steps per epoch
    assert model.context_rows == [600, 600, 600]  # before each validation and before the test
    # history's train_loss is the model's objective (2 x the sum); per-task losses are the plain ones
    row = result.history[0]
    parts = sum(v for k, v in row.items() if k.startswith("train_loss_"))
    assert row["train_loss"] == pytest.approx(2 * parts, rel=1e-5)


def test_null_max_epochs_takes_the_files_epochs(tiny: Path, tmp_path: Path) -> None:
    hparams = dataclasses.replace(TINY_HPARAMS, optim={**TINY_OPTIM, "max_epochs": 3})
    spec = RunSpec(dataset="tiny", model="tiny", seed=0, data_path=tiny, checkpoint_dir=tmp_path / "ck")
    record, _ = train_run(spec, make_config(max_epochs=None, patience={"default": 1}), hparams)
    assert record["max_epochs"] == 3 and record["epochs"] <= 3
    again, _ = train_run(spec, make_config(max_epochs=2, patience={"default": 1}), hparams)
    assert again["max_epochs"] == 2  # train.max_epochs, when set, replaces the file's


def test_non_finite_loss_stops_with_a_clear_error(tiny: Path, tmp_path: Path) -> None:
    class NanNet(TinyNet):
        def forward(self, x_num, x_cat):  # type: ignore[no-untyped-def]
            return {k: v * float("nan") for k, v in super().forward(x_num, x_cat).items()}

    data = load_processed(tiny)
    settings = loop_settings(seed=0, max_epochs=2, patience=3, batch_size=256, device="cpu")
    with pytest.raises(FloatingPointError, match="epoch 1: training loss is nan"):
        loop_mod.train(NanNet(data.meta), data, settings, checkpoint_dir=tmp_path / "ck", run_fingerprint="x")


def test_the_train_stage_depends_on_every_train_setting_that_changes_a_run() -> None:
    """dvc.yaml's `train` stage tracks its run's record in runs.yaml (so DVC re-runs it when a value it trains with
    changes), which holds every `train` key a run reads (the progress bar aside, untracked) resolved; the `runs`
    stage, which writes runs.yaml again, tracks `train`, `protocol` and `runs`; runs.yaml gives each run its data,
    verdict, folders and selections file."""
    import dataclasses

    import yaml

    from multitab.runs.document import entries
    from multitab.runs.resolve import TRACKED

    stages = yaml.safe_load((Path(__file__).parents[1] / "dvc.yaml").read_text())["stages"]
    stage = stages["train"]["do"]
    assert stage["params"] == [{"runs.yaml": [f"train_runs.${{key}}.{k}" for k in TRACKED]}]
    assert {"protocol", "train", "runs"} <= set(stages["runs"]["params"])
    assert {"${item.data}", "${item.verdict}", "${item.hparams_file}"} <= set(stage["deps"])
    params = load_params(Path(__file__).parents[1] / "params.yaml")
    runs = entries(params, ["study", "sweep_*"])  # the opt-in groups too
    bench = runs["bench-p06_pd3_t3-mmoe-0"]
    assert (bench["data"], bench["verdict"]) == (
        "data/synthetic/p06_pd3_t3", "data/validated/synthetic/p06_pd3_t3.json")
    assert bench["hparams_file"] == "hparams/authors/multitab_bench/mmoe.yaml"
    # every setting of `train` that changes a run's numbers is in its record: as itself, or laid over the
    # hyperparameters (optim, model_overrides, variants), choosing its file (hparams) or its stage (stack_seeds)
    over = {"optim", "model_overrides", "variants", "hparams", "stack_seeds", "progress"}
    assert {f.name for f in dataclasses.fields(TrainConfig)} - over <= set(bench["train"])
    assert bench["train"]["max_epochs"] == 6 and bench["train"]["batch_size"] == 128  # runs.bench.train
    assert runs["real-higgs-mmoe-0"]["hparams_file"] == "hparams/authors/higgs/mmoe.yaml"
    ablation = runs["ablation-higgs-multitab_net+single_none-0"]
    assert ablation["hparams_file"] == "hparams/authors/higgs/multitab_net.yaml"
    assert ablation["out"] == "results/runs/higgs/multitab_net@single_none/seed0"
    study = runs["study-p06_pd3_t3-mmoe-2"]
    assert study["data"] == "data/study/p06_pd3_t3" and study["out"] == "results/study_runs/p06_pd3_t3/mmoe/seed2"
    assert study["opt_in"] is True and runs["real-higgs-xgboost-0"]["opt_in"] is False


def test_committed_runs_file_is_what_params_declare() -> None:
    from multitab.runs.cli import main as runs_main

    root = Path(__file__).parents[1]
    assert runs_main(["--params", str(root / "params.yaml"), "--out", str(root / "runs.yaml"), "--check"]) == 0


def test_variant_runs_build_the_base_model_with_the_variant_keywords(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from multitab.config import ConfigError
    from multitab.config.train import Variant

    seen: list[tuple[str, dict]] = []

    class Recording(TinyModel):
        def __init__(self, *, schema: object, d: int = 8) -> None:
            seen.append(("tiny", {"d": d}))
            super().__init__(schema=schema, d=d)

    register_tiny(monkeypatch, Recording)

    config = make_config(max_epochs=1, variants={"wide": Variant(model="tiny", overrides={"d": 16})},
                         model_overrides={"tiny": {"d": 4}})
    write_tiny_hparams(tmp_path, ["tiny"])
    hparams = for_run(tmp_path, "hparams/authors/tiny/tiny.yaml", model="tiny@wide", dataset="tiny", point=None,
                      config=config)
    assert hparams.model == {"d": 16}  # the file's (8), then model_overrides (4), then the variant's
    spec = RunSpec(dataset="tiny", model="tiny@wide", seed=0, data_path=tiny, checkpoint_dir=tmp_path / "ck")
    record, _ = train_run(spec, config, hparams)
    assert seen == [("tiny", {"d": 16})] and record["model"] == "tiny@wide"
    assert record["hparams"]["model"] == {"d": 16} and record["hparams"]["file"] == "hparams/authors/tiny/tiny.yaml"
    with pytest.raises(ConfigError, match="no variant 'narrow'"):
        config.resolve("tiny@narrow")
    with pytest.raises(ConfigError, match="variant of 'tiny', not of 'other'"):
        config.resolve("other@wide")


@pytest.mark.gpu
@pytest.mark.parametrize("precision,compile_", [("fp32", False), ("bf16", True)])
def test_cuda_run_with_bf16_and_compile(tiny: Path, tmp_path: Path, precision: str, compile_: bool) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    spec = RunSpec(dataset="tiny", model="tiny", seed=0, data_path=tiny, checkpoint_dir=tmp_path / "ck")
    config = make_config(device="cuda", precision=precision, compile=compile_, max_epochs=3)
    record, history = train_run(spec, config, TINY_HPARAMS)
    assert record["device"].startswith("cuda")
    assert all(v is not None and math.isfinite(v) for v in record["test"].values())
    assert record["test"]["click"] > 0.7 and len(history) == 3
