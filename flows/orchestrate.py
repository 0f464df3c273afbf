"""The Prefect flow over the DVC DAG: one task per stage that has work to do, retries only where a retry
can help, task states and artifacts that say what DVC did. The CLI and the overview are in
flows/pipeline.py; the DVC side (graph, what is stale, config) in flows/dag.py.

Task states (the badge on the flow run page): "Ran", "Restored" (from DVC's run cache), "Up to date"
(DVC found nothing to do once its upstream had run), each with " (attempt N)" when it succeeded on a
retry; "Failed" with a short message naming the stage, the exit code and the cause; "Not run" (Cancelled)
naming the upstream stage that did not complete. Stages DVC already reported up to date before the run
get no task at all (no subprocess, no API calls); the run's markdown artifact `pipeline-summary` lists
every stage with its outcome, attempts, time and cause, and the headline results when `aggregate` ran;
each failed validation adds a table artifact of its failed expectations.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from prefect import flow, get_run_logger, runtime, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import TaskRun
from prefect.futures import PrefectFuture, as_completed
from prefect.states import Cancelled, Completed, State
from prefect.tasks import Task

from flows.dag import OrchestrationConfig, StagePlan, load_config, read_stage_graph, select
from multitab.exit_codes import BAD_INPUT
from multitab.io import read_json, write_json

# DVC's messages for a stage that did not run its command (dvc/stage/__init__.py, dvc/stage/cache.py).
_UP_TO_DATE = re.compile(r"'.*' didn't change, skipping")
_RESTORED = re.compile(r"Stage '.*' is cached - skipping run")
# DVC's lock failures (dvc/lock.py, dvc/rwlock.py): transient under parallel runs, never the stage's fault.
_LOCK_ERROR = re.compile(r"Unable to acquire lock|is busy, it is being blocked by")
# DVC's line for a stage command that failed: the stage's own exit status (dvc/stage/exceptions.py).
_CMD_EXIT = re.compile(r"failed to run: .*, exited with (-?\d+)")
# Lines that report an error: DVC's ERROR lines, a stage's `[stage] error: ...` (stages/_common.py) or
# ERROR/CRITICAL log records, the last line of a traceback.
_DVC_ERROR = re.compile(r"^ERROR:\s*(.*)")
_STAGE_ERROR = re.compile(r"^\[[^\]]+\] error: (.*)")
_STAGE_LOG_ERROR = re.compile(r"^\[[^\]]+\] (?:ERROR|CRITICAL) ")
_STAGE_LOG_WARNING = re.compile(r"^\[[^\]]+\] WARNING ")
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b:?\s*(.*)")
_VALIDATION_HEAD = re.compile(r"expectations? failed")
_DVC_CHATTER = re.compile(r"^(Running stage|> |Stage '|Updating lock|Generating lock|To track|To enable|Use `dvc|\s*git add|\s*dvc config)")
_CAUSE_CHARS = 300
# Where the validation stages keep one record per stage, dataset and split (multitab.validation.report_page).
VALIDATION_RESULTS = "reports/validation/results"
# What `aggregate` writes that the summary artifact quotes (dvc.yaml).
METRICS, REPORT = "results/metrics.json", "results/report.md"

# Set by flows.deploy for the runs of a deployment: the project folders a run's `root` may name
# (os.pathsep-separated). Without it (`python -m flows.pipeline` by hand) any folder is accepted.
ALLOWED_ROOTS_ENV = "MULTITAB_ALLOWED_ROOTS"

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


# -------------------------------------------------------------------------------------------- task


class StageFailed(RuntimeError):
    """One stage's `dvc repro` failed: the stage, the stage's exit code, the cause in one line, and
    whether a retry can help (not for multitab.exit_codes.BAD_INPUT)."""

    def __init__(self, stage: str, code: int, cause: str, attempt: int) -> None:
        self.stage, self.code, self.cause, self.attempt = stage, code, cause, attempt
        self.retryable = code != BAD_INPUT
        kind = "bad input, not retried" if not self.retryable else f"attempt {attempt}"
        super().__init__(f"stage {stage} exited with code {code} ({kind}): {cause}")


def _retry_unless_bad_input(task: Task[Any, Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Prefect's retry_condition_fn: retry a crash, a kill, a lock or an OOM; never a BAD_INPUT exit."""
    error = state.data
    if not isinstance(error, BaseException):
        try:
            error = state.result(raise_on_failure=False)
        except Exception:  # noqa: BLE001 - no result to inspect: retry as before
            return True
    return not (isinstance(error, StageFailed) and not error.retryable)


