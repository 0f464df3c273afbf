"""Run the DVC DAG through Prefect: only the stages with work to do, in parallel, retried only where a
retry can help, with states and artifacts that say what DVC did.

    python -m flows.pipeline [--targets STAGE ...] [--groups GROUP ...] [--workers N] [--retries N] [--retry-delay S]
                             [--gpu-concurrency N] [--params params.yaml] [--root .] [--record]

dvc.yaml stays the only DAG. The flow asks DVC once, with the project open, for its stage graph
(foreach/matrix stages expanded, as in `dvc stage list`) and for the stages it would reproduce now
(`Stage.changed()`, what `dvc status` reports). The changed stages and everything downstream of them run
as Prefect tasks, `dvc --wait-for-lock repro --single-item <stage>`, in graph order as soon as their
upstream stages have completed; DVC still decides for each (a downstream stage whose inputs came out the
same is "Up to date"; one its run cache knows is "Restored") and computes what dvc.lock records, which the
flow writes in merges (multitab.files.lock_writes: one rewrite of dvc.lock for many stages). Every other
stage is up to date and costs no subprocess. With nothing to do, the command answers without starting
Prefect at all (about the time of `dvc status`; `--record` starts a flow run anyway).

Why this is safe to run in parallel on one repository: `dvc repro` releases the repository lock while a
stage's command runs and takes it again to hash the outputs and record them, and the flow's merges into
dvc.lock take it too, so dvc.lock is only ever rewritten by one process at a time (`--wait-for-lock` makes
the others wait instead of failing).
What can still fail under contention is DVC's short lock around its rwlock file (three seconds, no wait
option): such failures are recognised by their message and retried here without spending a retry.

Failure semantics: a stage that exits with multitab.runtime.exit_codes.BAD_INPUT (a failed validation, a schema or
config error, a malformed file) fails at once, as does one interrupted by Ctrl-C (INTERRUPTED, 130); any other
failure (a crash, a kill, an out-of-memory error) is retried `retries` times after `retry_delay` seconds. A
stage that keeps failing stops only its descendants ("Not run", naming the stage), and every independent stage
still runs. The summary (ran / up to date / restored from DVC's run cache / retried / failed and why / not
run) is printed, written to `orchestration.summary` and published as the flow run's `pipeline-summary`
artifact; the exit status is non-zero when a stage failed. The Prefect side is flows/orchestrate.py (a stage's
task: flows/stage_task.py), the DVC side flows/dag.py; with `orchestration.sync_remote` the DVC remote shared
by several machines, flows/remote.py (and flows/fleet.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flows.dag import (
    OrchestrationConfig,
    StagePlan,
    UnknownTarget,
    check_local_paths,
    closest,
    load_config,
    read_stage_graph,
    select,
    sync_runs_file,
)
from flows.integrity import preflight
from multitab.files import lock_writes
from multitab.files.paths import os_error_line
from multitab.runtime.exit_codes import BAD_INPUT, INTERRUPTED
from multitab.runtime.process import raise_deferred_ctrl_c

if TYPE_CHECKING:
    from flows.orchestrate import PipelineFailed, pipeline
    from flows.stage_task import StageFailed, run_stage

__all__ = [
    "OrchestrationConfig",
    "PipelineFailed",
    "StageFailed",
    "StagePlan",
    "UnknownTarget",
    "closest",
    "load_config",
    "main",
    "pipeline",
    "read_stage_graph",
    "run_stage",
    "select",
]

# name -> the module under flows/ that defines it
_PREFECT_NAMES = {"PipelineFailed": "orchestrate", "pipeline": "orchestrate", "StageFailed": "stage_task",
                  "run_stage": "stage_task"}


def __getattr__(name: str) -> Any:
    """The Prefect flow and task, imported on first use (Prefect takes seconds to import)."""
    if name in _PREFECT_NAMES:
        import importlib

        return getattr(importlib.import_module(f"flows.{_PREFECT_NAMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _nothing_to_do(root: Path, plan: StagePlan, summary_path: Path, seconds: float) -> None:
    """Print and write the summary of a run that found every stage up to date (no flow run)."""
    from multitab.files.io import write_json

    summary = {
        "ran": [],
        "up_to_date": list(plan.order),
        "restored": [],
        "retried": [],
        "failed": [],
        "not_run": [],
        "attempts": 0,
        "lock_waits": 0,
        "subprocesses": 0,
        "wall_seconds": round(seconds, 2),
        "workers": 0,
        "retries": 0,
        "stages": {
            s: {
                "status": "up_to_date",
                "attempts": 0,
                "seconds": 0.0,
                "lock_waits": 0,
                "exit_code": None,
                "error": None,
                "failed_attempts": [],
            }
            for s in plan.order
        },
    }
    write_json(summary_path, summary)
    print(f"pipeline: all {len(plan.order)} stages up to date (DVC); no flow run started. Summary: {summary_path}")


def main(argv: Sequence[str] | None = None) -> int:
    """The command line. Ctrl-C before the run starts (the imports, DVC reading the DAG, Prefect's import:
    seconds) is one line and exit 130; run as `python -m flows.pipeline`, it is acted on between those
    steps (flows/__init__.py defers it), never as a KeyboardInterrupt inside them. Once the run starts,
    `stop_everything_on_signals` stops it."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("flows.pipeline: stopped by SIGINT (Ctrl-C) before any stage started; run the same command again",
              file=sys.stderr)
        return INTERRUPTED


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.pipeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".", help="DVC project root (default: the current folder)")
    parser.add_argument("--targets", nargs="+", help="stages, foreach groups or patterns (default: all)")
    parser.add_argument("--groups", nargs="+", default=[], help="opt-in run groups to put in the DAG (e.g. study)")
    parser.add_argument("--workers", type=int, help="stages at once (default: orchestration.workers)")
    parser.add_argument("--retries", type=int, help="retries of a crashed stage (orchestration.retries)")
    parser.add_argument("--retry-delay", type=float, help="seconds before each retry (orchestration)")
    parser.add_argument("--gpu-concurrency", type=int, help="GPU stages at once (default: one per GPU)")
    parser.add_argument("--params", default="params.yaml", help="params file with `orchestration:`")
    parser.add_argument("--record", action="store_true", help="start a flow run even with nothing to do")
    args = parser.parse_args(argv)
    raise_deferred_ctrl_c()
    t0 = time.monotonic()
    try:  # fail fast, before Prefect starts; one look at the project
        cfg = load_config(args.root, args.params)
        check_local_paths(args.root, args.params)  # before DVC hashes them (a named pipe would hang it)
        sync_runs_file(args.root, args.params, args.groups)
        lock_writes.batched()  # a bad MULTITAB_LOCK_WRITES: one line
        merged, _ = lock_writes.recover(args.root)  # what a killed run completed, before DVC reads dvc.lock
        if merged:
            print(f"flows.pipeline: dvc.lock: wrote {len(merged)} stage(s) an earlier run completed but had not "
                  "recorded")
        plan = select(read_stage_graph(args.root, changed=True), args.targets)
        preflight(args.root, plan)  # no corrupted output passes as up to date (flows/integrity.py)
    except UnknownTarget as e:
        print(f"flows.pipeline: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - params, dvc.yaml or the files it names: one line, no traceback
        line = project_error(e)
        if line is None:
            raise
        print(f"flows.pipeline: {line}", file=sys.stderr)
        return BAD_INPUT
    raise_deferred_ctrl_c()
    if not plan.to_run() and not args.record:
        _nothing_to_do(Path(args.root), plan, Path(args.root) / cfg.summary, time.monotonic() - t0)
        return 0
    from flows.deploy import run_under_deployment
    from flows.orchestrate import PipelineFailed, exit_status, pipeline

    stop_everything_on_signals(args.root)
    raise_deferred_ctrl_c()  # one that came before the line above; nothing has started
    parameters = {"root": str(Path(args.root).resolve()), "targets": args.targets, "groups": args.groups,
                  "workers": args.workers, "retries": args.retries, "retry_delay": args.retry_delay,
                  "gpu_concurrency": args.gpu_concurrency, "params": args.params}
    with temporary_server_that_dies_with_us() as own_server:
        # listed under the deployment `make ui` serves (registered first on the checkout's own server)
        state = run_under_deployment(pipeline, parameters, register=own_server)
    if state.is_completed():
        return 0
    if isinstance(state.data, PipelineFailed) and state.data.exit_code is not None:  # no stage ran
        print(f"flows.pipeline: {state.message}", file=sys.stderr)
        return state.data.exit_code
    # The run's summary: in the Failed state (when Prefect kept the object) or in the file the flow wrote.
    summary = state.data.summary if isinstance(state.data, PipelineFailed) else {}
    if not summary:
        with contextlib.suppress(OSError, ValueError):
            summary = json.loads((Path(args.root) / cfg.summary).read_text())
    print(f"flows.pipeline: {state.message or 'the run failed'}", file=sys.stderr)
    return exit_status(summary) if summary.get("failed") else 1


def stop_everything_on_signals(root: str = ".") -> None:
    """Ctrl-C (SIGINT) or SIGTERM stop the whole run at once: every process this one started (the running
    stages' `dvc repro` and their commands, Prefect's temporary server) is terminated, the dvc.lock entries
    of the stages that completed are merged (multitab.files.lock_writes; what a busy lock keeps waiting is
    merged by the next run), one line says how to continue, and the exit status is 128 + the signal.
    Nothing is retried and nothing half-written stays: stages write their outputs atomically, a stage is
    recorded only once it completed, dvc.lock is replaced whole, and training resumes from its last
    checkpoint, so the same command continues the run."""

    def stop(signum: int, frame: Any) -> None:
        from flows.stage_task import STOPPING, wait_for_attempts

        STOPPING.set()  # no stage starts or is retried from now on
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
        from multitab.runtime.process import terminate_descendants

        terminate_descendants()
        wait_for_attempts(5.0)  # each stopped stage logs that it was interrupted (and why) before we exit
        with contextlib.suppress(Exception):  # the lock held (by a merge this stop interrupted): the next run
            lock_writes.merge(root, tries=5)
        name = signal.Signals(signum).name
        line = (f"flows.pipeline: stopped by {name}; the stages that completed are recorded in dvc.lock: run "
                "the same command again to continue\n")
        os.write(2, line.encode())  # straight to stderr (print would go through Prefect's log capture), last
        os._exit(128 + signum)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    from flows import orchestrate

    orchestrate.STOP_HANDLER = stop  # the flow re-installs it over Prefect's SIGTERM handler


@contextlib.contextmanager
def temporary_server_that_dies_with_us() -> Iterator[bool]:
    """Without PREFECT_API_URL, Prefect starts a temporary server for the run by itself; start it here
    instead, the same way (its SubprocessASGIServer), but asking the kernel to stop it when this process
    dies, even by SIGKILL (which no handler sees), so that no server is left listening. With
    PREFECT_API_URL set (a real server, `make ui`, the tests' harness) nothing changes. Yields whether it
    started one (its database is the checkout's own, in PREFECT_HOME)."""
    import functools
    import subprocess
    from unittest import mock

    from prefect.settings import PREFECT_API_URL, temporary_settings

    if PREFECT_API_URL.value():
        yield False
        return
    from prefect.server.api.server import SubprocessASGIServer

    from multitab.runtime.process import die_with_parent

    server = SubprocessASGIServer()
    # from this (the main) thread, which lives as long as the process
    with mock.patch.object(subprocess, "Popen", functools.partial(subprocess.Popen, preexec_fn=die_with_parent)):
        server.start()
    # Stopped at exit (SubprocessASGIServer.start registers it with atexit), after Prefect's log and event
    # workers have sent what they hold: stopping it here would leave them retrying against a closed port.
    with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
        yield True


def project_error(e: BaseException) -> str | None:
    """One line for an error in the project's own files found while reading the DAG (params.yaml, dvc.yaml,
    the paths they name: DVC's errors, a YAML error, a path that is not there or loops), or None for an
    error of this program (which keeps its traceback)."""
    from dvc.exceptions import DvcException
    from dvc.rwlock import RWLOCK_FILE, RWLockFileCorruptedError, RWLockFileFormatError

    if isinstance(e, ValueError):  # ConfigError included
        return str(e)
    if isinstance(e, (RWLockFileCorruptedError, RWLockFileFormatError)):
        # DVC truncates its lock table before it rewrites it: a DVC command killed in between (Ctrl-C on
        # `make repro`, a killed flow) leaves it empty, and every later DVC command stops on it
        named = re.search(r"RWLock-file '([^']+)'", str(e))
        path = named.group(1) if named else str(Path(".dvc") / "tmp" / RWLOCK_FILE)
        return (f"{path}: DVC's table of stage locks is unreadable (left empty or half-written by a DVC command "
                f"killed while writing it). If no `dvc` or `make repro` is running in this project, delete it "
                f"(`rm {path}`) and run again")
    if isinstance(e, DvcException):
        text = " ".join(str(e).split()) or type(e).__name__
        cause = e.__cause__ or e.__context__
        if cause is not None and str(cause):
            text += f" ({' '.join(str(cause).split())})"
        return f"dvc.yaml / params.yaml: {text}"
    if isinstance(e, OSError):
        return os_error_line(e)
    if isinstance(e, AssertionError):  # DVC asserts on some malformed stage definitions (an empty path)
        return ("dvc.yaml / params.yaml: DVC rejected a stage definition (an empty or null path, e.g. "
                "datasets.<D>.local.path: \"\"?); run `dvc stage list` for DVC's own message")
    return None


if __name__ == "__main__":
    sys.exit(main())
