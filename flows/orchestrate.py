"""The Prefect flow over the DVC DAG: one task per stage that has work to do, retries only where a retry
can help, task states and artifacts that say what DVC did. The CLI and the overview are in
flows/pipeline.py; the stage's task (its `dvc repro`, retries and states) in flows/stage_task.py; the DVC
side (graph, what is stale, config) in flows/dag.py; reading DVC's output in flows/dvc_output.py; GPU
slots in flows/gpu.py; memory (stages admitted by their expected peak, a kill named as probably out of
memory) in flows/memory.py; the run summary and its artifacts in flows/summary.py.

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
import threading
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.futures import PrefectFuture, as_completed
from prefect.states import Failed, State

from flows import memory
from flows.dag import load_config, read_stage_graph, select, sync_runs_file
from flows.gpu import ensure_gpu_limits, gpu_limit_name, gpu_slots_of
from flows.integrity import preflight
from flows.provenance import WORKER_ROOT_ENV, label_run, run_name, run_provenance
from flows.run_record import record_process
from flows.stage_task import pop_failures, run_stage
from flows.summary import StageResult, format_summary, publish_artifacts, summarise
from flows.warm_starts import running as warm_starts
from multitab.files import lock_writes
from multitab.files.integrity import IntegrityError
from multitab.files.io import write_json
from multitab.runtime.exit_codes import BAD_INPUT

# Set by flows.deploy for the runs of a deployment: the project folders a run's `root` may name
# (os.pathsep-separated). Without it (`python -m flows.pipeline` by hand) any folder is accepted.
ALLOWED_ROOTS_ENV = "MULTITAB_ALLOWED_ROOTS"

# flows.pipeline's handler that stops the whole run on SIGINT / SIGTERM (None: a deployment's run, where
# Prefect's own SIGTERM handling is the runner's way to cancel). Prefect's flow engine puts its SIGTERM
# handler in place around the flow; the flow puts this one back over it.
STOP_HANDLER: Any = None


# -------------------------------------------------------------------------------------------- flow


_CODE_IN_MESSAGE = re.compile(r"exited with code (-?\d+)")


def _collect(stage: str, future: PrefectFuture[Any], started: float) -> StageResult:
    future.wait()  # sets the future's final state from the runner, not from an API read that may lag
    state: State[Any] = future.state
    if state.is_cancelled() or state.is_pending():  # Not run: an upstream stage failed
        return StageResult(stage, "not_run", error=state.message)
    failures = pop_failures(str(future.task_run_id))
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


@flow(name="multitab-pipeline", log_prints=True, flow_run_name=run_name)  # named before its first log line
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
    record_process(root, log)  # and the runs of this checkout left Running by a killed process: Crashed
    deferred = lock_writes.batched()  # a bad MULTITAB_LOCK_WRITES stops here, before any stage
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
    recover_lock_entries(root, log)  # before DVC looks at dvc.lock
    plan = select(read_stage_graph(root, changed=True), targets)
    try:  # after the remote's pull; a deployment's run has no pre-flight of the CLI's before it
        preflight(root, plan)
    except IntegrityError as e:
        log.error("%s", e)
        return Failed(message=str(e), data=PipelineFailed(str(e), exit_code=BAD_INPUT))  # type: ignore[return-value]
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
    # the dvc.lock entries of completed stages, written in one merge before a stage after them starts
    lock = PendingLockEntries(root, deferred and not cfg.sync_remote, log)
    with warm_starts(root, cfg.stage_server and bool(to_run), log):  # flows/warm_starts.py
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
                lock.merge_before(stage, ups)  # it checks its inputs against dvc.lock
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
            lock.completed(stage, result.status)
            if result.status in ("failed", "not_run"):
                bad.add(stage)
            if result.status == "failed":
                log.error("stage %s failed after %d attempt(s): %s", stage, result.attempts, result.error)

    lock.merge()
    summary = summarise(plan, results, time.monotonic() - started_at, n_workers, n_retries)
    summary["lock_writes"] = lock.record()
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


class PendingLockEntries:
    """The dvc.lock entries of the stages this run completed that wait for a merge (multitab.files.lock_writes):
    merged before a stage after one of them starts, every MERGE_EVERY_SECONDS, and at the end. `active`
    false (MULTITAB_LOCK_WRITES=each, or the DVC remote's runs, which push what dvc.lock names): nothing waits."""

    def __init__(self, root: str, active: bool, log: Any) -> None:
        self.root, self.active, self.log = root, active, log
        self.stages: set[str] = set()
        self.since: float | None = None
        self.merges, self.entries, self.seconds = 0, 0, 0.0

    def completed(self, stage: str, status: str) -> None:
        if self.active and status in ("ran", "restored"):  # DVC wrote an entry (up to date: none)
            self.stages.add(stage)
            self.since = self.since or time.monotonic()
            if time.monotonic() - self.since >= lock_writes.MERGE_EVERY_SECONDS:
                self.merge()

    def merge_before(self, stage: str, upstream: tuple[str, ...]) -> None:
        if any(u in self.stages for u in upstream):
            self.merge()

    def merge(self) -> None:
        if not self.active:
            return
        t0 = time.monotonic()
        try:
            written = lock_writes.merge(self.root)
        except Exception as e:  # noqa: BLE001 - the entries stay pending; the next run writes them
            self.log.error("dvc.lock: %d completed stage(s) not written (%s: %s); they stay in %s and are "
                           "written by the next run", len(self.stages), type(e).__name__, e, lock_writes.PENDING_DIR)
            return
        self.stages.clear()
        self.since = None
        if written:
            self.merges += 1
            self.entries += len(written)
            self.seconds += time.monotonic() - t0
            self.log.info("dvc.lock: %d stage(s) written in one merge (%.1f s)", len(written), time.monotonic() - t0)

    def record(self) -> dict[str, Any]:
        return {"batched": self.active, "merges": self.merges, "entries": self.entries,
                "seconds": round(self.seconds, 2)}


def recover_lock_entries(root: str, log: Any) -> None:
    """The dvc.lock entries a killed run left pending (multitab.files.lock_writes.recover), before DVC reads it."""
    merged, dropped = lock_writes.recover(root)
    if merged:
        log.info("dvc.lock: wrote %d stage(s) an earlier run completed but had not recorded", len(merged))
    if dropped:
        log.warning("dvc.lock: %d stage(s) an earlier run completed were not recorded, their outputs changed since "
                    "(DVC decides again): %s", len(dropped), ", ".join(dropped))


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
    """At least one stage kept failing (the summary names it and why), or the pre-flight found a corrupted
    output (flows/integrity.py)."""

    def __init__(self, message: str, summary: dict[str, Any] | None = None, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.summary = summary or {}
        self.exit_code = exit_code  # the run's exit status where no stage decided it (the pre-flight)


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


