"""Check, through the Prefect API, that the deployment served by `make ui` is scheduled and runs.

    python -m flows.check_deployment [--api-url http://127.0.0.1:4200/api] [--trigger] [--timeout 900]

Prints the deployment's schedule and its flow runs (scheduled and past) with their UI links; with
`--trigger` it starts a run (as the UI's "Run" button does) and waits for its final state. Exits 0 when the
deployment has its cron schedule, at least one flow run of it is visible, and a triggered run completed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import cast

from prefect.client.schemas.objects import FlowRun

from flows.deploy import FULL_NAME


def check(api_url: str, trigger: bool, timeout: float, wait_scheduled: float = 60.0) -> int:
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
            run = cast(FlowRun, run_deployment(FULL_NAME, timeout=0, as_subflow=False))
            print(f"triggered flow run {run.name}: {ui}/runs/flow-run/{run.id}", flush=True)
            deadline = time.monotonic() + timeout
            while True:
                run = client.read_flow_run(run.id)
                if run.state is not None and run.state.is_final():
                    break
                if time.monotonic() > deadline:
                    print(
                        f"flow run {run.name} not finished after {timeout:.0f} s: {run.state}",
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
        if not scheduled:
            print("no scheduled flow run of the deployment is visible", file=sys.stderr)
        return 0 if ok and runs and scheduled else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flows.check_deployment", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--api-url", default="http://127.0.0.1:4200/api")
    parser.add_argument("--trigger", action="store_true", help="start a run and wait for it")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for a triggered run")
    args = parser.parse_args(argv)
    return check(args.api_url, args.trigger, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