class _Lines:
    """Sorts a stage's output lines into log levels as they arrive (DVC's and the stage's errors at ERROR,
    a traceback and a validation failure list with them)."""

    def __init__(self) -> None:
        self.block = False  # inside a traceback or a list of failed expectations

    def level(self, line: str) -> int:
        import logging

        if line.startswith("Traceback (most recent call last)") or _VALIDATION_HEAD.search(line):
            self.block = True
            return logging.ERROR
        if self.block:
            if line[:1].isspace():
                return logging.ERROR
            self.block = False
            if _EXCEPTION.match(line):
                return logging.ERROR
        if _DVC_ERROR.match(line) or _STAGE_ERROR.match(line) or _STAGE_LOG_ERROR.match(line):
            return logging.ERROR
        if _STAGE_LOG_WARNING.match(line) or line.startswith("WARNING:"):
            return logging.WARNING
        return logging.INFO


def _stream(cmd: list[str], cwd: str, env: dict[str, str], log: Any) -> tuple[int, list[str]]:
    """Run `cmd`, sending each output line to the Prefect task log as it arrives, at its level."""
    lines: list[str] = []
    levels = _Lines()
    with subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip()
            if line:
                lines.append(line)
                log.log(levels.level(line), "%s", line)
        return proc.wait(), lines


def exit_code(lines: list[str], rc: int) -> int:
    """The stage command's own exit status from DVC's message, else `dvc repro`'s (255 for any failure)."""
    for line in reversed(lines):
        if m := _CMD_EXIT.search(line):
            return int(m.group(1))
    return rc


def cause(lines: list[str], code: int = 1) -> str:
    """One line saying why a stage failed: the stage's own error line (`[stage] error: ...`; for a failed
    validation, its first failed expectation), else an exception's last line, else the stage's last
    output line, else the signal that killed it, else DVC's error."""
    found = [m.group(1) for line in lines if (m := _STAGE_ERROR.match(line))]
    if not found:
        found = [line for line in lines if _EXCEPTION.match(line)]
    if not found:
        found = [line for line in lines if not (_DVC_ERROR.match(line) or _DVC_CHATTER.match(line))]
    if not found and code < 0:
        try:
            found = [f"killed by {signal.Signals(-code).name} (out of memory, or stopped by hand)"]
        except ValueError:
            found = [f"killed by signal {-code}"]
    if not found:
        found = [m.group(1) for line in lines if (m := _DVC_ERROR.match(line))]
    text = found[-1].strip() if found else "no output"
    return text if len(text) <= _CAUSE_CHARS else text[: _CAUSE_CHARS - 3] + "..."


def _outcome(lines: list[str]) -> str:
    text = "\n".join(lines)
    return "up_to_date" if _UP_TO_DATE.search(text) else "restored" if _RESTORED.search(text) else "ran"


STATE_NAMES = {"ran": "Ran", "up_to_date": "Up to date", "restored": "Restored"}


