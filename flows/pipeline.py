"""Run the DVC DAG through Prefect: parallel stages, retries with backoff, a GPU limit, and a summary.

    python -m flows.pipeline [--targets STAGE ...] [--workers N] [--retries N] [--retry-delay S]
                             [--gpu-concurrency N] [--params params.yaml] [--root .]

dvc.yaml stays the only DAG. The flow reads DVC's stage graph (foreach/matrix stages expanded, as in
`dvc stage list`) and runs every stage as one Prefect task, `dvc --wait-for-lock repro --single-item
<stage>`, as soon as its upstream stages have completed. DVC decides whether a stage is stale and records
what ran in dvc.lock; Prefect adds the parallelism, retries, the GPU limit, logs and the UI.

Why this is safe to run in parallel on one repository: `dvc repro` releases the repository lock while a
stage's command runs and takes it again to hash the outputs and rewrite dvc.lock, so dvc.lock is only
ever rewritten by one process at a time (`--wait-for-lock` makes the others wait instead of failing).
What can still fail under contention is DVC's short lock around its rwlock file (three seconds, no wait
option): such failures are recognised by their message and retried here without spending a retry.

Failure semantics: a failing stage is retried with exponential backoff (`retries`, `retry_delay`); a stage
that keeps failing stops only its descendants (Prefect marks them NotReady, the summary "not_run"), and
every independent stage still runs. The summary (ran / up to date / restored from DVC's run cache /
retried / failed and why / not run) is printed and written to `orchestration.summary`; the exit status is
non-zero when a stage failed.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from prefect import flow, get_run_logger, runtime, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture, as_completed
from prefect.states import State
from prefect.tasks import exponential_backoff

from multitab.config import ConfigError, load_params, section
from multitab.io import write_json

# DVC's messages for a stage that did not run its command (dvc/stage/__init__.py, dvc/stage/cache.py).
_UP_TO_DATE = re.compile(r"'.*' didn't change, skipping")
_RESTORED = re.compile(r"Stage '.*' is cached - skipping run")
# DVC's lock failures (dvc/lock.py, dvc/rwlock.py): transient under parallel runs, never the stage's fault.
_LOCK_ERROR = re.compile(r"Unable to acquire lock|is busy, it is being blocked by")
_TAIL_LINES = 30
# Why each attempt of a task run failed (AwaitingRetry states carry no message), filled by the task and read
# by the flow; both run in this process with the thread-pool runner.
_FAILED_ATTEMPTS: dict[Any, list[str]] = {}
_FAILED_ATTEMPTS_LOCK = threading.Lock()


# Module-level functions, not inline code: a served deployment cloudpickles the flow and its tasks by value,
# and a function referenced by name keeps the (unpicklable) lock out of that payload.
def _record_failure(task_run_id: str, message: str) -> None:
    with _FAILED_ATTEMPTS_LOCK:
        _FAILED_ATTEMPTS.setdefault(task_run_id, []).append(message)


def _pop_failures(task_run_id: str) -> list[str]:
    with _FAILED_ATTEMPTS_LOCK:
        return _FAILED_ATTEMPTS.pop(task_run_id, [])


@dataclass(frozen=True)
class OrchestrationConfig:
    """params.yaml `orchestration:`; CLI options override the run-time knobs."""

    workers: int  # stages running at once
    retries: int  # extra attempts for a failing stage
    retry_delay_seconds: float  # backoff: delay * 2**k before retry k+1
    gpu_concurrency: int | None  # GPU stages at once; null: one per visible CUDA device
    gpu_stages: tuple[str, ...]  # stage names (before '@') that use a GPU when CUDA is present
    lock_retries: int  # re-runs after a DVC lock error (not counted as retries)
    schedule: str  # cron for the deployment served by `make ui`
    timezone: str
    summary: str  # where the run summary is written (JSON)

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ConfigError(f"orchestration.workers={self.workers} must be >= 1")
        if self.retries < 0 or self.lock_retries < 0:
            raise ConfigError("orchestration.retries and lock_retries must be >= 0")
        if self.retry_delay_seconds < 0:
            raise ConfigError(f"orchestration.retry_delay_seconds={self.retry_delay_seconds} must be >= 0")
        if self.gpu_concurrency is not None and self.gpu_concurrency < 1:
            raise ConfigError(f"orchestration.gpu_concurrency={self.gpu_concurrency} must be >= 1 or null")


def load_config(root: str | Path, params: str | Path = "params.yaml") -> OrchestrationConfig:
    """`orchestration:` of `params` (relative to the project `root` unless absolute)."""
    path = Path(root) / params
    return section(load_params(path), "orchestration", OrchestrationConfig, source=str(path))


# --------------------------------------------------------------------------------------------- DAG


@dataclass(frozen=True)
class StagePlan:
    """The stages to run in a topological order, and each stage's upstream stages within the plan."""

    order: tuple[str, ...]
    upstream: dict[str, tuple[str, ...]]
    # Stages with `meta: {opt_in: true}` in dvc.yaml (the study profile): run only when a target asks for
    # them (or for a stage downstream of them), never by default.
    opt_in: frozenset[str] = frozenset()

    def descendants(self, stage: str) -> set[str]:
        found: set[str] = set()
        frontier = [stage]
        while frontier:
            current = frontier.pop()
            for other in self.order:
                if current in self.upstream[other] and other not in found:
                    found.add(other)
                    frontier.append(other)
        return found


