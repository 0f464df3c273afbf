"""params.yaml `orchestration`: how `make repro` (flows/pipeline.py) runs the DAG. No stage reads it."""

from __future__ import annotations

from dataclasses import dataclass, field

from multitab.config._build import ConfigError, bounded


@dataclass(frozen=True)
class OrchestrationConfig:
    """params.yaml `orchestration:`; CLI options override the run-time knobs."""

    workers: int  # stages running at once
    retries: int  # extra attempts for a failing stage (never for multitab.runtime.exit_codes.BAD_INPUT)
    retry_delay_seconds: float  # seconds before each retry
    gpu_concurrency: int | None  # GPU stages at once; null: one per visible CUDA device
    gpu_stages: tuple[str, ...]  # stage names (before '@') that use a GPU when CUDA is present
    lock_retries: int  # re-runs after a DVC lock error (not counted as retries)
    schedule: str  # cron for the deployment served by `make ui`
    timezone: str
    summary: str  # where the run summary is written (JSON)
    # Share results through DVC's default remote: pull (with the run cache) before planning, push each
    # completed stage's outputs and run-cache entry after it (flows/remote.py; several machines)
    sync_remote: bool
    # The most training stages (train@, train_stack@) runs.yaml may hold: `python -m multitab.runs` refuses a
    # larger run matrix (multitab.runs.check), since DVC reads every stage on each `dvc status` / `dvc repro`
    # (docs/orchestration.md, "How large a run matrix")
    max_train_stages: int = field(metadata=bounded(ge=1))
    # Stages at once also by memory (flows/memory.py): the expected peaks of the stages running together stay
    # within this many GB (null: the memory available when the run starts); each stage's peak on this
    # machine is kept in `stage_memory`
    memory_budget_gb: float | None
    stage_memory: str
    # Warm starts (multitab.runtime.stage_server): a stage's command is run by a fork of a process that has
    # imported its module (torch, pandas, Great Expectations) instead of importing them again; false: each
    # command imports its own (docs/orchestration.md, "Warm starts")
    stage_server: bool

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ConfigError(f"orchestration.workers={self.workers} must be >= 1")
        if self.retries < 0 or self.lock_retries < 0:
            raise ConfigError("orchestration.retries and lock_retries must be >= 0")
        if self.retry_delay_seconds < 0:
            raise ConfigError(f"orchestration.retry_delay_seconds={self.retry_delay_seconds} must be >= 0")
        if self.memory_budget_gb is not None and self.memory_budget_gb <= 0:
            raise ConfigError(f"orchestration.memory_budget_gb={self.memory_budget_gb} must be > 0 or null")
        if self.gpu_concurrency is not None and self.gpu_concurrency < 1:
            raise ConfigError(f"orchestration.gpu_concurrency={self.gpu_concurrency} must be >= 1 or null")
