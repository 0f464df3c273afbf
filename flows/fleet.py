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

PostgreSQL is Debian's package (`apt-get install postgresql`: its programs are found in
/usr/lib/postgresql/<version>/bin or on PATH); `postgres` starts a private cluster in `--data` listening on
127.0.0.1 only, with password logins over TCP (scram-sha-256). PostgreSQL refuses to run as root: as root,
the cluster is initialised and run as the `postgres` account the package creates, and `--data` is given to it.

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
import glob
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PG_USER = "prefect"
PG_DB = "prefect"
MISSED_BEATS = 3  # a worker silent for this many heartbeat intervals is taken for lost


class FleetError(RuntimeError):
    """A service could not be started or a setting is missing; the message says what to do."""


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


# -------------------------------------------------------------------------------------------- PostgreSQL


def pg_bin(program: str) -> str:
    """A PostgreSQL server program: Debian keeps them in /usr/lib/postgresql/<version>/bin, off PATH."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{program}"), key=lambda p: int(Path(p).parts[4]))
    path = found[-1] if found else shutil.which(program)
    if not path:
        raise FleetError(f"PostgreSQL's {program} not found: install Debian's package (`apt-get install postgresql`)")
    return path


def _as_server_account(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses root: run as the package's `postgres` account then."""
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


def _run(cmd: list[str], what: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, capture_output=True, text=True, **kwargs)  # noqa: S603
    if r.returncode != 0:
        raise FleetError(f"{what} failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-500:]}")
    return r


def start_postgres(data: Path, port: int, password: str) -> None:
    """Initialise (once) and start a PostgreSQL cluster in `data` on 127.0.0.1:`port`, with role and database
    `prefect` whose password is `password`; returns once it accepts connections."""
    data = data.resolve()
    fresh = not (data / "PG_VERSION").is_file()
    if fresh:
        data.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(data, "postgres", "postgres")
        data.chmod(0o700)
        # the socket lives in `data` (mode 0700: only the cluster's account reaches it); TCP needs the password
        _run(_as_server_account([pg_bin("initdb"), "-D", str(data), "-U", "postgres", "-E", "UTF8",
                                 "--auth-local=trust", "--auth-host=scram-sha-256"]), "initdb")
    opts = f"-p {port} -k {data} -c listen_addresses=127.0.0.1"
    _run(_as_server_account([pg_bin("pg_ctl"), "-D", str(data), "-l", str(data / "server.log"), "-o", opts,
                             "-w", "-t", "60", "start"]), f"pg_ctl start (log: {data / 'server.log'})")
    if fresh:
        quoted = password.replace("'", "''")
        sql = (f"CREATE ROLE {PG_USER} LOGIN PASSWORD '{quoted}';\n"
               f"CREATE DATABASE {PG_DB} OWNER {PG_USER};\n")
        _run(_as_server_account([pg_bin("psql"), "-h", str(data), "-p", str(port), "-U", "postgres",
                                 "-v", "ON_ERROR_STOP=1", "-q", "-d", "postgres"]), "creating the prefect role",
             input=sql)


def stop_postgres(data: Path) -> None:
    """Stop the cluster in `data` (fast shutdown: open connections are closed)."""
    _run(_as_server_account([pg_bin("pg_ctl"), "-D", str(data.resolve()), "-m", "fast", "-w", "stop"]),
         "pg_ctl stop")


# -------------------------------------------------------------------------------------------- Prefect


def server_env(db_host: str, db_port: int, db_password: str, auth: str) -> dict[str, str]:
    """The Prefect server's environment: PostgreSQL by its parts (no password on a command line) and the login."""
    env = {
        **os.environ,
        "PREFECT_SERVER_DATABASE_DRIVER": "postgresql+asyncpg",
        "PREFECT_SERVER_DATABASE_HOST": db_host,
        "PREFECT_SERVER_DATABASE_PORT": str(db_port),
        "PREFECT_SERVER_DATABASE_USER": PG_USER,
        "PREFECT_SERVER_DATABASE_NAME": PG_DB,
        "PREFECT_SERVER_DATABASE_PASSWORD": db_password,
        "PREFECT_SERVER_API_AUTH_STRING": auth,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    env.pop("PREFECT_SERVER_DATABASE_CONNECTION_URL", None)  # the parts above, not a stale URL
    env.pop("PREFECT_API_URL", None)  # the server must not talk to another server
    return env


def create_pool(name: str) -> None:
    """A process work pool with the process worker's template written at creation (no worker writes it)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists
    from prefect.workers.process import ProcessWorker

    with get_client(sync_client=True) as client:
        try:
            client.create_work_pool(
                WorkPoolCreate(name=name, type="process", base_job_template=ProcessWorker.get_default_base_job_template())
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
            from flows.orchestrate import WORKER_ROOT_ENV

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
