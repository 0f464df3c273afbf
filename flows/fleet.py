"""Several machines, started by the project: PostgreSQL for Prefect, the Prefect server with its login, the
work pool, one worker per machine, and the coordinator that splits the stale stages across the workers and
hands a lost machine's share to another (docs/orchestration.md, "Several machines").

    python -m flows.fleet postgres --data DIR --port 5432 [--stop]
    python -m flows.fleet server --port 4200 --db-port 5432 [--host 127.0.0.1]
    python -m flows.fleet pool --name gpu
    python -m flows.fleet worker --pool gpu --name gpu-1 [--root .] [--limit 1]
    python -m flows.fleet run --pool gpu --deployment fleet --shares 2 --targets 'train@real-*' [--root .]

Secrets come from the environment or from files outside the checkout, never from the repository:
PREFECT_SERVER_API_AUTH_STRING (the server's login, `user:password`) and PREFECT_API_AUTH_STRING (every
client's and worker's), or `--auth-file FILE` holding that string; the database password from
MULTITAB_PG_PASSWORD or `--db-password-file FILE`. A file inside the git checkout is refused.

PostgreSQL (Debian's package, a private cluster on 127.0.0.1) and the server's environment are set up by
multitab.runtime.fleet_setup; this module gives them their secrets and runs the pool, the workers and the coordinator.

`run` (the coordinator; PREFECT_API_URL set): pulls the DVC remote with its run cache, lists the stale stages
of `--targets`, splits them into `--shares` flow runs of deployment `--deployment` (registered with
`python -m flows.deploy --pool ...`), and waits. A run whose worker stops sending heartbeats (three missed
beats, PREFECT_WORKER_HEARTBEAT_SECONDS) is marked Crashed and its share submitted again; so is a run that
ends Crashed or Failed (at most `--resubmits` times each). Any worker of the pool takes the new run: it pulls
the remote (what the lost machine finished and pushed is restored, not re-run) and resumes the stage that
was cut off from its last checkpoint copy (flows/remote.py). Exits 0 when every share completed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from multitab.runtime.fleet_setup import PG_USER, FleetError, server_env, start_postgres, stop_postgres

REPO = Path(__file__).resolve().parent.parent
MISSED_BEATS = 3  # a worker silent for this many heartbeat intervals is taken for lost


# -------------------------------------------------------------------------------------------- secrets


def secret(env_var: str, file: str | None, what: str) -> str:
    """The secret in `env_var`, else the first line of `file` (which must lie outside the checkout)."""
    value = os.environ.get(env_var)
    if value:
        return value
    if not file:
        raise FleetError(f"{what}: set {env_var} or give a file outside the checkout")
    path = Path(file).resolve()
    if REPO in path.parents:
        raise FleetError(f"{path}: {what} must not lie in the checkout ({REPO}); keep it outside git")
    try:
        text = path.read_text().strip()
    except OSError as e:
        raise FleetError(f"{path}: cannot read {what}: {e.strerror or e}") from e
    if not text:
        raise FleetError(f"{path}: empty; it should hold {what}")
    return text.splitlines()[0]


# -------------------------------------------------------------------------------------------- Prefect


def create_pool(name: str) -> None:
    """A process work pool with the process worker's template written at creation (no worker writes it)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists
    from prefect.workers.process import ProcessWorker

    with get_client(sync_client=True) as client:
        try:
            client.create_work_pool(
                WorkPoolCreate(
                    name=name, type="process", base_job_template=ProcessWorker.get_default_base_job_template()
                )
            )
            print(f"work pool {name} created")
        except ObjectAlreadyExists:
            print(f"work pool {name} exists")


def stale_targets(root: Path, targets: Sequence[str]) -> list[str]:
    """The stages of `targets` (not their upstream) that DVC would run now, in graph order."""
    from flows.dag import read_stage_graph, select

    plan = select(read_stage_graph(root, changed=True), targets)
    return [s for s in plan.to_run() if any(_matches(s, t) for t in targets)]


def _matches(stage: str, target: str) -> bool:
    import fnmatch

    return stage == target or stage.split("@", 1)[0] == target or fnmatch.fnmatchcase(stage, target)


