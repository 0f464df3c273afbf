"""`make ui`: start a local Prefect server (offline) and serve the pipeline as a scheduled deployment.

    python -m flows.deploy [--host 127.0.0.1] [--port 4200] [--params params.yaml] [--no-server]
    python -m flows.deploy --pool NAME [--name multitab] [--targets STAGE ...] [--no-schedule]   (PREFECT_API_URL set)

The server keeps its SQLite database in PREFECT_HOME (`.prefect/` in the checkout, git-ignored), runs
with telemetry off and needs no network. The deployment `multitab-pipeline/multitab` runs `flows.pipeline`
on `orchestration.schedule` (cron, `orchestration.timezone`) from params.yaml; runs can also be started
from the UI ("Run" on the deployment's page) or with `python -m flows.check_deployment --trigger`. Ctrl-C
stops both the runner and the server. With `--no-server` it serves against the server in PREFECT_API_URL.

With `--pool` it registers the deployment with a work pool of the server in PREFECT_API_URL instead and
exits: every `prefect worker start --pool NAME` (on this machine or another with the same checkout path)
then runs its flow runs (docs/orchestration.md, "Several machines"; tests/test_pipeline_scale_out.py,
tests/test_fleet.py). `--no-schedule` leaves out the cron schedule: runs start only when asked for (the UI,
`python -m flows.fleet run`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from flows.dag import load_config
from flows.orchestrate import ALLOWED_ROOTS_ENV, pipeline
from flows.run_record import this_checkout
from multitab.config import ConfigError

DEPLOYMENT = "multitab"
FULL_NAME = f"{pipeline.name}/{DEPLOYMENT}"


def start_server(
    host: str, port: int, timeout: float = 180.0, log: Path | None = None
) -> subprocess.Popen[bytes]:
    """`prefect server start` as a child process (output to `log` when given); returns once its health
    endpoint answers."""
    env = {
        **os.environ,
        "PREFECT_UI_ENABLED": "true",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        # Scheduled runs of a new deployment appear within seconds instead of the default minute.
        "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": os.environ.get(
            "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS", "5"
        ),
    }
    env.pop("PREFECT_API_URL", None)  # the server must not try to talk to another server
    # The UI's API address: by default Prefect gives the UI port 4200 whatever `--port` says, so a server
    # on another port served a UI that could not reach its API. Behind 0.0.0.0, set PREFECT_UI_API_URL
    # to the address browsers use.
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    env.setdefault("PREFECT_UI_API_URL", f"http://{shown}:{port}/api")
    out = log.open("wb") if log is not None else None
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", host, "--port", str(port)],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT if out is not None else None,
    )
    if out is not None:
        out.close()  # the child keeps its own descriptor
    url = f"http://{host}:{port}/api/health"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"flows.deploy: `prefect server start` exited with code {proc.returncode}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"flows.deploy: the Prefect server did not answer on {url} within {timeout:.0f} s")


def deployment_options(root: Path, params: str) -> dict[str, Any]:
    """The deployment `make ui` serves (and `make repro` registers when it is not there yet, so that its runs
    are listed under it: flows/run_record.py), as keyword arguments of Flow.serve / Flow.to_deployment."""
    from prefect.deployments.runner import EntrypointType
    from prefect.schedules import Cron

    cfg = load_config(root, params)
    return {
        "name": DEPLOYMENT,
        "schedules": [Cron(cfg.schedule, timezone=cfg.timezone)],
        "parameters": {"root": str(root), "params": params},
        "description": "The MultiTab DVC DAG (dvc.yaml), run stage by stage by flows.pipeline.",
        "tags": ["multitab", "dvc"],
        # The flow runs in a child process that imports `flows.pipeline` from this checkout.
        "entrypoint_type": EntrypointType.MODULE_PATH,
    }


def serve(root: Path, params: str) -> None:
    """Register the scheduled deployment and run its flow runs here until interrupted."""
    options = deployment_options(root, params)
    # the runs this process starts (in child processes) accept only this project as `root`
    os.environ[ALLOWED_ROOTS_ENV] = str(root.resolve())
    pipeline.serve(**options, pause_on_shutdown=False)


def run_under_deployment(flow: Any, parameters: dict[str, Any], register: bool) -> Any:
    """Run `flow` here, in this process, with `parameters` as a flow run of this checkout's deployment, so that
    the deployment's page lists `make repro`'s runs beside its scheduled ones; returns its final state.

    The flow run is created from the deployment in state Pending (a runner serving the deployment picks up
    Scheduled runs only) and executed by Prefect's flow engine (`prefect.flow_engine.run_flow` with that flow
    run: what a runner's child process does). With `register` (Prefect's temporary server: the checkout's own
    database, .prefect/) the deployment is registered first, as `make ui` registers it, when it is not there
    yet; otherwise only an existing deployment of this checkout is used, else the run is a plain flow run."""
    from prefect.flow_engine import run_flow
    from prefect.states import Pending

    deployment_id = _deployment_id(Path(parameters["root"]).resolve(), parameters.get("params") or "params.yaml",
                                   register)
    if deployment_id is None:
        return flow(**parameters, return_state=True)
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        run = client.create_flow_run_from_deployment(deployment_id, parameters=parameters, state=Pending())
    return run_flow(flow, flow_run=run, parameters=parameters, return_type="state")


def _deployment_id(root: Path, params: str, register: bool) -> Any:
    """The id of this checkout's deployment (its `root` parameter), registered when absent and `register`."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            found = client.read_deployment_by_name(FULL_NAME)
        except ObjectNotFound:
            found = None
    if found is not None:
        return found.id if this_checkout(found.parameters or {}, root) else None
    if not register:
        return None
    return pipeline.to_deployment(**deployment_options(root, params)).apply()


