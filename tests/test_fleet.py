"""Several machines on one host, the real services (marker `fleet`, part of the default run): PostgreSQL
(Debian's package), the Prefect server on it with its login, a DVC remote in a local folder, two checkouts
standing for two machines with one worker each, and a third checkout for the coordinator, all started with
the commands of docs/orchestration.md ("Several machines"; FLEET_RECIPE below is that recipe, and
tests/test_docs.py checks the doc lists these commands).

Four training stages are split across the two workers by `python -m flows.fleet run`. The machine running
the slow stage is SIGKILLed (its worker and everything below it) once that stage's checkpoint has reached
the remote; the coordinator sees the worker's heartbeats stop, marks the run Crashed and submits the share
again, and the other machine finishes it, resuming from the copied checkpoint, and restores what the dead
machine had pushed. Then the coordinator's `aggregate` trains nothing (no training command ran in its
checkout: every stage command appends a line to a log outside the checkouts), its `dvc status` is clean,
and an anonymous API call gets 401.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
import yaml

from _toy_dvc import ORCHESTRATION, dvc_status
from test_pipeline_deploy import free_port

pytestmark = pytest.mark.fleet

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
POOL = "fleet"
DEPLOYMENT = "fleet"
WITHIN = 240.0  # seconds for any one wait on the busy 2-core machine

# The recipe of docs/orchestration.md, as this test runs it (placeholders in <>; test_docs checks the doc).
FLEET_RECIPE = [
    "python -m flows.fleet postgres --data <dir> --port <db port>",
    "python -m flows.fleet server --port <port> --db-port <db port>",
    "python -m flows.fleet pool --name <pool>",
    "python -m flows.deploy --pool <pool> --name <deployment> --no-schedule",
    "python -m flows.fleet worker --pool <pool> --name <worker>",
    "python -m flows.fleet run --pool <pool> --deployment <deployment> --shares <n> --targets <stages>",
    "python -m flows.pipeline --targets aggregate",
    "python -m flows.fleet postgres --data <dir> --stop",
]

TRAIN = """\
import json, os, pathlib, sys, time
name, steps = sys.argv[1], int(sys.argv[2])
ckpt = pathlib.Path("ckpt") / name
ckpt.mkdir(parents=True, exist_ok=True)
last = ckpt / "last.json"
start = json.loads(last.read_text())["step"] if last.exists() else 0
with open(LOG, "a") as f:
    f.write(json.dumps({"stage": "train@" + name, "cwd": os.getcwd(), "resumed_from": start}) + "\\n")
for step in range(start + 1, steps + 1):
    time.sleep(1.0)
    last.with_name("last.tmp").write_text(json.dumps({"step": step}))
    os.replace(last.with_name("last.tmp"), last)
pathlib.Path("out").mkdir(exist_ok=True)
pathlib.Path("out", name).write_text(name + "\\n")
"""

AGGREGATE = """\
import json, os, pathlib
with open(LOG, "a") as f:
    f.write(json.dumps({"stage": "aggregate", "cwd": os.getcwd()}) + "\\n")
pathlib.Path("summary").mkdir(exist_ok=True)
pathlib.Path("summary/all").write_text("".join(p.read_text() for p in sorted(pathlib.Path("out").glob("t*"))))
"""

STEPS = {"t1": 5, "t2": 1, "t3": 1, "t4": 1}  # t1 is the stage cut off by the kill


def _git(args: list[str], cwd: Path) -> None:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True, env=env,
                   capture_output=True)


def _origin(root: Path, remote: Path, log: Path) -> Path:
    """The project every machine clones: four training stages with checkpoints, an aggregate, a default remote."""
    root.mkdir(parents=True)
    (root / "scripts").mkdir()
    (root / "scripts" / "train.py").write_text(f"LOG = {str(log)!r}\n" + TRAIN)
    (root / "scripts" / "aggregate.py").write_text(f"LOG = {str(log)!r}\n" + AGGREGATE)
    stages = {
        "train": {
            "foreach": {k: {"steps": v} for k, v in STEPS.items()},
            "do": {"cmd": "python scripts/train.py ${key} ${item.steps}", "deps": ["scripts/train.py"],
                   "outs": ["out/${key}"], "meta": {"checkpoints": "ckpt/${key}"}},
        },
        "aggregate": {"cmd": "python scripts/aggregate.py",
                      "deps": ["scripts/aggregate.py", *(f"out/{k}" for k in STEPS)], "outs": ["summary/all"]},
    }
    _git(["init", "-q"], root)
    subprocess.run([PY, "-m", "dvc", "init", "-q"], cwd=root, check=True)
    subprocess.run([PY, "-m", "dvc", "remote", "add", "-q", "-d", "fleet", str(remote)], cwd=root, check=True)
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))
    params = {"orchestration": {**ORCHESTRATION, "sync_remote": True, "retry_delay_seconds": 0.5}}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (root / ".gitignore").write_text("ckpt/\nresults/\n")
    _git(["add", "-A"], root)
    _git(["commit", "-qm", "init"], root)
    return root


def _descendants(pid: int) -> list[int]:
    """`pid` and every process below it (from /proc), children first."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        found.append(p)
        frontier.extend(children.get(p, []))
    return found[::-1]