def read_stage_graph(root: str | Path) -> StagePlan:
    """DVC's pipeline graph (`dvc.repo.Repo.index.graph`): every dvc.yaml stage with its upstream stages.

    Stages from .dvc files (data sources) are left out: they have no command to run. A frozen stage
    keeps no upstream edges, as in `dvc repro`.
    """
    import networkx as nx
    from dvc.repo import Repo
    from dvc.stage import PipelineStage

    with Repo(str(root)) as repo:
        graph = repo.index.graph  # edges point from a stage to the stages producing its deps

        def name(stage: PipelineStage) -> str:
            # `stage.addressing` is relative to the current folder; `dvc repro` runs in the root.
            dvcfile = os.path.relpath(stage.path, repo.root_dir)
            return stage.name if dvcfile == "dvc.yaml" else f"{dvcfile}:{stage.name}"

        stages = [s for s in nx.topological_sort(graph) if isinstance(s, PipelineStage)]
        upstream = {
            name(s): ()
            if s.frozen
            else tuple(sorted(name(u) for u in graph.successors(s) if isinstance(u, PipelineStage)))
            for s in stages
        }
        order = [name(s) for s in reversed(stages)]
        opt_in = frozenset(name(s) for s in stages if isinstance(s.meta, dict) and s.meta.get("opt_in") is True)
    return StagePlan(order=tuple(order), upstream=upstream, opt_in=opt_in)


def select(plan: StagePlan, targets: Sequence[str] | None) -> StagePlan:
    """Restrict the plan to `targets` and everything they depend on (like `dvc repro <targets>`).

    A target is a stage name (`split@higgs`), a foreach/matrix group (`split`: every `split@...`), or a
    shell pattern (`train@higgs-*`). Without targets: every stage but the opt-in ones and their descendants.
    """
    if not targets:
        if not plan.opt_in:
            return plan
        dropped = set(plan.opt_in)
        for stage in plan.opt_in:
            dropped |= plan.descendants(stage)
        kept = tuple(s for s in plan.order if s not in dropped)
        return StagePlan(order=kept, upstream={s: plan.upstream[s] for s in kept})
    wanted: set[str] = set()
    for target in targets:
        matched = {
            s
            for s in plan.order
            if s == target or s.split("@", 1)[0] == target or fnmatch.fnmatchcase(s, target)
        }
        if not matched:
            raise ValueError(
                f"target {target!r} matches no stage of dvc.yaml; known stages: {', '.join(plan.order)}"
            )
        wanted |= matched
    closure: set[str] = set()
    frontier = list(wanted)
    while frontier:
        stage = frontier.pop()
        if stage not in closure:
            closure.add(stage)
            frontier.extend(plan.upstream[stage])
    order = tuple(s for s in plan.order if s in closure)
    return StagePlan(order=order, upstream={s: plan.upstream[s] for s in order},
                     opt_in=frozenset(s for s in plan.opt_in if s in closure))


