"""The Prefect flow over the DVC DAG: one task per stage that has work to do, retries only where a retry
can help, task states and artifacts that say what DVC did. The CLI and the overview are in
flows/pipeline.py; the DVC side (graph, what is stale, config) in flows/dag.py; reading DVC's output in
flows/dvc_output.py; GPU slots in flows/gpu.py; memory (stages admitted by their expected peak, a kill
named as probably out of memory) in flows/memory.py; the run summary and its artifacts in flows/summary.py.

Task states (the badge on the flow run page): "Ran", "Restored" (from DVC's run cache), "Up to date"
(DVC found nothing to do once its upstream had run), each with " (attempt N)" when it succeeded on a
retry; "Failed" with a short message naming the stage, the exit code and the cause; "Not run" (Cancelled)
naming the upstream stage that did not complete. Stages DVC already reported up to date before the run
get no task at all (no subprocess, no API calls); the run's markdown artifact `pipeline-summary` lists
every stage with its outcome, attempts, time and cause, and the headline results when `aggregate` ran;
each failed validation adds a table artifact of its failed expectations.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, runtime, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import TaskRun
from prefect.futures import PrefectFuture, as_completed
from prefect.states import Cancelled, Completed, Failed, State
from prefect.tasks import Task

from flows import memory
from flows.dag import load_config, read_stage_graph, select, sync_runs_file
from flows.dvc_output import LOCK_ERROR, cause, disk_full, dvc_outcome, exit_code, stream_command
from flows.gpu import ensure_gpu_limits, gpu_limit_name, gpu_slot, gpu_slots_of
from flows.provenance import label_run, run_provenance
from flows.summary import StageResult, format_summary, publish_artifacts, summarise
from multitab.exit_codes import BAD_INPUT, INTERRUPTED
from multitab.io import write_json

# Set by flows.deploy for the runs of a deployment: the project folders a run's `root` may name
# (os.pathsep-separated). Without it (`python -m flows.pipeline` by hand) any folder is accepted.
ALLOWED_ROOTS_ENV = "MULTITAB_ALLOWED_ROOTS"
# Set in a worker's environment (`python -m flows.fleet worker`): the checkout of that machine, which every
# run the worker executes uses as its project, whatever `root` the run names.
WORKER_ROOT_ENV = "MULTITAB_WORKER_ROOT"

# Set when the run is being stopped (Ctrl-C / SIGTERM, flows.pipeline): no stage starts or is retried.
STOPPING = threading.Event()
# flows.pipeline's handler that stops the whole run on SIGINT / SIGTERM (None: a deployment's run, where
# Prefect's own SIGTERM handling is the runner's way to cancel). Prefect's flow engine puts its SIGTERM
# handler in place around the flow; the flow puts this one back over it.
STOP_HANDLER: Any = None

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


# How many stage attempts are under way (_repro), so that a stop lets each log how it ended before the exit.
_ATTEMPTS = threading.Condition()
_ATTEMPTS_RUNNING = [0]


def _count_attempt(step: int) -> None:
    with _ATTEMPTS:
        _ATTEMPTS_RUNNING[0] += step
        _ATTEMPTS.notify_all()


def wait_for_attempts(timeout: float) -> None:
    """Until no stage attempt is under way (their commands were stopped: each logs that it was interrupted),
    at most `timeout` seconds."""
    with _ATTEMPTS:
        _ATTEMPTS.wait_for(lambda: _ATTEMPTS_RUNNING[0] == 0, timeout)


# -------------------------------------------------------------------------------------------- task


class StageFailed(RuntimeError):
    """One stage's `dvc repro` failed: the stage, the stage's exit code, the cause in one line, and
    whether a retry can help: not for multitab.exit_codes.BAD_INPUT, nor for a stage that was interrupted
    (exit INTERRUPTED or killed by SIGINT: Ctrl-C) or stopped with the run (`stopped`)."""

    def __init__(self, stage: str, code: int, cause: str, attempt: int, stopped: bool = False) -> None:
        self.stage, self.code, self.cause, self.attempt = stage, code, cause, attempt
        interrupted = stopped or code in (INTERRUPTED, -signal.SIGINT)
        self.retryable = code != BAD_INPUT and not interrupted
        kind = ("interrupted, not retried" if interrupted else "bad input, not retried" if code == BAD_INPUT
                else f"attempt {attempt}")
        super().__init__(f"stage {stage} exited with code {code} ({kind}): {cause}")


def _retry_unless_bad_input(task: Task[Any, Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Prefect's retry_condition_fn: retry a crash, a kill, a lock or an OOM; never a BAD_INPUT exit, and
    nothing while the run is being stopped."""
    if STOPPING.is_set():
        return False
    error = state.data
    if not isinstance(error, BaseException):
        try:
            error = state.result(raise_on_failure=False)
        except Exception:  # noqa: BLE001 - no result to inspect: retry as before
            return True
    return not (isinstance(error, StageFailed) and not error.retryable)



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
    sync_remote: bool = False,
    checkpoints: str | None = None,
) -> State[dict[str, Any]]:
    """`dvc --wait-for-lock repro --single-item <stage>`; completes in a state named after what DVC did
    (Ran / Up to date / Restored), or "Not run" (nothing started) when `upstream_failed` names stages.
    A GPU stage (`gpus`: the devices it may use) first takes a slot of a device's global concurrency
    limit, shared by every flow run and worker of this host, and sees only that device. With
    `sync_remote` (flows/remote.py) a stage another machine completed is restored from DVC's remote
    (`repro --pull`), a completed stage is pushed there, and the `checkpoints` folder is copied there while
    the stage runs (and back, before it starts, when this checkout has none)."""
    if upstream_failed:
        return Cancelled(name="Not run", message=f"upstream stage {', '.join(upstream_failed)} did not complete")
    log = get_run_logger()
    if not sync_remote:
        checkpoints = None
    if gpus:
        with gpu_slot(gpus, log) as device:
            return _synced_repro(stage, root, device, lock_retries, log, sync_remote, checkpoints)
    return _synced_repro(stage, root, None, lock_retries, log, sync_remote, checkpoints)