@task(
    name="dvc-stage",
    task_run_name="{stage}",
    cache_policy=NO_CACHE,
    persist_result=False,
    retry_condition_fn=_retry_unless_bad_input,
)
def run_stage(
    stage: str,
    root: str,
    gpus: list[str] | None = None,
    lock_retries: int = 20,
    upstream_failed: list[str] | None = None,
) -> State[dict[str, Any]]:
    """`dvc --wait-for-lock repro --single-item <stage>`; completes in a state named after what DVC did
    (Ran / Up to date / Restored), or "Not run" (nothing started) when `upstream_failed` names stages.
    A GPU stage (`gpus`: the devices it may use) first takes a slot of a device's global concurrency
    limit, shared by every flow run and worker of this host, and sees only that device."""
    if upstream_failed:
        return Cancelled(name="Not run", message=f"upstream stage {', '.join(upstream_failed)} did not complete")
    log = get_run_logger()
    if gpus:
        with gpu_slot(gpus, log) as device:
            return _repro(stage, root, device, lock_retries, log)
    return _repro(stage, root, None, lock_retries, log)


def _repro(stage: str, root: str, gpu: str | None, lock_retries: int, log: Any) -> State[dict[str, Any]]:
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
            outcome = _outcome(lines)
            info = {"outcome": outcome, "lock_waits": lock_waits, "attempts": attempt}
            name = STATE_NAMES[outcome] + (f" (attempt {attempt})" if attempt > 1 else "")
            return Completed(data=info, name=name, message=f"{STATE_NAMES[outcome]} on attempt {attempt}")
        if any(_LOCK_ERROR.search(line) for line in lines) and lock_waits < lock_retries:
            lock_waits += 1
            delay = min(0.5 * 2 ** (lock_waits - 1), 10.0)
            log.warning("DVC lock busy; trying again in %.1f s (%d/%d)", delay, lock_waits, lock_retries)
            time.sleep(delay)
            continue
        code = exit_code(lines, rc)
        error = StageFailed(stage, code, cause(lines, code), attempt)
        _record_failure(str(runtime.task_run.id), str(error))
        log.error("%s", error)
        raise error


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
    exit_code: int | None = None


GPU_LIMIT_PREFIX = "multitab-gpu"


def gpu_limit_name(device: str) -> str:
    """The Prefect global concurrency limit of one GPU of this host: every flow run and worker here
    takes its slots, so two runs (or two workers) cannot put more stages on a device than it has slots."""
    host = re.sub(r"[^A-Za-z0-9-]+", "-", socket.gethostname()).strip("-").lower() or "host"
    return f"{GPU_LIMIT_PREFIX}-{host}-{device}"


def _gpu_slots(plan: StagePlan, cfg: OrchestrationConfig, gpu_concurrency: int | None) -> dict[str, int] | None:
    """Slots per visible CUDA device (device id -> slots), or None when GPU stages are not limited (no
    CUDA, or no GPU stage in the plan)."""
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
    # More slots than devices shares devices (useful for small models); fewer leaves devices idle.
    return {str(d): len(range(d, limit, n_devices)) for d in range(n_devices) if d < limit}


def ensure_gpu_limits(slots: dict[str, int], log: Any) -> None:
    """Create (or resize) the global concurrency limit of each device; the UI lists them under
    Concurrency, with the slots in use."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        for device, n in slots.items():
            name = gpu_limit_name(device)
            try:
                current = client.read_global_concurrency_limit_by_name(name)
            except ObjectNotFound:
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=n))
                log.info("created the global concurrency limit %s: %d slot(s)", name, n)
                continue
            if current.limit != n or not current.active:
                client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(limit=n, active=True))
                log.info("global concurrency limit %s: %d -> %d slot(s)", name, current.limit, n)


@contextlib.contextmanager
def gpu_slot(devices: list[str], log: Any) -> Iterator[str]:
    """Hold one slot of the least busy device's global concurrency limit; yields the device id."""
    from prefect.client.orchestration import get_client
    from prefect.concurrency.sync import concurrency

    with get_client(sync_client=True) as client:
        free = {}
        for d in devices:
            limit = client.read_global_concurrency_limit_by_name(gpu_limit_name(d))
            free[d] = limit.limit - limit.active_slots
    device = max(devices, key=lambda d: free[d])
    if free[device] <= 0:
        log.info("waiting for a slot of GPU %s (%s)", device, gpu_limit_name(device))
    with concurrency(gpu_limit_name(device), occupy=1, strict=True, raise_on_lease_renewal_failure=False):
        yield device


