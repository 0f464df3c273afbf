"""params.yaml `train`: the trainer's settings every run starts from, and the per-model overrides (the
run matrix is `runs`, multitab.config.runs; a run group's `train` replaces keys of this section).

Defaults live in params.yaml; a model's hyperparameters (constructor keywords, optimiser, learning rate,
weight decay, epochs) are data: one file per run, hparams/<train.hparams>/<dataset>/<model>.yaml
(multitab.hparams). `optim` and `model_overrides` lay the run group's choices over them, per model (and
`model_overrides` per dataset).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from multitab.config._build import ConfigError, bounded, optional
from multitab.protocol import DEFAULT, Protocol


@dataclass(frozen=True)
class OptimOverride:
    """Replaces the authors' selection for one model; null keeps it."""

    optimizer: Literal["adam", "adamw"] | None = field(default=None, metadata=optional("the file's"))
    lr: float | None = field(default=None, metadata={**bounded(gt=0.0), **optional("the file's")})
    weight_decay: float | None = field(default=None, metadata={**bounded(ge=0.0), **optional("the file's")})


@dataclass(frozen=True)
class Variant:
    model: str
    overrides: dict[str, Any]


@dataclass(frozen=True)
class TrainConfig:
    device: Literal["auto", "cpu", "cuda"]
    # bf16 = torch.autocast(bfloat16) on CUDA or CPU; tf32 = TF32 matmuls and convolutions on CUDA (fp32 on CPU,
    # recorded as such); fp32 = none (training/compute_mode.py)
    precision: Literal["fp32", "tf32", "bf16"]
    compile: bool  # torch.compile the model (CUDA only)
    deterministic: bool  # torch.use_deterministic_algorithms: bit-identical CPU reruns and resumes
    num_threads: int = field(metadata=bounded(ge=0))  # torch intra-op threads; 0 = torch's default
    batch_size: int  # 2048 in the paper; also the evaluation batch (inter-sample attention, see data.py)
    # replaces the hyperparameter file's optim.max_epochs; null = the file's (authors': 100; 50 for AliExpress)
    max_epochs: int | None
    # Train on the first `max_train_rows` rows of the (shuffled) training split; null = all (the paper).
    max_train_rows: int | None
    patience: dict[str, int]  # per dataset; key `default` for the others (MultiTab-Bench)
    # XGBoost's early stopping on the validation split
    xgboost_early_stopping_rounds: int = field(metadata=bounded(ge=1))
    progress: bool  # a tqdm bar per epoch (samples/s)
    # Opt-in, not the paper's: early stopping (stop decision and tested epoch) on an exponential moving
    # average of the mean validation metric, s_t = a * s_{t-1} + (1 - a) * v_t, with this `a` in (0, 1);
    # null = the raw per-epoch value (the paper's rule). multitab.training.early_stopping; when set, runs
    # record it (metrics.json `params.train`, `settings`, the history's `val_mean_smoothed`).
    early_stopping_smoothing: float | None = field(default=None, metadata=bounded(gt=0.0, lt=1.0))
    optim: dict[str, OptimOverride] = field(default_factory=dict)  # model -> override
    # model -> build_model keyword overrides, applied to every dataset; `<model>@<dataset>` keys apply to
    # one dataset only and win.
    model_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Named variants of a registry model, run as model `<model>@<variant>` (Table 2's ablation runs):
    # `<variant>: {model: <registry name>, overrides: {build_model keywords}}`.
    variants: dict[str, Variant] = field(default_factory=dict)
    # Whose hyperparameter selections the runs use: `authors` (hparams/authors/: their published selections
    # in our vocabulary) or `swept` (hparams/swept/, written by the sweep_select stage before: `make sweep`;
    # a run whose file is not there is refused at expansion, no fallback).
    hparams: Literal["authors", "swept"] = "authors"
    # Train the seeds of each dataset x model (x grid point) of a run group as one stacked model
    # (multitab.training.stacked: one vmapped step for all seeds, each seed's results and checkpoints its own,
    # equal to its separate run up to float rounding): one stage train_stack@<group>-<dataset>-<model>[-<point>]
    # instead of one train@ stage per seed. Where stacking is refused (dropout > 0, bf16 or tf32, MAYA, XGBoost) the
    # stage trains the seeds one after another.
    stack_seeds: bool = False
    # Full-size batches replay one captured training step (forward, backward, optimiser) as a CUDA graph
    # (multitab.training.graphs); each epoch's last, partial batch runs uncaptured. Same numbers as without it;
    # on CPU, and for models with a training_loss (MAYA) or not in torch, the run trains uncaptured and its
    # record says why. Not with `compile`.
    cuda_graph: bool = False
    # The evaluation batch of models whose rows do not see each other (training/evaluate.py `evaluation_batch`):
    # larger batches mean fewer kernel launches on a GPU; predictions equal up to float rounding. Models with
    # inter-sample attention (MultiTab-Net, SAINT) or their own training/retrieval hooks (MAYA) keep
    # `batch_size`, since their outputs depend on the batch. null: `batch_size` for every model (the paper's).
    eval_batch_size: int | None = field(default=None, metadata=bounded(ge=1))
    # params.yaml's top-level `protocol` (paper | authors_code; multitab.protocol), filled in by
    # load_params: it changes some models' settings where the paper and the authors' code differ.
    protocol: Protocol = field(default=DEFAULT, metadata=optional("the top-level `protocol`"))

    def __post_init__(self) -> None:
        if self.batch_size < 2:
            raise ConfigError(f"train.batch_size={self.batch_size} must be >= 2")
        if self.max_epochs is not None and self.max_epochs < 1:
            raise ConfigError(f"train.max_epochs={self.max_epochs} must be >= 1")
        if self.max_train_rows is not None and self.max_train_rows < 1:
            raise ConfigError(f"train.max_train_rows={self.max_train_rows} must be >= 1 or null")
        if self.eval_batch_size is not None and self.eval_batch_size < 1:
            raise ConfigError(f"train.eval_batch_size={self.eval_batch_size} must be >= 1 or null")
        if "default" not in self.patience:
            raise ConfigError("train.patience needs a `default` entry (used for MultiTab-Bench configs)")
        bad = {k: v for k, v in self.patience.items() if v < 1}
        if bad:
            raise ConfigError(f"train.patience: values must be >= 1, got {bad}")
        if self.compile and self.cuda_graph:
            raise ConfigError("train.compile and train.cuda_graph are both true: pick one (torch.compile captures "
                              "its own graphs with mode='reduce-overhead'; cuda_graph captures the whole step)")
        a = self.early_stopping_smoothing
        if a is not None and not 0.0 < a < 1.0:  # `build` checks it at load; this covers dataclasses.replace
            raise ConfigError(f"train.early_stopping_smoothing={a}: must be in (0, 1), or null for no smoothing")

    def patience_for(self, dataset: str) -> int:
        return self.patience.get(dataset, self.patience["default"])

    def overrides_for(self, model: str, dataset: str) -> dict[str, Any]:
        """build_model keywords of run model `model` (a registry name or `<name>@<variant>`) on `dataset`:
        the model's overrides, then its per-dataset ones, then the variant's."""
        base, variant = self.resolve(model)
        extra = self.variants[variant].overrides if variant else {}
        return {**self.model_overrides.get(base, {}), **self.model_overrides.get(f"{base}@{dataset}", {}), **extra}

    def resolve(self, model: str) -> tuple[str, str | None]:
        """(registry name, variant or None) of a run model name."""
        if "@" not in model:
            return model, None
        base, variant = model.split("@", 1)
        if variant not in self.variants:
            raise ConfigError(f"train.variants has no variant {variant!r} (run model {model!r}); "
                              f"known: {sorted(self.variants)}")
        if self.variants[variant].model != base:
            raise ConfigError(f"train.variants.{variant} is a variant of {self.variants[variant].model!r}, "
                              f"not of {base!r}")
        return base, variant