def _synced_repro(
    stage: str, root: str, gpu: str | None, lock_retries: int, log: Any, sync: bool, checkpoints: str | None
) -> State[dict[str, Any]]:
    """_repro, with the DVC remote's part when `sync` is on."""
    if not sync:
        return _repro(stage, root, gpu, lock_retries, log, pull=False)
    from flows import remote

    attempt = runtime.task_run.run_count
    try:
        if checkpoints:
            n = remote.restore_checkpoints(root, stage, checkpoints)
            if n:
                log.info("restored %d checkpoint file(s) of %s from the DVC remote into %s", n, stage, checkpoints)
            with remote.mirrored_checkpoints(root, stage, checkpoints):
                state = _repro(stage, root, gpu, lock_retries, log, pull=True)
        else:
            state = _repro(stage, root, gpu, lock_retries, log, pull=True)
        if state.data["outcome"] == "restored":  # it came from the remote: nothing to send back
            return state
        t0 = time.monotonic()
        remote.push(root, stage)
        if checkpoints:
            remote.drop_checkpoints(root, stage)
    except (remote.RemoteError, OSError) as e:
        error = StageFailed(stage, 1, f"DVC remote: {e}", attempt)
        _record_failure(str(runtime.task_run.id), str(error))
        log.error("%s", error)
        raise error from e
    log.info("pushed %s's outputs and run-cache entry to the DVC remote (%.1f s)", stage, time.monotonic() - t0)
    return state


def _repro(
    stage: str, root: str, gpu: str | None, lock_retries: int, log: Any, pull: bool = False
) -> State[dict[str, Any]]:
    _count_attempt(1)
    try:
        return _repro_attempt(stage, root, gpu, lock_retries, log, pull)
    finally:
        _count_attempt(-1)