# -------------------------------------------------------------------------------------------- task


class StageFailed(RuntimeError):
    """`dvc repro` of one stage exited non-zero; the message carries the exit code and the log tail."""


def _stream(cmd: list[str], cwd: str, env: dict[str, str], log: Any) -> tuple[int, list[str]]:
    """Run `cmd`, sending each output line to the Prefect task log as it arrives."""
    lines: list[str] = []
    with subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip()
            if line:
                lines.append(line)
                log.info("%s", line)
        return proc.wait(), lines


@task(name="dvc-stage", task_run_name="{stage}", cache_policy=NO_CACHE, persist_result=False)
def run_stage(stage: str, root: str, gpu: str | None = None, lock_retries: int = 20) -> dict[str, Any]:
    """`dvc --wait-for-lock repro --single-item <stage>`; returns what DVC did: ran / up_to_date / restored."""
    log = get_run_logger()
    env = dict(os.environ)
    # The stages' `python -m stages...` must mean the interpreter running this flow (the project's venv).
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    cmd = [sys.executable, "-m", "dvc", "--wait-for-lock", "repro", "--single-item", stage]
    attempt = runtime.task_run.run_count
    log.info("attempt %d: %s%s", attempt, " ".join(cmd[2:]), f" (GPU {gpu})" if gpu is not None else "")
    lock_waits = 0
    while True:
        rc, lines = _stream(cmd, root, env, log)
        if rc == 0:
            text = "\n".join(lines)
            outcome = (
                "up_to_date" if _UP_TO_DATE.search(text) else "restored" if _RESTORED.search(text) else "ran"
            )
            return {"outcome": outcome, "lock_waits": lock_waits, "attempts": attempt}
        if any(_LOCK_ERROR.search(line) for line in lines) and lock_waits < lock_retries:
            lock_waits += 1
            delay = min(0.5 * 2 ** (lock_waits - 1), 10.0)
            log.warning("DVC lock busy; trying again in %.1f s (%d/%d)", delay, lock_waits, lock_retries)
            time.sleep(delay)
            continue
        tail = "\n".join(lines[-_TAIL_LINES:])
        message = f"stage {stage!r}: `dvc repro` exited with code {rc} (attempt {attempt})\n{tail}"
        _record_failure(str(runtime.task_run.id), message)
        raise StageFailed(message)


# -------------------------------------------------------------------------------------------- flow

Status = Literal["ran", "up_to_date", "restored", "failed", "not_run"]


@dataclass
class StageResult:
    stage: str
    status: Status
    attempts: int = 0
    seconds: float = 0.0
    lock_waits: int = 0
    error: str | None = None
    failed_attempts: list[str] = field(default_factory=list)


def _gpu_slots(plan: StagePlan, cfg: OrchestrationConfig, gpu_concurrency: int | None) -> list[str] | None:
    """Device ids GPU stages take turns on, or None when GPU stages are not limited (no CUDA)."""
    if not any(s.split("@", 1)[0] in cfg.gpu_stages for s in plan.order):
        return None
    try:
        import torch
    except ImportError:
        return None
    n_devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n_devices == 0:
        return None
    limit = gpu_concurrency or cfg.gpu_concurrency or n_devices
    # More slots than devices shares devices round-robin (useful for small models).
    return [str(i % n_devices) for i in range(limit)]