def split(stages: Sequence[str], n: int) -> list[list[str]]:
    """`n` shares of about equal size (round robin in graph order); empty shares are left out."""
    return [share for share in (list(stages[i::n]) for i in range(n)) if share]


def _lost_worker(run: Any, workers: dict[str, Any], now: datetime) -> str | None:
    """The name of the worker executing `run` when it has missed MISSED_BEATS heartbeats, else None."""
    name = (run.labels or {}).get("prefect.worker.name")
    worker = workers.get(name) if name else None
    if worker is None or worker.last_heartbeat_time is None:
        return None
    interval = worker.heartbeat_interval_seconds or 30
    silent = (now - worker.last_heartbeat_time).total_seconds()
    return name if silent > MISSED_BEATS * interval else None


def coordinate(
    root: Path, pool: str, deployment: str, shares: int, targets: Sequence[str], resubmits: int, timeout: float
) -> int:
    """Run the stale stages of `targets` as `shares` flow runs of the pool's workers; see the module doc."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.states import Crashed

    from flows import remote
    from flows.dag import load_config
    from flows.deploy import FULL_NAME

    cfg = load_config(root)
    if not cfg.sync_remote:
        raise FleetError(f"{root / 'params.yaml'}: orchestration.sync_remote is false; the machines' results "
                         "could not reach this one (set it to true and configure a default DVC remote)")
    t0 = time.monotonic()
    remote.pull(root)
    print(f"pulled the DVC remote with its run cache ({time.monotonic() - t0:.1f} s)", flush=True)
    stale = stale_targets(root, targets)
    if not stale:
        print(f"every stage of {list(targets)} is up to date here or in the remote's run cache")
        return 0
    parts = split(stale, shares)
    name = f"{FULL_NAME.split('/')[0]}/{deployment}"
    print(f"{len(stale)} stale stage(s) in {len(parts)} share(s) of deployment {name}", flush=True)

    def submit(share: list[str]) -> Any:
        return run_deployment(name, parameters={"root": str(root), "targets": share}, timeout=0, as_subflow=False)

    runs = {i: submit(share) for i, share in enumerate(parts)}
    tries = dict.fromkeys(runs, 0)
    done: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while len(done) < len(parts):
            if time.monotonic() > deadline:
                print(f"flows.fleet: shares not done after {timeout:.0f} s: "
                      f"{[parts[i] for i in runs if i not in done]}", file=sys.stderr)
                return 1
            workers = {w.name: w for w in client.read_workers_for_work_pool(pool, limit=200, offset=0)}
            now = datetime.now(UTC)
            for i, run in list(runs.items()):
                if i in done:
                    continue
                run = client.read_flow_run(run.id)
                state = run.state
                why = None
                if state is not None and state.is_completed():
                    done[i] = (run.labels or {}).get("prefect.worker.name", "?")
                    print(f"share {i} {parts[i]}: completed by worker {done[i]}", flush=True)
                    continue
                if state is not None and state.is_final():
                    why = f"ended {state.name}: {state.message or ''}".strip()
                elif (lost := _lost_worker(run, workers, now)) is not None:
                    why = f"worker {lost} stopped sending heartbeats"
                    client.set_flow_run_state(run.id, Crashed(message=why), force=True)
                if why is None:
                    continue
                if tries[i] >= resubmits:
                    print(f"flows.fleet: share {i} {parts[i]} {why}; resubmitted {tries[i]} time(s) already, "
                          "giving up", file=sys.stderr)
                    return 1
                tries[i] += 1
                print(f"share {i} {parts[i]}: {why}; submitted again (any worker of pool {pool} takes it)",
                      flush=True)
                runs[i] = submit(parts[i])
            time.sleep(1.0)
    print(f"all {len(parts)} share(s) completed in {time.monotonic() - t0:.1f} s", flush=True)
    return 0


# -------------------------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.fleet", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("postgres", help="start (or --stop) a PostgreSQL cluster for the Prefect server")
    p.add_argument("--data", required=True, type=Path, help="the cluster's folder (created on first start)")
    p.add_argument("--port", type=int, default=5432)
    p.add_argument("--db-password-file", help="file (outside git) with the prefect role's password")
    p.add_argument("--stop", action="store_true")
    s = sub.add_parser("server", help="the Prefect server on PostgreSQL, with its login (runs in the foreground)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=4200)
    s.add_argument("--db-host", default="127.0.0.1")
    s.add_argument("--db-port", type=int, default=5432)
    s.add_argument("--db-password-file", help="file (outside git) with the prefect role's password")
    s.add_argument("--auth-file", help="file (outside git) with the login, user:password")
    o = sub.add_parser("pool", help="create the process work pool (PREFECT_API_URL)")
    o.add_argument("--name", required=True)
    o.add_argument("--auth-file", help="file (outside git) with the login, user:password")
    w = sub.add_parser("worker", help="a worker of the pool for this machine's checkout (foreground)")
    w.add_argument("--pool", required=True)
    w.add_argument("--name", required=True)
    w.add_argument("--root", default=".", help="this machine's checkout (default: the current folder)")
    w.add_argument("--limit", type=int, default=1, help="flow runs at once on this machine")
    w.add_argument("--auth-file", help="file (outside git) with the login, user:password")
    r = sub.add_parser("run", help="split the stale stages across the pool's workers and wait (coordinator)")
    r.add_argument("--pool", required=True)
    r.add_argument("--deployment", required=True, help="deployment name (python -m flows.deploy --pool --name)")
    r.add_argument("--shares", type=int, required=True, help="flow runs to split the stages into")
    r.add_argument("--targets", nargs="+", required=True)
    r.add_argument("--root", default=".")
    r.add_argument("--resubmits", type=int, default=2, help="new runs of a share whose run was lost or failed")
    r.add_argument("--timeout", type=float, default=24 * 3600.0, help="seconds to wait for all shares")
    r.add_argument("--auth-file", help="file (outside git) with the login, user:password")
    a = parser.parse_args(argv)
    try:
        if a.command == "postgres":
            if a.stop:
                stop_postgres(a.data)
                print(f"PostgreSQL in {a.data} stopped")
                return 0
            start_postgres(a.data, a.port, secret("MULTITAB_PG_PASSWORD", a.db_password_file, "the database password"))
            print(f"PostgreSQL on 127.0.0.1:{a.port} (data {a.data}, role and database {PG_USER})", flush=True)
            return 0
        if a.command == "server":
            env = server_env(a.db_host, a.db_port,
                             secret("MULTITAB_PG_PASSWORD", a.db_password_file, "the database password"),
                             secret("PREFECT_SERVER_API_AUTH_STRING", a.auth_file, "the server's login"))
            shown = "127.0.0.1" if a.host in ("0.0.0.0", "::") else a.host
            env.setdefault("PREFECT_UI_API_URL", f"http://{shown}:{a.port}/api")
            os.execve(sys.executable, [sys.executable, "-m", "prefect", "server", "start", "--host", a.host,
                                       "--port", str(a.port)], env)
        os.environ["PREFECT_API_AUTH_STRING"] = secret("PREFECT_API_AUTH_STRING", a.auth_file, "the server's login")
        if not os.environ.get("PREFECT_API_URL"):
            raise FleetError("PREFECT_API_URL is not set (http://<server>:<port>/api)")
        if a.command == "pool":
            create_pool(a.name)
            return 0
        if a.command == "worker":
            from flows.provenance import WORKER_ROOT_ENV

            env = {**os.environ, WORKER_ROOT_ENV: str(Path(a.root).resolve()),
                   "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
            os.execve(sys.executable, [sys.executable, "-m", "prefect", "worker", "start", "--pool", a.pool,
                                       "--name", a.name, "--limit", str(a.limit)], env)
        return coordinate(Path(a.root).resolve(), a.pool, a.deployment, a.shares, a.targets, a.resubmits, a.timeout)
    except FleetError as e:
        print(f"flows.fleet: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # flows.remote.RemoteError: DVC's own lines
        if type(e).__name__ != "RemoteError":
            raise
        print(f"flows.fleet: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