def deploy_to_pool(
    root: Path,
    params: str,
    pool: str,
    name: str = DEPLOYMENT,
    targets: Sequence[str] | None = None,
    scheduled: bool = True,
) -> str:
    """Register the pipeline (from this checkout's source) as deployment `name` of work pool `pool`,
    scheduled like `make ui` unless `scheduled` is false; returns the deployment id. Workers load
    `flows/orchestrate.py` from this checkout's path and get `src` on PYTHONPATH."""
    from prefect.schedules import Cron

    cfg = load_config(root, params)
    repo = Path(__file__).resolve().parent.parent
    parameters: dict[str, object] = {"root": str(root), "params": params}
    if targets:
        parameters["targets"] = list(targets)
    source: Any = pipeline.from_source(source=str(repo), entrypoint="flows/orchestrate.py:pipeline")
    # Not Flow.deploy(): in Prefect 3.8.8 it lists the pool's workers with limit=None, which the server
    # rejects (422). Building the deployment and applying it registers the same thing.
    deployment = source.to_deployment(
        name=name,
        work_pool_name=pool,
        parameters=parameters,
        schedules=[Cron(cfg.schedule, timezone=cfg.timezone)] if scheduled else [],
        job_variables={
            "env": {
                "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)]),
                # a run's `root` parameter must name this project (flows.orchestrate.check_root)
                ALLOWED_ROOTS_ENV: str(root.resolve()),
            }
        },
        description="The MultiTab DVC DAG (dvc.yaml), run stage by stage by flows.pipeline.",
        tags=["multitab", "dvc"],
    )
    return str(deployment.apply())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.deploy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4200)
    parser.add_argument("--root", default=".", help="DVC project root (default: the current folder)")
    parser.add_argument("--params", default="params.yaml", help="params file with `orchestration:`")
    parser.add_argument("--no-server", action="store_true", help="use the server in PREFECT_API_URL")
    parser.add_argument("--pool", help="register the deployment with this work pool (PREFECT_API_URL) and exit")
    parser.add_argument("--name", default=DEPLOYMENT, help="deployment name (with --pool)")
    parser.add_argument("--targets", nargs="*", help="stages the deployment runs (with --pool; default all)")
    parser.add_argument("--no-schedule", action="store_true", help="with --pool: runs only when started "
                        "(by the UI, `python -m flows.fleet run`), no cron schedule")
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()
    try:
        load_config(root, args.params)
    except ConfigError as e:
        print(f"flows.deploy: {e}", file=sys.stderr)
        return 2
    if args.pool:
        if not os.environ.get("PREFECT_API_URL"):
            print("flows.deploy: --pool needs PREFECT_API_URL (the server the workers poll)", file=sys.stderr)
            return 2
        deployment_id = deploy_to_pool(
            root, args.params, args.pool, args.name, args.targets, scheduled=not args.no_schedule
        )
        print(f"deployment {pipeline.name}/{args.name} ({deployment_id}) in work pool {args.pool}")
        return 0

    server = None
    if not args.no_server:
        server = start_server(args.host, args.port)
        os.environ["PREFECT_API_URL"] = f"http://{args.host}:{args.port}/api"
    elif not os.environ.get("PREFECT_API_URL"):
        print(
            "flows.deploy: --no-server needs PREFECT_API_URL (e.g. http://127.0.0.1:4200/api)",
            file=sys.stderr,
        )
        return 2
    from prefect.settings import PREFECT_API_URL, temporary_settings

    api_url = os.environ["PREFECT_API_URL"]
    print(f"Prefect UI: {api_url.removesuffix('/api')}  (deployment {FULL_NAME}; Ctrl-C stops)", flush=True)
    try:
        with temporary_settings(updates={PREFECT_API_URL: api_url}):
            serve(root, args.params)
    except KeyboardInterrupt:
        pass
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