_CODE_IN_MESSAGE = re.compile(r"exited with code (-?\d+)")


def _collect(stage: str, future: PrefectFuture[Any], started: float) -> StageResult:
    future.wait()  # sets the future's final state from the runner, not from an API read that may lag
    state: State[Any] = future.state
    if state.is_cancelled() or state.is_pending():  # Not run: an upstream stage failed
        return StageResult(stage, "not_run", error=state.message)
    failures = _pop_failures(str(future.task_run_id))
    seconds = round(time.monotonic() - started, 2)
    if state.is_completed():
        info = future.result()
        return StageResult(
            stage, info["outcome"], info["attempts"], seconds, info["lock_waits"], None, failures
        )
    error = failures[-1] if failures else (state.message or "failed")
    m = _CODE_IN_MESSAGE.search(error)
    return StageResult(
        stage,
        "failed",
        max(len(failures), 1),
        seconds,
        error=error,
        failed_attempts=failures[:-1],
        exit_code=int(m.group(1)) if m else None,
    )


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
    """Run the DVC stages of `root` that have work to do (all, or `targets` and their upstream) as Prefect
    tasks, in graph order.

    Args:
        root: the DVC project (a checkout of this repository); relative paths are from the worker's folder.
        targets: stages (`split@higgs`), foreach groups (`train`) or shell patterns (`train@higgs-*`) to
            bring up to date with everything they depend on; empty: the whole dvc.yaml.
        workers: stages at once (default: params.yaml orchestration.workers).
        retries: extra attempts of a stage that crashed, was killed or hit a lock (never of a bad-input
            failure such as a failed validation); default: orchestration.retries.
        retry_delay: seconds before the first retry, doubling for each next one (orchestration).
        gpu_concurrency: GPU stages at once (default: one per visible CUDA device).
        params: the params file with `orchestration:`, relative to `root`.
    """
    log = get_run_logger()
    root = str(check_root(root))
    cfg = load_config(root, params)
    n_workers = workers or cfg.workers
    n_retries = cfg.retries if retries is None else retries
    delay = cfg.retry_delay_seconds if retry_delay is None else retry_delay
    plan = select(read_stage_graph(root, changed=True), targets)
    to_run = plan.to_run()
    gpus = _gpu_slots(plan, cfg, gpu_concurrency)
    log.info(
        "%d stages, %d up to date, %d to check with `dvc repro`; %d at once, %d retries (first after %.1f s), "
        "GPU slots: %s",
        len(plan.order),
        len(plan.order) - len(to_run),
        len(to_run),
        n_workers,
        n_retries,
        delay,
        {gpu_limit_name(d): n for d, n in gpus.items()} if gpus is not None else "unlimited (no CUDA)",
    )
    # Prefect's retry_delay_seconds as one number, which its UI shows (a list shows as "NaNs"); doubling
    # per retry would need a list: the first delay is used for every retry.
    stage_task = run_stage.with_options(retries=n_retries, retry_delay_seconds=delay)
    if gpus is not None:
        ensure_gpu_limits(gpus, log)
    n_gpu_slots = sum((gpus or {}).values())

    started_at = time.monotonic()
    futures: dict[str, PrefectFuture[Any]] = {}
    started: dict[str, float] = {}
    on_gpu: set[str] = set()
    results: dict[str, StageResult] = {
        s: StageResult(s, "up_to_date") for s in plan.order if s not in set(to_run)
    }
    bad: set[str] = set()  # failed or not run
    waiting = list(to_run)
    running: dict[PrefectFuture[Any], str] = {}
    while waiting or running:
        for stage in list(waiting):
            ups = plan.upstream[stage]
            if any(u in bad for u in ups):
                waiting.remove(stage)
                bad.add(stage)
                futures[stage] = stage_task.submit(
                    stage, root, upstream_failed=[u for u in ups if u in bad], return_state=False
                )
                running[futures[stage]] = stage
                started[stage] = time.monotonic()
                continue
            if not all(u in results for u in ups):
                continue
            n_busy = sum(1 for s in running.values() if s not in bad)
            is_gpu = gpus is not None and stage.split("@", 1)[0] in cfg.gpu_stages
            # GPU stages beyond the slots would only wait on the limit while holding a worker
            if n_busy >= n_workers or (is_gpu and len(on_gpu) >= n_gpu_slots):
                continue
            if is_gpu:
                on_gpu.add(stage)
            waiting.remove(stage)
            started[stage] = time.monotonic()
            futures[stage] = stage_task.submit(
                stage,
                root,
                sorted(gpus) if is_gpu and gpus else None,
                cfg.lock_retries,
                return_state=False,
                wait_for=[futures[u] for u in ups if u in futures],
            )
            running[futures[stage]] = stage
        if not running:
            raise RuntimeError(f"flows.pipeline: no stage can start; waiting: {waiting}")  # a cycle: DVC forbids
        done = next(as_completed(list(running)))
        stage = running.pop(done)
        on_gpu.discard(stage)
        result = _collect(stage, done, started[stage])
        results[stage] = result
        if result.status in ("failed", "not_run"):
            bad.add(stage)
        if result.status == "failed":
            log.error("stage %s failed after %d attempt(s): %s", stage, result.attempts, result.error)

    summary = summarise(plan, results, time.monotonic() - started_at, n_workers, n_retries)
    summary_path = Path(root) / cfg.summary
    write_json(summary_path, summary)
    print(format_summary(summary))
    log.info("summary written to %s", summary_path)
    publish_artifacts(Path(root), summary)
    if summary["failed"]:
        raise PipelineFailed(f"{len(summary['failed'])} stage(s) failed: {', '.join(summary['failed'])}")
    return summary