def _kill_machine(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a worker and everything it started (flow runs start in sessions of their own)."""
    for pid in _descendants(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            for pid in _descendants(p.pid)[:-1]:  # what the worker started, then the worker
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=30)


def _wait(what: str, check, logs: list[Path], within: float = WITHIN):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    text = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs if p.exists())
    pytest.fail(f"{what}: not within {within:.0f} s\n{text}")


def _pg_missing() -> bool:
    from multitab.runtime.fleet_setup import FleetError, pg_bin

    try:
        pg_bin("initdb")
    except FleetError:
        return True
    return False


def test_two_machines_share_a_matrix_and_survive_a_killed_one(tmp_path: Path) -> None:
    if _pg_missing():
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed: `make test` installs Debian's package (make postgres, as root)")
        pytest.skip("PostgreSQL is not installed (`make postgres` installs Debian's package)")
    remote, log = tmp_path / "remote", tmp_path / "ran.log"
    origin = _origin(tmp_path / "origin", remote, log)
    machines = {}
    for name in ("a", "b", "coordinator"):
        subprocess.run(["git", "clone", "-q", str(origin), str(tmp_path / name)], check=True)
        machines[name] = tmp_path / name
    secrets = Path(tempfile.mkdtemp(prefix="multitab-fleet-"))  # outside any checkout; PostgreSQL's account reads it
    secrets.chmod(0o755)
    pg_data = secrets / "pg"
    db_port, port = free_port(), free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        "MULTITAB_PG_PASSWORD": "not-a-real-db-secret",
        "PREFECT_SERVER_API_AUTH_STRING": "fleet:not-a-real-secret",
        "PREFECT_API_AUTH_STRING": "fleet:not-a-real-secret",
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PREFECT_WORKER_HEARTBEAT_SECONDS": "2",
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
        "PATH": f"{Path(PY).parent}{os.pathsep}{os.environ['PATH']}",
    }
    env.pop("PREFECT_API_URL", None)
    client_env = {**env, "PREFECT_API_URL": api}
    fleet = [PY, "-m", "flows.fleet"]
    procs: list[subprocess.Popen[bytes]] = []
    logs = [tmp_path / f"{n}.log" for n in ("server", "worker-a", "worker-b", "coordinator")]

    def start(args: list[str], cwd: Path, logfile: Path, e: dict[str, str]) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(args, cwd=cwd, env=e, stdout=logfile.open("wb"), stderr=subprocess.STDOUT)  # noqa: S603
        procs.append(p)
        return p

    def run(args: list[str], cwd: Path, e: dict[str, str]) -> str:
        r = subprocess.run(args, cwd=cwd, env=e, capture_output=True, text=True)  # noqa: S603
        assert r.returncode == 0, f"{' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r.stdout

    pg_started = False
    t0 = time.monotonic()

    def phase(name: str) -> None:
        print(f"{time.monotonic() - t0:6.1f} s  {name}", flush=True)

    try:
        run([*fleet, "postgres", "--data", str(pg_data), "--port", str(db_port)], REPO, env)
        pg_started = True
        phase("postgres up")
        start([*fleet, "server", "--port", str(port), "--db-port", str(db_port)], REPO, logs[0], env)

        def healthy() -> bool:
            try:
                return httpx.get(f"{api}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        _wait("the Prefect server's health", healthy, logs)
        phase("server healthy")
        anonymous = httpx.post(f"{api}/flows/filter", json={}, timeout=30)
        assert anonymous.status_code == 401, anonymous.text
        run([*fleet, "pool", "--name", POOL], REPO, client_env)
        coordinator = machines["coordinator"]
        run([PY, "-m", "flows.deploy", "--pool", POOL, "--name", DEPLOYMENT, "--no-schedule"], coordinator,
            client_env)
        phase("pool and deployment")
        workers = {
            m: start([*fleet, "worker", "--pool", POOL, "--name", f"worker-{m}"], machines[m], logs[1 + i],
                     client_env)
            for i, m in enumerate(("a", "b"))
        }

        from prefect.client.orchestration import get_client
        from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

        settings = {PREFECT_API_URL: api, PREFECT_API_AUTH_STRING: env["PREFECT_API_AUTH_STRING"]}
        with temporary_settings(updates=settings), get_client(sync_client=True) as client:
            def online() -> bool:
                ws = client.read_workers_for_work_pool(POOL, limit=10, offset=0)
                return sum(w.status == "ONLINE" for w in ws) == 2

            _wait("both workers online", online, logs)
        phase("workers online")
        coord = start([*fleet, "run", "--pool", POOL, "--deployment", DEPLOYMENT, "--shares", "2",
                       "--targets", "train", "--timeout", str(WITHIN)], coordinator, logs[3], client_env)
        # the slow stage's checkpoint reaches the remote while it runs; then its machine dies
        copy = remote / "partial" / "train@t1" / "last.json"

        def checkpointed() -> bool:
            try:
                return json.loads(copy.read_text())["step"] >= 1
            except (OSError, ValueError):
                return False

        _wait("train@t1's checkpoint copy in the remote", checkpointed, logs)
        phase("checkpoint copied")
        victim = next(m for m in ("a", "b") if (machines[m] / "ckpt" / "t1").is_dir())
        survivor = "b" if victim == "a" else "a"
        _kill_machine(workers[victim])
        coord.wait(timeout=WITHIN)
        phase("coordinator done")
        text = logs[3].read_text()
        assert coord.returncode == 0, "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs)
        assert f"worker worker-{victim} stopped sending heartbeats" in text, text

        # the coordinator: restores every training stage, runs only the aggregate
        run([PY, "-m", "flows.pipeline", "--targets", "aggregate"], coordinator, client_env)
        phase("aggregate done")
        entries = [json.loads(line) for line in log.read_text().splitlines()]
        here = [e["stage"] for e in entries if Path(e["cwd"]) == coordinator]
        assert here == ["aggregate"], entries  # no training command ran on the coordinator
        t1 = [e for e in entries if e["stage"] == "train@t1"]
        assert Path(t1[-1]["cwd"]) == machines[survivor] and t1[-1]["resumed_from"] >= 1, entries
        assert {e["stage"] for e in entries} == {*(f"train@{k}" for k in STEPS), "aggregate"}
        summary = json.loads((coordinator / "results" / "pipeline_summary.json").read_text())
        assert sorted(summary["restored"]) == [f"train@{k}" for k in sorted(STEPS)], summary
        assert summary["ran"] == ["aggregate"], summary
        assert (coordinator / "summary" / "all").read_text() == "".join(f"{k}\n" for k in sorted(STEPS))
        assert dvc_status(coordinator) == {}
        assert not (remote / "partial" / "train@t1").exists()  # the copy goes once the results are pushed
        assert httpx.post(f"{api}/flows/filter", json={}, timeout=30).status_code == 401
    finally:
        _stop(procs)
        if pg_started:
            subprocess.run([*fleet, "postgres", "--data", str(pg_data), "--stop"], cwd=REPO, env=env,
                           capture_output=True, timeout=120)
        shutil.rmtree(secrets, ignore_errors=True)


def test_recipe_is_in_the_docs() -> None:
    """docs/orchestration.md gives the commands this test runs (the placeholders aside)."""
    doc = (REPO / "docs" / "orchestration.md").read_text()
    for command in FLEET_RECIPE:
        head = command.split(" <", 1)[0]
        assert head in doc, f"docs/orchestration.md does not give `{head} ...`"


def test_shares_secrets_and_lost_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import UTC, datetime, timedelta
    from types import SimpleNamespace

    from flows.fleet import FleetError, _lost_worker, secret, split

    assert split(["a", "b", "c", "d", "e"], 2) == [["a", "c", "e"], ["b", "d"]]
    assert split(["a"], 3) == [["a"]]  # no empty share
    monkeypatch.delenv("PREFECT_API_AUTH_STRING", raising=False)
    inside = REPO / "results" / "not-a-secret.txt"
    with pytest.raises(FleetError, match="must not lie in the checkout"):
        secret("PREFECT_API_AUTH_STRING", str(inside), "the login")
    (tmp_path / "login").write_text("u:p\n")
    assert secret("PREFECT_API_AUTH_STRING", str(tmp_path / "login"), "the login") == "u:p"
    monkeypatch.setenv("PREFECT_API_AUTH_STRING", "env:wins")
    assert secret("PREFECT_API_AUTH_STRING", str(tmp_path / "login"), "the login") == "env:wins"
    now = datetime.now(UTC)
    run = SimpleNamespace(labels={"prefect.worker.name": "w1"})
    beat = SimpleNamespace(heartbeat_interval_seconds=2)
    assert _lost_worker(run, {"w1": SimpleNamespace(**vars(beat), last_heartbeat_time=now - timedelta(seconds=5))},
                        now) is None  # two missed beats: not yet
    assert _lost_worker(run, {"w1": SimpleNamespace(**vars(beat), last_heartbeat_time=now - timedelta(seconds=7))},
                        now) == "w1"
    assert _lost_worker(SimpleNamespace(labels={}), {}, now) is None  # not taken by a worker yet
