"""The services under several machines' Prefect server (`python -m flows.fleet postgres|server`,
docs/orchestration.md, "Several machines"): a private PostgreSQL cluster holding the server's database, and
the server's environment (that database by its parts, the login). No Prefect here: the commands start the
services; flows.fleet gives them their secrets and runs the pool, the workers and the coordinator.

PostgreSQL is Debian's package (`apt-get install postgresql`: its programs are found in
/usr/lib/postgresql/<version>/bin or on PATH); `start_postgres` starts a private cluster listening on
127.0.0.1 only, with password logins over TCP (scram-sha-256). PostgreSQL refuses to run as root: as root,
the cluster is initialised and run as the `postgres` account the package creates, and its folder is given to it.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

PG_USER = "prefect"
PG_DB = "prefect"


class FleetError(RuntimeError):
    """A service could not be started or a setting is missing; the message says what to do."""


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
