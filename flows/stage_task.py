"""One DVC stage as a Prefect task (flows.orchestrate's flow submits it): `dvc repro --single-item <stage>`
with a GPU slot where the stage needs one, the DVC remote's part when the run syncs through it, DVC's lock
waited for, a retry only where one can help (never after a bad-input exit or while the run is being stopped),
and a state named after what DVC did (Ran / Up to date / Restored) or a failure naming the stage, its exit
code and its cause.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from prefect import get_run_logger, runtime, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import TaskRun
from prefect.states import Cancelled, Completed, State
from prefect.tasks import Task

from flows import memory
from flows.dvc_output import LOCK_ERROR, cause, disk_full, dvc_outcome, exit_code, stream_command
from flows.gpu import gpu_slot
from flows.integrity import check_restored, sweep_restored
from multitab.files import lock_writes
from multitab.files.integrity import IntegrityError
from multitab.runtime import warm_command
from multitab.runtime.exit_codes import BAD_INPUT, INTERRUPTED

# Set when the run is being stopped (Ctrl-C / SIGTERM, flows.pipeline): no stage starts or is retried.
STOPPING = threading.Event()

# Why each attempt of a task run failed (AwaitingRetry states carry no message), filled by the task and read
# by the flow; both run in this process with the thread-pool runner.
_FAILED_ATTEMPTS: dict[Any, list[str]] = {}
_FAILED_ATTEMPTS_LOCK = threading.Lock()


# Module-level functions, not inline code: a served deployment cloudpickles the flow and its tasks by value,
# and a function referenced by name keeps the (unpicklable) lock out of that payload.
def _record_failure(task_run_id: str, message: str) -> None:
    with _FAILED_ATTEMPTS_LOCK:
        _FAILED_ATTEMPTS.setdefault(task_run_id, []).append(message)


def pop_failures(task_run_id: str) -> list[str]:
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


class StageFailed(RuntimeError):
    """One stage's `dvc repro` failed: the stage, the stage's exit code, the cause in one line, and
    whether a retry can help: not for multitab.runtime.exit_codes.BAD_INPUT, nor for a stage that was interrupted
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
    # a warm stage's command (multitab.runtime.stage_server) writes its stage's peak memory here: the process
    # that ran the stage is not below DVC, where wait4 counts (flows/memory.py)
    peak_fd, peak_file = tempfile.mkstemp(prefix="multitab-peak-")
    os.close(peak_fd)
    try:
        return _repro_attempt(stage, root, gpu, lock_retries, log, pull, peak_file)
    finally:
        _count_attempt(-1)
        with contextlib.suppress(OSError):
            os.unlink(peak_file)


def _repro_attempt(stage: str, root: str, gpu: str | None, lock_retries: int, log: Any, pull: bool,
                   peak_file: str) -> State[dict[str, Any]]:
    env = dict(os.environ)
    # The stages' `python -m stages...` must mean the interpreter running this flow (the project's venv).
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
        env.pop(warm_command.STAGE_SERVER_ENV, None)  # CUDA starts in the stage's own process, not a warm one
    env[warm_command.PEAK_FILE_ENV] = peak_file
    # --pull: a stage DVC's run cache knows (from any machine, flows/remote.py) is restored with its outputs
    dvc_args = ["--wait-for-lock", "repro", "--single-item", *(["--pull"] if pull else []), stage]
    # DVC, run so that a SIGTERM to it (ours, or the kernel's if this process dies) stops the stage's command;
    # without the DVC remote, its dvc.lock entry waits for the flow's next merge (multitab.files.lock_writes)
    deferred = not pull and lock_writes.batched()
    runner = "multitab.files.lock_writes" if deferred else "multitab.runtime.process"
    cmd = [sys.executable, "-m", runner, *dvc_args]
    if env.get(warm_command.STAGE_SERVER_ENV):  # DVC too starts warm (multitab.runtime.stage_server)
        cmd[2:2] = ["multitab.runtime.warm_command"]
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
        started = time.time()
        rc, lines, peak = stream_command(cmd, root, env, log)
        peak = max(peak, warm_command.read_peak(peak_file))
        if rc == 0:
            outcome = dvc_outcome(lines)
            if budget is not None:
                budget.measure(stage, peak, ran=outcome == "ran", failed=False)
            if outcome == "restored":  # copied from cache objects DVC does not hash: before any stage reads them
                waiting = lock_writes.pending_entry(root, stage) if deferred else None
                try:
                    check_restored(root, stage, waiting)
                except IntegrityError as e:
                    error = StageFailed(stage, BAD_INPUT, str(e), attempt)
                    _record_failure(str(runtime.task_run.id), str(error))
                    log.error("%s", error)
                    raise error from None
                try:  # what a killed earlier run left: the stage's command, which would remove it, did not run
                    for path in sweep_restored(root, stage, before=started, entry=waiting):
                        log.info("removed %s (left by a killed earlier run)", path)
                except (OSError, ValueError) as e:
                    log.warning("%s: what a killed earlier run left beside its outputs stays (%s)", stage, e)
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