class PipelineFailed(RuntimeError):
    """At least one stage kept failing; the summary names it and why."""


class RootRefused(ValueError):
    """A deployment's run named a `root` other than the checkout the deployment was registered for."""


def check_root(root: str) -> Path:
    """The project folder of this run. A deployment's runs (ALLOWED_ROOTS_ENV set) may only name the
    checkout it was registered with: anyone who can reach the server could otherwise point a worker at a
    folder with their own dvc.yaml and have it run their commands."""
    resolved = Path(root).resolve()
    allowed = [Path(p).resolve() for p in os.environ.get(ALLOWED_ROOTS_ENV, "").split(os.pathsep) if p]
    if allowed and resolved not in allowed:
        raise RootRefused(
            f"root {root!r} is not the project this deployment runs ({', '.join(map(str, allowed))}); "
            "register a deployment for that checkout with `python -m flows.deploy --root ...`"
        )
    return resolved


def summarise(
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
        "subprocesses": sum(1 for r in ordered if r.attempts > 0),
        "wall_seconds": round(seconds, 2),
        "workers": workers,
        "retries": retries,
        "stages": {
            r.stage: {
                "status": r.status,
                "attempts": r.attempts,
                "seconds": r.seconds,
                "lock_waits": r.lock_waits,
                "exit_code": r.exit_code,
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
        ("up_to_date", "up to date"),
        ("restored", "restored from DVC's run cache"),
        ("retried", "retried"),
        ("failed", "FAILED"),
        ("not_run", "not run (upstream failed)"),
    ]:
        if summary[key]:
            lines.append(f"  {label} ({len(summary[key])}): {', '.join(summary[key])}")
    for stage in summary["failed"]:
        lines.append(f"  {summary['stages'][stage]['error']}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ artifacts

OUTCOME_WORDS = {
    "ran": "ran",
    "up_to_date": "up to date",
    "restored": "restored from run cache",
    "failed": "**FAILED**",
    "not_run": "not run",
}


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def summary_markdown(root: Path, summary: dict[str, Any]) -> str:
    """The `pipeline-summary` artifact: counts, one row per stage, and the headline results when
    `aggregate` ran."""
    counts = ", ".join(
        f"{len(summary[k])} {OUTCOME_WORDS[k].strip('*').lower()}"
        for k in ("ran", "restored", "up_to_date", "failed", "not_run")
        if summary[k]
    )
    out = [
        f"# multitab pipeline: {len(summary['stages'])} stages in {summary['wall_seconds']:.1f} s",
        "",
        f"{counts}; {len(summary['retried'])} retried; {summary['subprocesses']} `dvc repro` subprocesses.",
        "",
        "| stage | outcome | attempts | time (s) | cause |",
        "|---|---|---:|---:|---|",
    ]
    for stage, s in summary["stages"].items():
        outcome = OUTCOME_WORDS[s["status"]] + (" (retried)" if s["attempts"] > 1 else "")
        why = s["error"] or ""
        if s["failed_attempts"] and s["status"] != "failed":
            why = "earlier attempts: " + "; ".join(s["failed_attempts"])
        out.append(f"| {_cell(stage)} | {outcome} | {s['attempts']} | {s['seconds']:.1f} | {_cell(why)} |")
    if summary["stages"].get("aggregate", {}).get("status") in ("ran", "restored"):
        out += ["", *headline_markdown(root)]
    return "\n".join(out) + "\n"


def headline_markdown(root: Path) -> list[str]:
    """Table 3's Δm row (per dataset and model) and any MultiTab-Bench verdict from results/metrics.json."""
    path = root / METRICS
    if not path.exists():
        return [f"`aggregate` ran but {METRICS} is missing."]
    metrics = read_json(path)
    out = ["## Headline results", "", f"Report: `{root / REPORT}` (metrics: `{path}`).", ""]
    delta = metrics.get("delta_m") or {}
    models = list(dict.fromkeys(m for per in delta.values() for m in per))
    if delta and models:
        out += ["Δm (%) against the single-task baseline (Table 3):", ""]
        out += ["| dataset | " + " | ".join(models) + " |", "|---|" + "---:|" * len(models)]
        for dataset, per in delta.items():
            cells = [per.get(m, "") for m in models]
            shown = [f"{c:+.2f}" if isinstance(c, int | float) else str(c) for c in cells]
            standin = " (stand-in data)" if (metrics.get("standin") or {}).get(dataset) else ""
            out.append(f"| {_cell(dataset)}{standin} | " + " | ".join(shown) + " |")
    for key, value in metrics.items():
        if "verdict" in key.lower():
            out += ["", f"MultiTab-Bench verdict ({key}): {_cell(json.dumps(value))}"]
    return out


def validation_failures(root: Path, stage: str) -> list[dict[str, Any]]:
    """Failed expectations of a failed validation stage (`validate_raw@higgs`), from the records the
    validation writes beside its Data Docs: dataset, split, column, expectation, observed."""
    base, _, dataset = stage.partition("@")
    rows = []
    for path in sorted((root / VALIDATION_RESULTS).glob(f"{base}-{dataset}-*.json")):
        record = read_json(path)
        if record.get("stage") != base or record.get("dataset") != dataset or record.get("success", True):
            continue
        for f in record.get("failed", []):
            rows.append(
                {
                    "dataset": dataset,
                    "split": record.get("split"),
                    "column": f.get("column") or "(table)",
                    "expectation": f.get("expectation"),
                    "check": f.get("check"),
                    "observed": f.get("observed"),
                }
            )
    return rows


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:100]


def publish_artifacts(root: Path, summary: dict[str, Any]) -> None:
    """The run's summary (markdown) and one table per failed validation stage."""
    create_markdown_artifact(
        markdown=summary_markdown(root, summary),
        key="pipeline-summary",
        description="What every stage of this flow run did (DVC's outcome, attempts, time, cause).",
    )
    for stage in summary["failed"]:
        if not stage.startswith("validate_"):
            continue
        rows = validation_failures(root, stage)
        if rows:
            create_table_artifact(
                table=rows,
                key=_key(f"validation-failures-{stage}"),
                description=f"{stage}: {len(rows)} failed expectation(s); Data Docs in reports/validation/",
            )
