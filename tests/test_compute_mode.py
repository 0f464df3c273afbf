"""train.precision tf32 and train.deterministic as a run records them (multitab.training.compute_mode): TF32
switched on for a CUDA run and back off after it, fp32 on CPU and said so; torch's warnings about
non-deterministic ops caught and named in the run's record; stacking refuses tf32."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch

from _training_tiny import TINY_HPARAMS, TinyModel, register_tiny, train_run, write_tiny_processed
from multitab.config.train import TrainConfig
from multitab.training.compute_mode import computing, nondeterministic_op
from multitab.training.metrics_record import METRICS_SCHEMA
from multitab.training.run import RunSpec

# torch's own wording (ATen's alertNotDeterministic with warn_only=True), for an op only CUDA has
TORCH_WARNING = ("scatter_add_cuda_kernel does not have a deterministic implementation, but you set "
                 "'torch.use_deterministic_algorithms(True, warn_only=True)'. You can file an issue at "
                 "https://github.com/pytorch/pytorch/issues to help us prioritize adding deterministic support for "
                 "this operation.")


def _config(**kw: object) -> TrainConfig:
    base: dict[str, object] = dict(device="cpu", precision="fp32", compile=False, deterministic=True, num_threads=1,
                                   batch_size=128, max_epochs=1, max_train_rows=None, patience={"default": 5},
                                   xgboost_early_stopping_rounds=5, progress=False)
    return TrainConfig(**{**base, **kw})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("processed") / "tiny"
    write_tiny_processed(path, n={"train": 200, "val": 100, "test": 100})
    return path


def _train(tiny: Path, ck: Path, **config: object) -> dict[str, Any]:
    spec = RunSpec(dataset="tiny", model="tiny", seed=0, data_path=tiny, checkpoint_dir=ck)
    record, _ = train_run(spec, _config(**config), TINY_HPARAMS)
    return record


def test_tf32_on_cuda_switches_tf32_and_the_math_attention_on_for_the_run_only() -> None:
    """The CUDA path's settings, on a CPU machine: `computing` on a cuda device sets torch's global switches,
    which need no GPU to read or write; afterwards they are what they were before."""
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
              torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled())
    with computing(torch.device("cuda"), "tf32", True) as mode:
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        assert not torch.backends.cuda.flash_sdp_enabled() and not torch.backends.cuda.mem_efficient_sdp_enabled()
        assert torch.backends.cuda.math_sdp_enabled()
    after = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled())
    assert after == before
    assert mode.record() == {"precision_requested": "tf32", "precision_effective": "tf32", "deterministic": True,
                             "nondeterministic_ops": []}
    with computing(torch.device("cuda"), "fp32", False):  # not deterministic: torch chooses the kernels
        now = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cuda.flash_sdp_enabled())
        assert now == (before[0], before[2])


def test_tf32_on_cpu_trains_in_fp32_and_the_record_says_so(tiny: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    register_tiny(monkeypatch)
    fp32 = _train(tiny, tmp_path / "fp32")
    tf32 = _train(tiny, tmp_path / "tf32", precision="tf32")
    assert tf32["precision_requested"] == "tf32" and tf32["precision_effective"] == "fp32"
    assert fp32["precision_requested"] == fp32["precision_effective"] == "fp32"
    assert tf32["test"] == fp32["test"]  # same process, same kernels: fp32 by construction
    assert tf32["settings"]["precision"] == "tf32"  # the fingerprint: a tf32 checkpoint is not an fp32 one
    assert fp32["deterministic"] is True and fp32["nondeterministic_ops"] == []
    jsonschema.validate(tf32, METRICS_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(tf32 | {"precision_effective": "fp16"}, METRICS_SCHEMA)
    assert not torch.backends.cuda.matmul.allow_tf32


class WarnsLikeCuda(TinyModel):
    """The tiny model, with the warning torch raises on CUDA for an op without a deterministic kernel."""

    def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor) -> dict[str, torch.Tensor]:
        warnings.warn(TORCH_WARNING, UserWarning, stacklevel=1)
        return super().forward(x_num, x_cat)


def test_a_non_deterministic_op_is_named_in_the_record(tiny: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    register_tiny(monkeypatch, WarnsLikeCuda)
    record = _train(tiny, tmp_path / "ck")
    assert record["deterministic"] is False
    assert record["nondeterministic_ops"] == ["scatter_add_cuda_kernel"]  # once, though every step warned
    off = _train(tiny, tmp_path / "off", deterministic=False)
    assert off["deterministic"] is False


def test_other_warnings_pass_through_and_the_flag_off_is_recorded() -> None:
    with pytest.warns(UserWarning, match="something else"), computing(torch.device("cpu"), "fp32", False) as mode:
        warnings.warn("something else", UserWarning, stacklevel=1)
        warnings.warn(TORCH_WARNING, UserWarning, stacklevel=1)
    assert mode.record()["deterministic"] is False and mode.ops == ["scatter_add_cuda_kernel"]
    assert nondeterministic_op("Memory Efficient attention defaults to a non-deterministic algorithm. To "
                               "explicitly enable determinism call ...") == ("Memory Efficient attention defaults "
                                                                            "to a non-deterministic algorithm")
    assert nondeterministic_op("an unrelated warning") is None


def test_stacking_refuses_tf32_and_says_why() -> None:
    from multitab.runs.resolve import settings_for
    from multitab.training.stacked_checks import StackRefused, check_training

    run = settings_for(_config(precision="tf32"), TINY_HPARAMS, model="mmoe", dataset="tiny")
    with pytest.raises(StackRefused, match="TF32 rounding its inputs to a 10-bit mantissa"):
        check_training(run, "mmoe")


def test_params_yaml_takes_tf32_and_the_run_records_it() -> None:
    import copy

    from multitab.config import ConfigError, parse_params, read_yaml
    from multitab.runs.profiles import run_params

    raw = read_yaml(Path(__file__).resolve().parents[1] / "params.yaml")
    raw["runs"]["real"]["train"] = {"precision": "tf32"}
    params = parse_params(copy.deepcopy(raw))
    assert run_params(params, "real", "higgs", "mmoe")["train"]["precision"] == "tf32"
    assert run_params(params, "bench", "p06_pd3_t3", "mmoe")["train"]["precision"] == "fp32"
    raw["train"]["precision"] = "fp16"
    with pytest.raises(ConfigError, match="tf32"):
        parse_params(raw)