def _repro_attempt(stage: str, root: str, gpu: str | None, lock_retries: int, log: Any, pull: bool
                   ) -> State[dict[str, Any]]:
    env = dict(os.environ)
    # The stages' `python -m stages...` must mean the interpreter running this flow (the project's venv).
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    # --pull: a stage DVC's run cache knows (from any machine, flows/remote.py) is restored with its outputs
    dvc_args = ["--wait-for-lock", "repro", "--single-item", *(["--pull"] if pull else []), stage]
    # DVC, run so that a SIGTERM to it (ours, or the kernel's if this process dies) stops the stage's command
    cmd = [sys.executable, "-m", "multitab.process", *dvc_args]
    attempt = runtime.task_run.run_count
    budget = memory.ACTIVE
    if budget is not None and attempt > 1:  # a retry waits until its expected peak (raised by a kill) fits
        budget.wait_to_fit(stage, STOPPING)
    log.info("attempt %d: dvc %s%s", attempt, " ".join(dvc_args), f" (GPU {gpu})" if gpu is not None else "")
    lock_waits = 0
    while True:
        if STOPPING.is_set():
            raise StageFailed(stage, INTERRUPTED, "the run is being stopped (Ctrl-C / SIGTERM)", attempt,
                              stopped=True)
        kills_before = memory.oom_kills()
        rc, lines, peak = stream_command(cmd, root, env, log)
        if rc == 0:
            outcome = dvc_outcome(lines)
            if budget is not None:
                budget.measure(stage, peak, ran=outcome == "ran", failed=False)
            info = {"outcome": outcome, "lock_waits": lock_waits, "attempts": attempt}
            name = STATE_NAMES[outcome] + (f" (attempt {attempt})" if attempt > 1 else "")
            return Completed(data=info, name=name, message=f"{STATE_NAMES[outcome]} on attempt {attempt}")
        if any(LOCK_ERROR.search(line) for line in lines) and lock_waits < lock_retries:
            lock_waits += 1
            delay = min(0.5 * 2 ** (lock_waits - 1), 10.0)
            log.warning("DVC lock busy; trying again in %.1f s (%d/%d)", delay, lock_waits, lock_retries)
            time.sleep(delay)
            continue
        code, stopped = exit_code(lines, rc), STOPPING.is_set()
        # killed by the flow's stop (SIGTERM), a stage has no line of its own, and `cause` would offer the
        # out-of-memory killer as a reason
        if stopped and code != INTERRUPTED:
            why = "stopped with the run (Ctrl-C / SIGTERM)"
        elif memory.killed_by_sigkill(code):
            why = memory.out_of_memory_line(stage, code, peak, kills_before, budget)
        else:
            why = disk_full(lines, root) or cause(lines, code)
        if budget is not None:
            budget.measure(stage, peak, ran=False, failed=True)
        error = StageFailed(stage, code, why, attempt, stopped=stopped)
        _record_failure(str(runtime.task_run.id), str(error))
        log.error("%s", error)
        raise error