def _collect(stage: str, future: PrefectFuture[Any], started: float) -> StageResult:
    future.wait()  # sets the future's final state from the runner, not from an API read that may lag
    state: State[Any] = future.state
    if state.is_pending():  # NotReady: an upstream stage failed
        return StageResult(stage, "not_run", error=state.message)
    failures = _pop_failures(str(future.task_run_id))
    seconds = round(time.monotonic() - started, 2)
    if state.is_completed():
        info = future.result()
        return StageResult(
            stage, info["outcome"], info["attempts"], seconds, info["lock_waits"], None, _firsts(failures)
        )
    error = failures[-1] if failures else (state.message or "failed")
    return StageResult(
        stage, "failed", max(len(failures), 1), seconds, error=error, failed_attempts=_firsts(failures)
    )


def _firsts(messages: list[str]) -> list[str]:
    """First line of each failure message (the full text of the last one is in `error`)."""
    return [m.splitlines()[0] for m in messages]


@flow(name="multitab-pipeline", log_prints=True)
def pipeline(
    root: str = ".",
    targets: list[str] | None = None,
    workers: int | None = None,
    retries: int | None = None,
    retry_delay: float | None = None,
    gpu_concurrency: int | None = None,
    params: str = "params.yaml",
) -> dict[str, Any]:
    """Run the DVC stages of `root` (all, or `targets` and their upstream) as Prefect tasks."""
    log = get_run_logger()
    root = str(Path(root).resolve())
    cfg = load_config(root, params)
    n_workers = workers or cfg.workers
    n_retries = cfg.retries if retries is None else retries
    delay = cfg.retry_delay_seconds if retry_delay is None else retry_delay
    plan = select(read_stage_graph(root), targets)
    gpus = _gpu_slots(plan, cfg, gpu_concurrency)
    log.info(
        "%d stages, %d at once, %d retries (backoff %.1f s), GPU slots: %s",
        len(plan.order),
        n_workers,
        n_retries,
        delay,
        gpus if gpus is not None else "unlimited (no CUDA)",
    )
    stage_task = run_stage.with_options(
        retries=n_retries, retry_delay_seconds=exponential_backoff(delay) if delay > 0 else 0
    )
    free_gpus = list(gpus or [])  # only this thread hands them out and takes them back

    started_at = time.monotonic()
    futures: dict[str, PrefectFuture[Any]] = {}
    started: dict[str, float] = {}
    gpu_of: dict[str, str] = {}
    results: dict[str, StageResult] = {}
    bad: set[str] = set()  # failed or not run
    waiting = list(plan.order)
    running: dict[PrefectFuture[Any], str] = {}
    while waiting or running:
        for stage in list(waiting):
            ups = plan.upstream[stage]
            if any(u in bad for u in ups):
                # Submitted with the failed upstream as wait_for: Prefect records it as NotReady.
                waiting.remove(stage)
                bad.add(stage)
                futures[stage] = stage_task.submit(
                    stage, root, return_state=False, wait_for=[futures[u] for u in ups if u in bad]
                )
                running[futures[stage]] = stage
                started[stage] = time.monotonic()
                continue
            if not all(u in results for u in ups):
                continue
            n_busy = sum(1 for s in running.values() if s not in bad)
            is_gpu = gpus is not None and stage.split("@", 1)[0] in cfg.gpu_stages
            if n_busy >= n_workers or (is_gpu and not free_gpus):
                continue
            gpu = free_gpus.pop(0) if is_gpu else None
            if gpu is not None:
                gpu_of[stage] = gpu
            waiting.remove(stage)
            started[stage] = time.monotonic()
            futures[stage] = stage_task.submit(
                stage, root, gpu, cfg.lock_retries, return_state=False, wait_for=[futures[u] for u in ups]
            )
            running[futures[stage]] = stage
        if not running:
            raise RuntimeError(
                f"flows.pipeline: no stage can start; waiting: {waiting}"
            )  # a cycle: DVC forbids
        done = next(as_completed(list(running)))
        stage = running.pop(done)
        if stage in gpu_of:
            free_gpus.append(gpu_of.pop(stage))
        result = _collect(stage, done, started[stage])
        if result.status == "not_run":
            failed_up = [u for u in plan.upstream[stage] if u in bad]
            result.error = f"upstream stage(s) did not complete: {', '.join(failed_up)}"
        results[stage] = result
        if result.status in ("failed", "not_run"):
            bad.add(stage)
        if result.status == "failed":
            log.error(
                "stage %s failed after %d attempt(s): %s", stage, result.attempts, (result.error or "")[:500]
            )

    summary = _summarise(plan, results, time.monotonic() - started_at, n_workers, n_retries)
    summary_path = Path(root) / cfg.summary
    write_json(summary_path, summary)
    print(format_summary(summary))
    log.info("summary written to %s", summary_path)
    if summary["failed"]:
        raise PipelineFailed(f"{len(summary['failed'])} stage(s) failed: {', '.join(summary['failed'])}")
    return summary


