"""Check, through the Prefect API, that the deployment served by `make ui` is scheduled and runs.

    python -m flows.check_deployment [--api-url http://127.0.0.1:4200/api] [--trigger]
                                     [--targets STAGE ...] [--timeout 900]

Prints the deployment's schedule, its flow runs (scheduled and past) with their UI links, and how long
the last complete run of the whole DAG took here; with `--trigger` it starts a run (as the UI's "Run"
button does; with `--targets` only those stages and what they need, e.g. `--targets validate_raw@higgs`,
since a whole-DAG run on a fresh checkout takes far longer than the timeout) and waits for its final
state. Exits 0 when the deployment has its cron schedule, at least one flow run of it is visible, and a
triggered run completed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import cast

from prefect.client.schemas.objects import FlowRun

from flows.deploy import FULL_NAME


def _full_run_time(runs: list[FlowRun]) -> str:
    """How long the newest completed whole-DAG run (no `targets`) of the deployment took."""
    full = [r for r in runs if r.state is not None and r.state.is_completed() and not r.parameters.get("targets")]
    if not full:
        return "no complete run of the whole DAG recorded here yet"
    r = max(full, key=lambda r: r.end_time or r.expected_start_time or 0)  # type: ignore[arg-type, return-value]
    return f"the last complete run of the whole DAG ({r.name}) took {r.total_run_time.total_seconds() / 60:.1f} min"


def check(
    api_url: str,
    trigger: bool,
    timeout: float,
    wait_scheduled: float = 60.0,
    targets: Sequence[str] | None = None,
) -> int:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.client.schemas.sorting import FlowRunSort
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    ui = api_url.removesuffix("/api")
    with temporary_settings(updates={PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(FULL_NAME)
        crons = [getattr(s.schedule, "cron", None) for s in deployment.schedules if s.active]
        print(
            f"deployment {FULL_NAME} ({deployment.id}): cron {crons}, {ui}/deployments/deployment/{deployment.id}"
        )
        ok = any(crons)
        if trigger:
            parameters = {"targets": list(targets)} if targets else None
            run = cast(FlowRun, run_deployment(FULL_NAME, parameters=parameters, timeout=0, as_subflow=False))
            what = f"targets {' '.join(targets)}" if targets else "the whole DAG"
            print(f"triggered flow run {run.name} ({what}): {ui}/runs/flow-run/{run.id}", flush=True)
            deadline = time.monotonic() + timeout
            while True:
                run = client.read_flow_run(run.id)
                if run.state is not None and run.state.is_final():
                    break
                if time.monotonic() > deadline:
                    print(
                        f"flow run {run.name} not finished after {timeout:.0f} s "
                        f"({run.state.name if run.state else '?'}; "
                        "it goes on in the server: follow it in the UI). A part of the DAG finishes sooner: "
                        "--targets STAGE",
                        file=sys.stderr,
                    )
                    return 1
                time.sleep(2)
            print(f"flow run {run.name} finished: {run.state.name if run.state else None}")
            ok = ok and run.state is not None and run.state.is_completed()
        deadline = time.monotonic() + wait_scheduled
        while True:
            runs = client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id])),
                sort=FlowRunSort.EXPECTED_START_TIME_DESC,
                limit=20,
            )
            scheduled = [r for r in runs if r.state is not None and r.state.is_scheduled()]
            if scheduled or time.monotonic() > deadline:
                break
            time.sleep(2)
        for r in runs:
            print(
                f"  {r.state.name if r.state else '?':<10} {r.expected_start_time}  {r.name}  {ui}/runs/flow-run/{r.id}"
            )
        print(_full_run_time(runs))
        if not scheduled:
            print("no scheduled flow run of the deployment is visible", file=sys.stderr)
        return 0 if ok and runs and scheduled else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flows.check_deployment", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--api-url", default="http://127.0.0.1:4200/api")
    parser.add_argument("--trigger", action="store_true", help="start a run and wait for it")
    parser.add_argument("--targets", nargs="+", help="with --trigger: run only these stages (and their upstream)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for a triggered run")
    args = parser.parse_args(argv)
    return check(args.api_url, args.trigger, args.timeout, targets=args.targets)


if __name__ == "__main__":
    sys.exit(main())