# -------------------------------------------------------------------------------------------- flow


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
    groups: list[str] | None = None,
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
        targets: stages (`split@higgs`), foreach groups (`train`) or shell patterns (`train@real-higgs-*`)
            to bring up to date with everything they depend on; empty: the whole dvc.yaml.
        groups: opt-in run groups of params.yaml (`study`, the sweep groups) to put in the DAG: runs.yaml
            is written with them (multitab.runs); empty: the default DAG, as `make repro` runs it.
        workers: stages at once (default: params.yaml orchestration.workers).
        retries: extra attempts of a stage that crashed, was killed or hit a lock (never of a bad-input
            failure such as a failed validation); default: orchestration.retries.
        retry_delay: seconds before the first retry, doubling for each next one (orchestration).
        gpu_concurrency: GPU stages at once (default: one per visible CUDA device).
        params: the params file with `orchestration:`, relative to `root`.
    """
    log = get_run_logger()
    if STOP_HANDLER is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, STOP_HANDLER)
    worker_root = os.environ.get(WORKER_ROOT_ENV)
    if worker_root and Path(worker_root).resolve() != Path(root).resolve():
        log.info("running this worker's checkout %s (the run named %s)", worker_root, root)
        root = worker_root
    root = str(check_root(root))
    cfg = load_config(root, params)
    sync_runs_file(root, params, groups or ())
    if cfg.sync_remote:
        from flows import remote

        t0 = time.monotonic()
        remote.pull(root)
        log.info("pulled the DVC remote with its run cache (%.1f s)", time.monotonic() - t0)
    n_workers = workers or cfg.workers
    n_retries = cfg.retries if retries is None else retries
    delay = cfg.retry_delay_seconds if retry_delay is None else retry_delay
    plan = select(read_stage_graph(root, changed=True), targets)
    label_run(run_provenance(root, params), targets, params, log)
    to_run = plan.to_run()
    gpus = gpu_slots_of(plan, cfg, gpu_concurrency)
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
    budget = memory.start(Path(root), cfg.stage_memory, cfg.memory_budget_gb, plan.inputs, n_workers)
    log.info("%s", memory.describe(budget))

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
            if not budget.try_reserve(stage):  # its expected peak does not fit beside the running stages'
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
                sync_remote=cfg.sync_remote,
                checkpoints=plan.checkpoints.get(stage),
                return_state=False,
                wait_for=[futures[u] for u in ups if u in futures],
            )
            running[futures[stage]] = stage
        if not running:
            raise RuntimeError(f"flows.pipeline: no stage can start; waiting: {waiting}")  # a cycle: DVC forbids
        done = next(as_completed(list(running)))
        stage = running.pop(done)
        on_gpu.discard(stage)
        budget.release(stage)
        result = _collect(stage, done, started[stage])
        result.memory = memory.summary_fields(budget, stage)
        results[stage] = result
        if result.status in ("failed", "not_run"):
            bad.add(stage)
        if result.status == "failed":
            log.error("stage %s failed after %d attempt(s): %s", stage, result.attempts, result.error)

    summary = summarise(plan, results, time.monotonic() - started_at, n_workers, n_retries)
    summary_path = Path(root) / cfg.summary
    try:
        write_json(summary_path, summary)
        log.info("summary written to %s", summary_path)
    except OSError as e:  # a read-only results/ (nothing to retry): the summary is still printed
        log.error("summary not written: %s: %s", summary_path, e.strerror or e)
    print(format_summary(summary))
    publish_artifacts(Path(root), summary)
    if summary["failed"]:
        # A Failed state, not a raised exception: the stage's own line is the message, with no traceback
        # of the flow around it (calling the flow without return_state still raises PipelineFailed).
        error = PipelineFailed(failure_line(summary), summary)
        return Failed(message=str(error), data=error)  # type: ignore[return-value]
    return summary


def failure_line(summary: dict[str, Any]) -> str:
    """One line for a run with failed stages: how many, and the first one's own error line."""
    failed = summary["failed"]
    first = summary["stages"][failed[0]]
    more = f" (and {len(failed) - 1} more: {', '.join(failed[1:])})" if len(failed) > 1 else ""
    return f"{len(failed)} stage(s) failed; {failed[0]}: {first.get('error') or 'failed'}{more}"


def exit_status(summary: dict[str, Any]) -> int:
    """The run's exit status: BAD_INPUT when every failed stage failed on its input (nothing a re-run can
    change), else 1."""
    codes = {summary["stages"][s].get("exit_code") for s in summary["failed"]}
    return BAD_INPUT if codes == {BAD_INPUT} else 1


class PipelineFailed(RuntimeError):
    """At least one stage kept failing; the summary names it and why."""

    def __init__(self, message: str, summary: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.summary = summary or {}


class RootRefused(ValueError):
    """A deployment's run named a `root` other than the checkout the deployment was registered for."""


def check_root(root: str) -> Path:
    """The project folder of this run. A deployment's runs (ALLOWED_ROOTS_ENV set) may only name the
    checkout it was registered with: anyone who can reach the server could otherwise point a worker at a
    folder with their own dvc.yaml and have it run their commands."""
    resolved = Path(root).resolve()
    allowed = [Path(p).resolve() for p in os.environ.get(ALLOWED_ROOTS_ENV, "").split(os.pathsep) if p]
    if os.environ.get(WORKER_ROOT_ENV):  # the worker's own checkout, set by whoever started the worker
        allowed.append(Path(os.environ[WORKER_ROOT_ENV]).resolve())
    if allowed and resolved not in allowed:
        raise RootRefused(
            f"root {root!r} is not the project this deployment runs ({', '.join(map(str, allowed))}); "
            "register a deployment for that checkout with `python -m flows.deploy --root ...`"
        )
    return resolved