class PipelineFailed(RuntimeError):
    """At least one stage kept failing; the summary names it and why."""


def _summarise(
    plan: StagePlan, results: dict[str, StageResult], seconds: float, workers: int, retries: int
) -> dict[str, Any]:
    ordered = [results[s] for s in plan.order]

    def names(status: str) -> list[str]:
        return [r.stage for r in ordered if r.status == status]

    return {
        "ran": names("ran"),
        "up_to_date": names("up_to_date"),
        "restored": names("restored"),
        "retried": [r.stage for r in ordered if r.attempts > 1],
        "failed": names("failed"),
        "not_run": names("not_run"),
        "attempts": sum(r.attempts for r in ordered),
        "lock_waits": sum(r.lock_waits for r in ordered),
        "wall_seconds": round(seconds, 2),
        "workers": workers,
        "retries": retries,
        "stages": {
            r.stage: {
                "status": r.status,
                "attempts": r.attempts,
                "seconds": r.seconds,
                "lock_waits": r.lock_waits,
                "error": r.error,
                "failed_attempts": r.failed_attempts,
            }
            for r in ordered
        },
    }


def format_summary(summary: dict[str, Any]) -> str:
    lines = [
        f"pipeline: {len(summary['stages'])} stages in {summary['wall_seconds']:.1f} s "
        f"({summary['workers']} at once, {summary['attempts']} attempts)"
    ]
    for key, label in [
        ("ran", "ran"),
        ("up_to_date", "skipped, up to date"),
        ("restored", "restored from DVC's run cache"),
        ("retried", "retried"),
        ("failed", "FAILED"),
        ("not_run", "not run (upstream failed)"),
    ]:
        if summary[key]:
            lines.append(f"  {label} ({len(summary[key])}): {', '.join(summary[key])}")
    for stage in summary["failed"]:
        error = (summary["stages"][stage]["error"] or "").strip().splitlines()
        lines.append(f"  {stage}: {' | '.join(error[-3:])}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.pipeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".", help="DVC project root (default: the current folder)")
    parser.add_argument("--targets", nargs="+", help="stages, foreach groups or patterns (default: all)")
    parser.add_argument("--workers", type=int, help="stages at once (default: orchestration.workers)")
    parser.add_argument("--retries", type=int, help="retries of a failing stage (orchestration.retries)")
    parser.add_argument("--retry-delay", type=float, help="first retry delay in s, doubling (orchestration)")
    parser.add_argument("--gpu-concurrency", type=int, help="GPU stages at once (default: one per GPU)")
    parser.add_argument("--params", default="params.yaml", help="params file with `orchestration:`")
    args = parser.parse_args(argv)
    try:  # fail fast, before Prefect starts
        load_config(args.root, args.params)
        select(read_stage_graph(args.root), args.targets)
    except (ConfigError, ValueError) as e:
        print(f"flows.pipeline: {e}", file=sys.stderr)
        return 2
    state = pipeline(
        root=args.root,
        targets=args.targets,
        workers=args.workers,
        retries=args.retries,
        retry_delay=args.retry_delay,
        gpu_concurrency=args.gpu_concurrency,
        params=args.params,
        return_state=True,
    )
    return 0 if state.is_completed() else 1


if __name__ == "__main__":
    sys.exit(main())
