"""A run of the flow names the process that runs it, and the runs whose process is gone are marked Crashed.

`record_process`, at the start of every run of the flow (flows/orchestrate.py): the run's
`infrastructure_pid` names this process (`multitab:<host>:<pid>`, unless a worker set its own), and every flow
run of this checkout (its `root` parameter) that the server still calls Running although its process on this
host is gone (killed: SIGKILL, an out-of-memory kill, a power cut; nothing in it could report the end) is set
Crashed, with its task runs still Running. Without it such a run stays "Running" in the UI for ever.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

OWNER = "multitab"
FLOW_NAME = "multitab-pipeline"
# the server sets a run's start time when it enters Running, after its process started: a process with the
# run's pid created later than this after it is another one (the pid was reused)
_CLOCK_SLACK_SECONDS = 2.0


def owner() -> str:
    return f"{OWNER}:{socket.gethostname()}:{os.getpid()}"


def _owner_pid(infrastructure_pid: str | None) -> int | None:
    """The pid of `owner()`'s form on this host, else None (another host, a worker's own, none)."""
    parts = (infrastructure_pid or "").split(":")
    if len(parts) != 3 or parts[0] != OWNER or parts[1] != socket.gethostname() or not parts[2].isdigit():
        return None
    return int(parts[2])


def _alive(pid: int, started: Any) -> bool:
    import psutil

    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        return False
    return started is None or created <= started.timestamp() + _CLOCK_SLACK_SECONDS


def this_checkout(parameters: Mapping[str, Any], root: Path) -> bool:
    """Whether a flow run's or deployment's parameters name `root` (resolved) as their project."""
    given = parameters.get("root")
    return isinstance(given, str) and Path(given).is_absolute() and Path(given).resolve() == root


def record_process(root: str | Path, log: Any) -> list[str]:
    """Name this process as the current flow run's and mark the dead runs of this checkout Crashed (see the
    module docstring); returns the names of the runs marked. A server that refuses costs a log line."""
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    root = Path(root).resolve()
    try:
        with get_client(sync_client=True) as client:
            current = client.read_flow_run(flow_run.id) if flow_run.id is not None else None
            if current is not None and not current.infrastructure_pid:
                client.update_flow_run(current.id, infrastructure_pid=owner())
            return _mark_crashed(client, root, log)
    except Exception as e:  # noqa: BLE001 - bookkeeping is not worth failing the run for
        log.warning("could not check for flow runs left Running by a killed process: %s", e)
        return []


def _mark_crashed(client: Any, root: Path, log: Any) -> list[str]:
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterState,
        FlowRunFilterStateType,
        TaskRunFilter,
        TaskRunFilterState,
        TaskRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort, TaskRunSort
    from prefect.states import Crashed

    running = client.read_flow_runs(
        flow_filter=FlowFilter(name=FlowFilterName(any_=[FLOW_NAME])),
        flow_run_filter=FlowRunFilter(
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING]))),
        # Prefect 3.8.8's sync client sends nulls for these otherwise, which its server rejects (422)
        sort=FlowRunSort.START_TIME_ASC,
        limit=200,
    )
    marked = []
    for run in running:
        pid = _owner_pid(run.infrastructure_pid)
        if pid is None or not this_checkout(run.parameters or {}, root) or _alive(pid, run.start_time):
            continue
        why = (f"its process ({run.infrastructure_pid}) ended without reporting the run's end (killed: SIGKILL, "
               "out of memory, a power cut); marked at the next start of the pipeline in this checkout")
        client.set_flow_run_state(run.id, Crashed(message=why), force=True)
        tasks = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])),
            task_run_filter=TaskRunFilter(
                state=TaskRunFilterState(type=TaskRunFilterStateType(any_=[StateType.RUNNING]))),
            sort=TaskRunSort.EXPECTED_START_TIME_ASC,
            limit=200,
        )
        for task_run in tasks:
            client.set_task_run_state(task_run.id, Crashed(message=f"its flow run crashed: {why}"), force=True)
        log.warning("flow run %r (%s) was still Running although its process is gone: marked Crashed", run.name,
                    run.id)
        marked.append(run.name)
    return marked
