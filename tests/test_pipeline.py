"""flows.pipeline on toy DVC projects (git init + dvc init in a tmp folder, one-line stages).

One Prefect test server for the module (prefect_test_harness); every test builds its own project so the
real dvc.yaml does not matter here.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from _slow_import import slow_import_env
from _toy_dvc import PY, dvc_status, make_project, write_stage
from flows.pipeline import PipelineFailed, StagePlan, pipeline, read_stage_graph, select
from multitab.runtime.exit_codes import BAD_INPUT

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def prefect_server():
    try:
        import prefect.server.api.server  # noqa: F401
    except TypeError as e:  # fastapi too new for Prefect 3.8.8's server
        pytest.fail(f"Prefect's server does not import ({e}): install the pins of pyproject.toml (fastapi)")
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=60):
        yield


def run(root: Path, **kwargs) -> dict:
    try:
        pipeline(root=str(root), **kwargs)
    except PipelineFailed:
        pass
    return json.loads((root / "results" / "pipeline_summary.json").read_text())


def run_recorded(root: Path, **kwargs) -> tuple[dict, dict[str, str], dict[str, object]]:
    """Run the flow; return the summary, each task run's final state name by stage, and the flow run's
    artifacts by key (as the UI shows them)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    state = pipeline(root=str(root), return_state=True, **kwargs)
    flow_run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        from prefect.client.schemas.sorting import TaskRunSort

        tasks = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
            sort=TaskRunSort.EXPECTED_START_TIME_ASC,
            limit=200,
        )
        # the raw endpoint: Prefect 3.8.8's sync read_artifacts sends nulls its server rejects (422)
        artifacts = client.request(
            "POST",
            "/artifacts/filter",
            json={"artifacts": {"flow_run_id": {"any_": [str(flow_run_id)]}}, "limit": 200, "offset": 0},
        ).json()
    summary = json.loads((root / "results" / "pipeline_summary.json").read_text())
    names = {t.name: t.state.name for t in tasks if t.state is not None}
    return summary, names, {a["key"]: a["data"] for a in artifacts if a["key"]}


def test_stage_graph_expands_foreach_and_selects_upstream(tmp_path):
    root = make_project(
        tmp_path / "p",
        {
            "a": write_stage("a"),
            "b": {
                "foreach": ["x", "y"],
                "do": {"cmd": "echo ${item} > out/b_${item}", "deps": ["out/a"], "outs": ["out/b_${item}"]},
            },
            "c": write_stage("c", ["out/b_x"]),
        },
    )
    plan = read_stage_graph(root)
    assert set(plan.order) == {"a", "b@x", "b@y", "c"}
    assert plan.upstream["b@x"] == ("a",) and plan.upstream["c"] == ("b@x",)
    assert plan.order.index("a") < plan.order.index("b@x") < plan.order.index("c")
    assert select(plan, ["c"]).order == ("a", "b@x", "c")
    assert set(select(plan, ["b"]).order) == {"a", "b@x", "b@y"}
    assert plan.descendants("a") == {"b@x", "b@y", "c"}
    with pytest.raises(ValueError, match="matches no stage"):
        select(plan, ["nope"])
    # a typo gets the closest names, not the list of every stage
    with pytest.raises(ValueError, match=r"did you mean b@x") as typo:
        select(plan, ["b@xx"])
    assert len(str(typo.value)) < 200
    assert isinstance(plan, StagePlan)


def test_flaky_stage_is_retried_and_flow_completes(tmp_path):
    # Fails on its first two attempts (a counter outside DVC's outputs), then succeeds.
    flaky = write_stage(
        "flaky",
        ["out/a"],
        extra="""
        c = pathlib.Path('.attempts'); n = int(c.read_text()) + 1 if c.exists() else 1; c.write_text(str(n))
        assert n >= 3, f'injected failure {n}'""",
    )
    root = make_project(
        tmp_path / "p", {"a": write_stage("a"), "flaky": flaky, "z": write_stage("z", ["out/flaky"])}
    )
    summary = run(root, retries=2)
    assert summary["failed"] == [] and summary["not_run"] == []
    assert summary["retried"] == ["flaky"]
    assert summary["stages"]["flaky"]["attempts"] == 3
    assert len(summary["stages"]["flaky"]["failed_attempts"]) == 2
    assert sorted(summary["ran"]) == ["a", "flaky", "z"]
    assert (root / "out" / "z").read_text() == "a\nflaky\nz\n"
    assert dvc_status(root) == {}

    # A second run finds everything up to date and runs nothing.
    again = run(root)
    assert sorted(again["up_to_date"]) == ["a", "flaky", "z"] and again["ran"] == []


def test_failing_stage_stops_only_its_descendants(tmp_path):
    broken = write_stage("broken", ["out/a"], extra="raise SystemExit('broken on purpose')")
    root = make_project(
        tmp_path / "p",
        {
            "a": write_stage("a"),
            "broken": broken,
            "child": write_stage("child", ["out/broken"]),
            "grandchild": write_stage("grandchild", ["out/child"]),
            "side": write_stage("side", ["out/a"]),
            "side2": write_stage("side2", ["out/side"]),
        },
    )
    summary = run(root, retries=1)
    assert summary["failed"] == ["broken"]
    assert sorted(summary["not_run"]) == ["child", "grandchild"]
    assert sorted(summary["ran"]) == ["a", "side", "side2"]
    assert summary["stages"]["broken"]["attempts"] == 2
    assert "broken on purpose" in summary["stages"]["broken"]["error"]
    assert (
        "broken" in summary["stages"]["grandchild"]["error"]
        or "child" in summary["stages"]["grandchild"]["error"]
    )
    # dvc.lock is consistent: DVC reports exactly the stages that did not complete.
    assert set(dvc_status(root)) == {"broken", "child", "grandchild"}
    assert not (root / "out" / "child").exists()

    # The CLI exits non-zero and prints the failure (against the harness's server: no second start-up).
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PREFECT_API_URL": PREFECT_API_URL.value()}
    proc = subprocess.run(
        [PY, "-m", "flows.pipeline", "--root", str(root), "--retries", "0", "--targets", "grandchild"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAILED (1): broken" in proc.stdout + proc.stderr


def test_eight_independent_stages_run_in_parallel_without_lock_errors(tmp_path):
    stages = {
        f"s{i}": write_stage(
            f"s{i}",
            extra=f"""
            import time; t0 = time.time(); time.sleep(2)
            pathlib.Path('.times').mkdir(exist_ok=True)
            pathlib.Path('.times/s{i}').write_text(f'{{t0}} {{time.time()}}')""",
        )
        for i in range(8)
    }
    root = make_project(tmp_path / "p", stages)
    summary = run(root, workers=8, retries=0)
    assert summary["failed"] == [] and sorted(summary["ran"]) == sorted(stages)
    spans = [tuple(map(float, p.read_text().split())) for p in (root / ".times").iterdir()]
    # Overlap: the largest number of stage commands running at one moment.
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most >= 4, f"stages did not overlap: {spans}"
    assert dvc_status(root) == {}
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    assert sorted(lock["stages"]) == sorted(stages)


def test_gpu_stages_take_turns_on_the_visible_devices(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    record = """
        import os, time; t0 = time.time(); time.sleep(0.5)
        pathlib.Path('.gpu').mkdir(exist_ok=True)
        record = pathlib.Path('.gpu/' + os.environ['DVC_STAGE'])
        record.write_text(f"{os.environ.get('CUDA_VISIBLE_DEVICES')} {t0} {time.time()}")"""
    stages = {
        "train": {
            "foreach": ["x", "y", "z"],
            "do": {
                "cmd": "python scripts/train.py",
                "deps": ["scripts/train.py"],
                "outs": ["out/train_${item}"],
            },
        },
        "other": write_stage("other", extra=record),
    }
    train = write_stage("train", extra=record)
    stages["train"]["_script"] = train["_script"].replace(
        "'out/train'", "'out/' + os.environ['DVC_STAGE'].replace('@', '_')"
    )
    root = make_project(tmp_path / "p", stages)
    # The slots are Prefect's global concurrency limit of this host's GPU 0, shared with every other flow
    # run and worker here: while something else holds its one slot, no train stage starts.
    import threading

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.concurrency.sync import concurrency

    from flows.gpu import gpu_limit_name

    with get_client(sync_client=True) as client:
        try:
            client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=gpu_limit_name("0"), limit=1))
        except Exception:  # noqa: BLE001 - created by an earlier test of this module
            pass
    held, released = threading.Event(), []

    def other_run() -> None:
        with concurrency(gpu_limit_name("0"), occupy=1, strict=True):
            held.set()
            deadline = time.monotonic() + 120  # until the CPU stage has run: it must not wait for the GPU
            while not (root / ".gpu" / "other").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            released.append(time.time())

    holder = threading.Thread(target=other_run)
    holder.start()
    assert held.wait(60)
    summary = run(root, workers=4, retries=0)
    holder.join()
    assert summary["failed"] == [] and len(summary["ran"]) == 4
    seen = {p.name: p.read_text().split() for p in (root / ".gpu").iterdir()}
    assert {seen[f"train@{i}"][0] for i in "xyz"} == {"0"} and seen["other"][0] == "None"
    spans = sorted((float(v[1]), float(v[2])) for k, v in seen.items() if k.startswith("train"))
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans  # one at a time
    assert spans[0][0] >= released[0], "a train stage started while another run held the GPU"
    assert float(seen["other"][1]) < released[0], "a CPU stage waited for the GPU"


def test_the_client_waits_longer_for_an_answer_than_the_server_waits_for_its_database():
    """Prefect's client retries a request that timed out. When its timeout equals the server's SQLite busy
    timeout, a GPU slot granted after a minute's wait for the database is granted just as the client gives up,
    and its retry waits for that lost grant forever (test_gpu_stages_take_turns_on_the_visible_devices hung so,
    the limit's slot taken 60.2 s after the last release, no acquisition event, on an ephemeral server that
    never reclaims leases). flows/ (and tests/conftest.py) set the client's timeout above every busy timeout the
    server's database configuration sets."""
    import inspect
    import re

    import prefect.server.database.configurations as configurations
    from prefect.settings import PREFECT_API_REQUEST_TIMEOUT

    import flows

    busy = [int(ms) / 1000 for ms in re.findall(r"PRAGMA busy_timeout = (\d+)", inspect.getsource(configurations))]
    assert busy, "Prefect's SQLite configuration no longer sets a busy timeout: check this test's reasoning"
    ours = float(flows._OFFLINE_DEFAULTS["PREFECT_API_REQUEST_TIMEOUT"])
    assert ours > max(busy) and PREFECT_API_REQUEST_TIMEOUT.value() == ours


def test_bad_input_fails_at_once_and_a_killed_stage_is_retried(tmp_path):
    # `bad` exits with BAD_INPUT (a failed validation, a schema error): a retry cannot help.
    bad = write_stage("bad", extra=f"""
        import sys
        print('[bad] error: column x has 3 values out of range', file=sys.stderr); sys.exit({BAD_INPUT})""")
    # `killed` is killed (SIGKILL, as the OOM killer does) on its first attempt only.
    killed = write_stage("killed", extra="""
        import os, signal
        c = pathlib.Path('.kills'); n = int(c.read_text()) + 1 if c.exists() else 1; c.write_text(str(n))
        if n == 1: os.kill(os.getpid(), signal.SIGKILL)""")
    root = make_project(tmp_path / "p", {"bad": bad, "after_bad": write_stage("after_bad", ["out/bad"]),
                                         "killed": killed})
    summary, states, artifacts = run_recorded(root, retries=2, retry_delay=0)
    assert summary["failed"] == ["bad"] and summary["not_run"] == ["after_bad"]
    bad_run = summary["stages"]["bad"]
    assert bad_run["attempts"] == 1 and bad_run["exit_code"] == BAD_INPUT
    # short, and names the stage, the stage's exit code (not dvc's 255) and the cause
    assert bad_run["error"] == (
        f"stage bad exited with code {BAD_INPUT} (bad input, not retried): column x has 3 values out of range"
    )
    assert summary["stages"]["killed"]["status"] == "ran" and summary["stages"]["killed"]["attempts"] == 2
    assert summary["retried"] == ["killed"]
    assert states == {"bad": "Failed", "after_bad": "Not run", "killed": "Ran (attempt 2)"}
    table = artifacts["pipeline-summary"]
    assert "| bad | **FAILED** |" in table and "| killed | ran ×2 |" in table and "| after_bad | not run |" in table
    assert "- after_bad (not run): upstream stage bad did not complete" in table


def test_a_stage_stopped_by_ctrl_c_is_called_interrupted_and_not_retried(tmp_path, monkeypatch):
    """A stage that exits 130 after Ctrl-C (stages/_common.run's line) was stopped by someone: attempted
    once, labelled interrupted (not bad input, no attempt count), and the stages beside it still run."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the toy stage uses the stages' own `run`
    stopped = write_stage("stopped", extra="""
        from stages._common import run
        def body():
            raise KeyboardInterrupt
        raise SystemExit(run("stopped", body))""")
    root = make_project(tmp_path / "p", {"stopped": stopped, "ok": write_stage("ok")})
    summary = run(root, retries=2, retry_delay=0)
    assert summary["failed"] == ["stopped"] and summary["ran"] == ["ok"] and summary["retried"] == []
    stage = summary["stages"]["stopped"]
    assert stage["attempts"] == 1 and stage["exit_code"] == 130
    assert stage["error"] == ("stage stopped exited with code 130 (interrupted, not retried): [stopped] interrupted "
                              "(Ctrl-C); run again to continue")


@pytest.mark.parametrize("copy_named", [True, False])
def test_a_full_disk_under_dvc_names_the_cache_and_what_to_do(tmp_path, monkeypatch, copy_named):
    """DVC's own writes on a full disk (copying a stage's outputs into its cache) end with `[Errno 28] No space
    left on device` and no path. The stage's line names DVC's cache (`dvc cache dir`), what DVC was copying
    when its message says, the space left, and what to do. DVC's lines as DVC 3.67 printed them with its cache
    on a full 256 kB tmpfs (a small file: shutil names the copy; a file over 1 GB goes through copyfileobj,
    whose error names nothing)."""
    from flows import stage_task

    root = make_project(tmp_path / "p", {"a": write_stage("a")})
    cache = root / ".dvc" / "cache"
    transfer = (f"ERROR: failed to transfer 'ec78dbd963d2fc01e51176ed4dec299e' - [Errno 28] No space left on "
                f"device: '{root}/out/a' -> '{cache}/files/md5/ec/.li1VKvKvysB-QAbwJakgEQ.tmp'")
    lines = ["Running stage 'a':", "> python scripts/a.py", *([transfer] if copy_named else []),
             "ERROR: failed to reproduce 'a': [Errno 28] No space left on device"]
    monkeypatch.setattr(stage_task, "stream_command", lambda *a, **k: (255, lines, 0))
    summary = run(root, retries=0)
    error = summary["stages"]["a"]["error"]
    assert error.startswith("stage a exited with code 255 (attempt 1): no space left on device for DVC "), error
    what = f"copying {root}/out/a to {cache}/files/md5/ec" if copy_named else "saving the stage's outputs"
    assert what in error and f"DVC's cache {cache}: " in error and " MB free" in error, error
    assert "`dvc cache dir <folder>`" in error and "Errno" not in error, error


def test_the_run_page_names_the_targets_commit_protocol_and_changed_params(tmp_path):
    """The flow run is named after its targets and commit, tagged with the protocol, and its
    `run-provenance` artifact holds the commit, params.yaml's sha256 and the keys edited since the commit;
    the summary artifact leads with the counts and has relative paths only."""
    import hashlib

    from prefect.client.orchestration import get_client

    root = make_project(tmp_path / "p", {"a": write_stage("a"), "b": write_stage("b", ["out/a"])})
    params = yaml.safe_load((root / "params.yaml").read_text())
    (root / "params.yaml").write_text(yaml.safe_dump({"protocol": "authors_code", **params}, sort_keys=False))
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "add", "-A"], cwd=root, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "toy"], cwd=root, check=True, env=env)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    params["orchestration"]["retries"] = 1  # edited after the commit
    (root / "params.yaml").write_text(yaml.safe_dump({"protocol": "authors_code", **params}, sort_keys=False))

    state = pipeline(root=str(root), targets=["b"], return_state=True)
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(state.state_details.flow_run_id)
        artifacts = client.request("POST", "/artifacts/filter", json={
            "artifacts": {"flow_run_id": {"any_": [str(run.id)]}}, "limit": 50, "offset": 0}).json()
    assert run.name == f"b @ {commit[:8]} + edited params"
    assert "protocol:authors_code" in run.tags
    by_key = {a["key"]: a["data"] for a in artifacts if a["key"]}
    prov = by_key["run-provenance"]
    digest = hashlib.sha256((root / "params.yaml").read_bytes()).hexdigest()
    assert f"`{commit}`" in prov and f"`{digest}`" in prov and "`orchestration.retries`" in prov
    summary = by_key["pipeline-summary"]
    assert summary.index("2 ran") < summary.index("## Stages") and str(tmp_path) not in summary


def test_the_first_log_line_names_the_run_and_its_stages_know_the_name(tmp_path):
    """The flow run is named before it starts, so Prefect's first log line ("Beginning flow run ...") names
    it after its targets and commit, not a random name; the stages' `dvc repro` sees the name
    (multitab.runtime.provenance.FLOW_RUN_ENV), which the entry page quotes."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort
    from prefect.logging.handlers import APILogWorker

    script = "import os, pathlib; pathlib.Path('out').mkdir(exist_ok=True); " \
             "pathlib.Path('out/name').write_text(os.environ.get('MULTITAB_FLOW_RUN', 'unset'))"
    root = make_project(tmp_path / "p", {"a": {"cmd": f'python -c "{script}"', "outs": ["out/name"]}})
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "add", "-A"], cwd=root, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "toy"], cwd=root, check=True, env=env)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()

    state = pipeline(root=str(root), return_state=True)
    # Prefect sends log records to the API in the background (APILogWorker), so the flow's return does not mean
    # the server holds them: drain the worker, then read until the line is there (CI once read too early).
    APILogWorker.drain_all(timeout=30)
    deadline, first = time.monotonic() + 30, None
    with get_client(sync_client=True) as client:
        while first is None and time.monotonic() < deadline:
            run_filter = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[state.state_details.flow_run_id]))
            logs = client.read_logs(log_filter=run_filter, limit=200, offset=0, sort=LogSort.TIMESTAMP_ASC)
            first = next((log.message for log in logs if log.message.startswith("Beginning flow run")), None)
            if first is None:
                time.sleep(0.2)
    assert first == f"Beginning flow run 'all stages @ {commit[:8]}' for flow 'multitab-pipeline'"
    assert (root / "out" / "name").read_text() == f"all stages @ {commit[:8]}"


def test_only_stale_stages_get_a_task_and_states_say_what_dvc_did(tmp_path):
    stages = {
        "a": write_stage("a"),
        "b": write_stage("b", ["out/a"]),
        "c": write_stage("c"),
        "d": write_stage("d", ["out/c"]),
    }
    root = make_project(tmp_path / "p", stages)
    first = run(root, retries=0)
    assert sorted(first["ran"]) == ["a", "b", "c", "d"] and first["subprocesses"] == 4
    # nothing stale: the CLI answers from `dvc status` alone, without a flow run or a subprocess per stage
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PREFECT_API_URL": "http://127.0.0.1:9/api"}
    proc = subprocess.run([PY, "-m", "flows.pipeline", "--root", str(root)], capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 0 and "all 4 stages up to date" in proc.stdout, proc.stdout + proc.stderr

    # a change to c's script: only c's branch is submitted; d's input came out the same, so DVC skips it
    script = root / "scripts" / "c.py"
    script.write_text(script.read_text() + "\n# a comment\n")
    summary, states, artifacts = run_recorded(root, retries=0)
    assert sorted(summary["up_to_date"]) == ["a", "b", "d"] and summary["ran"] == ["c"]
    assert summary["subprocesses"] == 2
    assert states == {"c": "Ran", "d": "Up to date"}  # a and b: no task at all
    assert "| a | up to date | 0.0 |  |" in artifacts["pipeline-summary"]

    # c's old output again: DVC's run cache restores it instead of running the command; what a run of c killed
    # with SIGKILL left beside its output (its temporary, scratch beside that) goes too, though c's script,
    # which removes it when it runs, does not run; d's stays for d's next run
    script.write_text(script.read_text().replace("\n# a comment\n", ""))
    debris = [root / "out" / ".c.k1ll3d.tmp", root / "out" / "..c.k1ll3d.tmp.columns.x.tmp", root / "out" / ".d.x.tmp"]
    for path in debris:
        path.mkdir()
        (path / "part").write_bytes(b"half")
    summary, states, _ = run_recorded(root, retries=0)
    assert summary["restored"] == ["c"] and states["c"] == "Restored"
    assert [path.exists() for path in debris] == [False, False, True]


def test_failed_validation_publishes_a_table_of_its_failed_expectations(tmp_path):
    # A stand-in for validate_raw@toy: writes the record multitab.validation.report_page describes for a failed split
    # and exits as stages/validate_raw.py does.
    record = {
        "stage": "validate_raw", "dataset": "toy", "split": "val", "success": False, "rows": 10,
        "expectations": 4, "failures": ["..."], "page": None,
        "failed": [{"column": "age", "expectation": "expect_column_values_to_be_between", "check": "range",
                    "observed": "3 of 10 rows unexpected"}],
    }
    stage = write_stage("validate_raw", extra=f"""
        import json, sys
        out = pathlib.Path('reports/validation/results'); out.mkdir(parents=True, exist_ok=True)
        (out / 'validate_raw-toy-val.json').write_text(json.dumps({record!r}))
        print('[validate_raw@toy] error: validation failed: [val] column age', file=sys.stderr)
        sys.exit({BAD_INPUT})""")
    root = make_project(tmp_path / "p", {"validate_raw": {"foreach": ["toy"], "do": {
        "cmd": stage["cmd"], "deps": stage["deps"], "outs": ["out/validate_raw"]}, "_script": stage["_script"]}})
    summary, states, artifacts = run_recorded(root, retries=2)
    assert summary["failed"] == ["validate_raw@toy"] and summary["stages"]["validate_raw@toy"]["attempts"] == 1
    assert "validation failed: [val] column age" in summary["stages"]["validate_raw@toy"]["error"]
    table = json.loads(artifacts["validation-failures-validate-raw-toy"])
    assert table == [{"dataset": "toy", "split": "val", "column": "age",
                      "expectation": "expect_column_values_to_be_between", "check": "range",
                      "observed": "3 of 10 rows unexpected"}]


def test_summary_artifact_quotes_the_headline_results_when_aggregate_ran(tmp_path):
    from flows.summary import summary_markdown

    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "metrics.json").write_text(json.dumps({
        "standin": {"higgs": True, "acs_income": False},
        "delta_m": {"higgs": {"MMoE": 1.234, "PLE": "missing"}, "acs_income": {"MMoE": -0.5, "PLE": 2.0}},
        "bench_verdict": {"claim": "holds"},
    }))
    stage = {"attempts": 1, "seconds": 3.0, "error": None, "failed_attempts": [], "lock_waits": 0, "exit_code": None}
    summary = {"ran": ["aggregate"], "up_to_date": [], "restored": [], "retried": [], "failed": [], "not_run": [],
               "subprocesses": 1, "wall_seconds": 3.0, "stages": {"aggregate": {**stage, "status": "ran"}}}
    (tmp_path / "results" / "report.md").write_text(
        "# MultiTab\n\n> **STAND-IN DATA**: inputs higgs come from generated stand-in data.\n\n"
        "> **REDUCED TRAINING**: run group real, real data (higgs): at most 2 epochs on 2,048 training rows per "
        "run, 1 seed.\n\n## What ran\n\n> **NOT CONVERGED**: a warning of a later section\n")
    text = summary_markdown(tmp_path, summary)
    assert "| aggregate | ran | 3.0 |  |" in text
    # a row per model, a column per dataset (fits the UI's width however many models)
    assert "| model | higgs \\* | acs_income |" in text and "\\* stand-in data: generated, not the real" in text
    assert "| MMoE | +1.23 | -0.50 |" in text and "| PLE | missing | +2.00 |" in text
    assert 'MultiTab-Bench verdict (bench_verdict): {"claim": "holds"}' in text
    # the report's caveats lead (its banners, not a later section's warning), the results follow, then the stages
    assert text.index("**STAND-IN DATA**") < text.index("**REDUCED TRAINING**") < text.index("## Headline results")
    assert text.index("at most 2 epochs on 2,048 training rows") < text.index("1 ran")
    assert "NOT CONVERGED" not in text
    assert text.index("## Headline results") < text.index("## Stages")
    assert "`results/report.md`" in text and "`results/report.html`" in text and str(tmp_path) not in text
    # a Δm far from 0 because the baseline's metric is near 0 is marked and explained
    metrics = json.loads((tmp_path / "results" / "metrics.json").read_text())
    metrics["delta_m"]["higgs"]["XGB"] = 536.61
    (tmp_path / "results" / "metrics.json").write_text(json.dumps(metrics))
    text = summary_markdown(tmp_path, summary)
    assert "| XGB | +536.61 † |  |" in text and "† |Δm| ≥ 100 %" in text
    # not quoted when aggregate did not run
    summary["stages"]["aggregate"]["status"] = "up_to_date"
    assert "Headline" not in summary_markdown(tmp_path, summary)


def test_the_stage_table_of_the_summary_artifact_fits_the_ui_at_1280_px(tmp_path):
    """The Prefect UI draws each cell of a Markdown table on one line and cuts what is wider than its column of
    the artifact page (about 720 px at 1280 px, 14 px text: about 90 characters of cells, padding aside). With
    the default DAG's stage names, a failure, a retry and a stage not run, the stage table stays within 80,
    and the causes (long) are listed after it."""
    from flows.summary import StageResult, summarise, summary_markdown

    runs = yaml.safe_load((REPO / "runs.yaml").read_text())["train_runs"]
    names = ["acquire@aliexpress", "validate_processed@acs_income", *(f"train@{k}" for k in runs), "aggregate"]
    longest = max(names, key=len)
    cause = "stage x exited with code 1 (attempt 3): RuntimeError: " + "a long cause " * 20
    results = {n: StageResult(n, "ran", 1, 1234.5, memory={"peak_rss_bytes": 12_340_000_000}) for n in names}
    results[longest] = StageResult(longest, "failed", 3, 40.0, error=cause, failed_attempts=["killed", "killed"])
    results[names[0]] = StageResult(names[0], "ran", 2, 3.0, failed_attempts=["killed by SIGKILL"])
    results[names[1]] = StageResult(names[1], "not_run", error=f"upstream stage {longest} did not complete")
    plan = StagePlan(order=tuple(names), upstream={n: () for n in names})
    text = summary_markdown(tmp_path, summarise(plan, results, 99.0, 2, 2))
    table = text[text.index("| stage |"):].split("\n\n", 1)[0].splitlines()
    cells = [[c.strip().replace("**", "") for c in row.strip("|").split(" | ")]  # as shown: bold is no text
             for row in table if not row.startswith("|---")]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    assert len(cells) == len(names) + 1 and sum(widths) <= 80, (widths, longest)
    assert cause.strip() in text and all(cause.strip() not in row for row in table)


def test_sweep_select_publishes_the_sweep_report_and_every_point_as_artifacts(tmp_path):
    select = write_stage("sweep_select", extra="""
        d = pathlib.Path('results/sweeps'); d.mkdir(parents=True, exist_ok=True)
        (d / 'report.md').write_text('# Hyperparameter sweeps\\n\\n- **Selected**: lr0.001-dropout0.0\\n')
        (d / 'points.csv').write_text('dataset,model,rank,selected,lr,dropout,val_mean\\n'
                                      'tiny,mmoe,1,True,0.001,0.0,0.9\\ntiny,mmoe,2,False,0.01,0.0,0.8\\n')""")
    root = make_project(tmp_path / "p", {"sweep_select": select})
    _, _, artifacts = run_recorded(root, retries=0)
    assert "**Selected**: lr0.001-dropout0.0" in artifacts["sweep-report"]
    points = artifacts["sweep-points"]
    rows = json.loads(points) if isinstance(points, str) else points
    assert [(r["rank"], r["lr"], r["val_mean"]) for r in rows] == [("1", "0.001", "0.9"), ("2", "0.01", "0.8")]
    # not published when sweep_select did not run (up to date)
    _, _, again = run_recorded(root, retries=0)
    assert "sweep-report" not in again


def test_deterministic_failures_end_with_the_stage_line_and_exit_3_without_traceback(tmp_path):
    """A dependency that is not there (DVC fails before the command runs), a stage exiting BAD_INPUT, a key
    given twice in params.yaml and a cycle in dvc.yaml: each is attempted once, and the CLI ends with one
    line naming the cause and exit status 3; no Prefect traceback, no retries."""
    from prefect.settings import PREFECT_API_URL

    root = make_project(tmp_path / "p", {"needs": write_stage("needs", ["in/missing.csv"]), "ok": write_stage("ok")})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PREFECT_API_URL": PREFECT_API_URL.value()}

    def cli() -> subprocess.CompletedProcess:
        return subprocess.run([PY, "-m", "flows.pipeline", "--root", str(root), "--retries", "2",
                               "--retry-delay", "0"], capture_output=True, text=True, env=env, timeout=300)

    proc = cli()
    out = proc.stdout + proc.stderr
    assert proc.returncode == BAD_INPUT, out
    assert "Traceback" not in out and "Encountered exception" not in out
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("flows.pipeline: 1 stage(s) failed; needs: stage needs exited with code 3 (bad input, "
                           "not retried)") and "missing.csv" in last, out
    summary = json.loads((root / "results" / "pipeline_summary.json").read_text())
    assert summary["stages"]["needs"]["attempts"] == 1 and summary["ran"] == ["ok"]

    params = root / "params.yaml"
    params.write_text(params.read_text() + "orchestration:\n  workers: 1\n")
    proc = cli()
    assert proc.returncode == BAD_INPUT and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"flows.pipeline: {params}: not valid YAML: line ")
    assert "key 'orchestration' appears twice" in proc.stderr

    params.write_text(params.read_text().rsplit("orchestration:\n  workers: 1\n", 1)[0])
    stages = {"a": {"cmd": "cp b a", "deps": ["b"], "outs": ["a"]},
              "b": {"cmd": "cp a b", "deps": ["a"], "outs": ["b"]}}
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    proc = cli()
    assert proc.returncode == BAD_INPUT and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("flows.pipeline: dvc.yaml / params.yaml: Same item(s) are defined as both a dependency "
                           "and an output in stages: ")
    # an empty path (`local.path: ""` reaches dvc.yaml so), and a dependency that is a symlink loop
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"a": {"cmd": "echo", "deps": [""], "outs": ["a"]}}}))
    proc = cli()
    assert proc.returncode == BAD_INPUT and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "DVC rejected a stage definition (an empty or null path" in line
    os.symlink("loop2", root / "loop1")
    os.symlink("loop1", root / "loop2")
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"a": {"cmd": "echo", "deps": ["loop1"], "outs": ["a"]}}}))
    proc = cli()
    assert proc.returncode == BAD_INPUT and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line == f"flows.pipeline: {root / 'loop1'}: too many levels of symbolic links"


# SIGINT and SIGTERM to the flow alone take the handler "SIGINT to the group" takes (a terminal's Ctrl-C, which
# also reaches dvc and the stage): under -m slow, to keep make test in its time.
@pytest.mark.parametrize("sig", [pytest.param("SIGINT", marks=pytest.mark.slow),
                                 pytest.param("SIGTERM", marks=pytest.mark.slow), "SIGKILL", "SIGINT to the group"])
def test_ctrl_c_or_sigterm_stops_the_whole_run_at_once_and_it_resumes(tmp_path, sig):
    """A signal to the flow while a stage runs: every process of the run (the stage's dvc, shell and
    command, Prefect's temporary server) is gone within seconds, nothing is retried, one line says how to
    continue, exit 128 + the signal; the same command then completes the run. A SIGKILL runs no handler:
    the kernel stops the server and dvc, and dvc the stage's shell and command. DVC runs the command
    through $SHELL: /bin/sh here, which on Debian is dash, a shell that does not exec its command (the
    command's own PR_SET_PDEATHSIG then names the shell, not dvc) - the case CI met with SHELL unset.
    Ctrl-C in a terminal reaches every process of the foreground group at once: the flow, dvc and the
    stage, which says it was interrupted; the stage's log must say so, not call it bad input (DVC used to
    lose the command's exit status and blame the missing output), and print no traceback."""
    import signal

    import psutil

    slow = write_stage("slow", extra="""
        import os, time
        from stages._common import run
        def body():
            pathlib.Path(os.environ["TOY_STARTED"]).touch()
            time.sleep(float(os.environ.get("TOY_SLEEP", "0")))
        code = run("slow", body)
        if code:
            raise SystemExit(code)""")
    root = make_project(tmp_path / "p", {"slow": slow, "after": write_stage("after", ["out/slow"])})
    started = tmp_path / "started"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # its own temporary server
    env |= {"PYTHONPATH": os.pathsep.join(sys.path), "TOY_SLEEP": "300", "SHELL": "/bin/sh",
            "TOY_STARTED": str(started)}
    proc = subprocess.Popen([PY, "-m", "flows.pipeline", "--root", str(root)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    seen: list[psutil.Process] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (started.exists() and any("slow.py" in " ".join(p.cmdline())
                                                                         for p in seen)):
        time.sleep(0.3)
        with pytest.raises(Exception) if proc.poll() is not None else _nothing():
            seen = psutil.Process(proc.pid).children(recursive=True)
    assert any("uvicorn" in " ".join(p.cmdline()) for p in seen), "no temporary server seen"
    t0 = time.monotonic()
    if sig == "SIGINT to the group":
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C (the flow leads its own group here)
        sig = "SIGINT"
    else:
        proc.send_signal(getattr(signal, sig))
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        for p in [proc, *seen]:
            p.kill()
        raise
    assert time.monotonic() - t0 < 20, out + err
    if sig == "SIGKILL":
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 128 + getattr(signal, sig), out + err
        assert "Traceback" not in err and "Retry" not in err and "bad input" not in err, err
        failed = [line for line in err.splitlines() if "stage slow exited with code" in line]
        assert failed and all("(interrupted, not retried)" in line for line in failed), err  # logged before the end
        assert err.strip().splitlines()[-1] == (f"flows.pipeline: stopped by {sig}; the stages that completed "
                                                "are recorded in dvc.lock: run the same command again to continue")
    # Every process of the run's session (the flow's start_new_session), also one orphaned on the way
    # (a command whose shell was stopped while it started it), is gone within 15 s.
    left = _session_processes(proc.pid)
    _, alive = psutil.wait_procs(left, timeout=15)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    assert not alive, [" ".join(p.cmdline()) for p in alive]
    assert not [p.pid for p in seen if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    # the same command continues the run
    done = subprocess.run([PY, "-m", "flows.pipeline", "--root", str(root)], capture_output=True, text=True,
                          env={**env, "TOY_SLEEP": "0"}, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (root / "out" / "after").exists()


@pytest.mark.parametrize(("module", "presses"), [("numpy", 1), ("dvc.repo", 1), ("prefect", 1), ("prefect", 2)])
def test_ctrl_c_while_the_flow_imports_or_reads_the_dag_is_one_line_and_130(tmp_path, module, presses):
    """Ctrl-C right after `make repro`, while the flow still imports (NumPy, before its main; Prefect,
    before the run starts) or DVC reads the DAG: one line, exit 130, no traceback (a KeyboardInterrupt
    inside an import used to print one; inside Prefect's import, pydantic even wraps it in its own error).
    The first Ctrl-C is acted on once the step ends; a second one ends the program at once. Here the
    import is made slow, and the signal goes to the whole process group, as a terminal sends it."""
    import signal

    root = make_project(tmp_path / "p", {"a": write_stage("a")})  # a stage to run: Prefect is imported
    env, importing = slow_import_env(tmp_path / "site", "flows.pipeline", module,
                                     {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    proc = subprocess.Popen([PY, "-m", "flows.pipeline", "--root", str(root)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not importing.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert importing.exists(), proc.communicate()
        for _ in range(presses):
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.2)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("flows.pipeline: stopped by SIGINT (Ctrl-C) ") and "run the same command again" in err
    if presses == 2:
        assert time.monotonic() - t0 < 1.5, "a second Ctrl-C did not end it at once"
    assert not (root / "dvc.lock").exists() and not (root / "out").exists()


def test_the_dvc_wrapper_adopts_and_stops_what_a_stage_orphans(tmp_path):
    """multitab.runtime.process.run_dvc's two parts, in a process of their own: as a child subreaper it adopts a
    process whose parent exited (a stage's command whose shell was stopped while starting it), and
    terminate_descendants then stops it too."""
    code = textwrap.dedent("""
        import os, subprocess, psutil
        from multitab.runtime.process import become_subreaper, terminate_descendants
        become_subreaper()
        pid = int(subprocess.run(["sh", "-c", "sleep 300 > /dev/null 2>&1 & echo $!"], capture_output=True,
                                 text=True, check=True).stdout)
        orphan = psutil.Process(pid)
        print(orphan.ppid() == os.getpid(), flush=True)  # adopted: its shell has exited
        terminate_descendants(grace_seconds=5)
        print(psutil.wait_procs([orphan], timeout=5)[1] == [], flush=True)
    """)
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"], r.stdout + r.stderr


def test_stopping_what_runs_below_keeps_its_exit_status_for_whoever_started_it():
    """multitab.runtime.process.terminate_descendants waits for the processes it stops without collecting their exit
    status: the DVC wrapper's own handler runs it while DVC waits for its command, and a status collected
    there is lost to DVC's subprocess.Popen, which then reads 0: DVC took a stage stopped by Ctrl-C for one
    that succeeded, and failed on its missing outputs instead."""
    code = textwrap.dedent("""
        import subprocess, sys
        from multitab.runtime.process import terminate_descendants
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        terminate_descendants(grace_seconds=10)
        print(child.wait(timeout=10))
    """)
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["-15"], r.stdout + r.stderr


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_stop_while_dvc_rewrites_its_lock_table_leaves_the_table_whole(tmp_path, sig):
    """SIGTERM reaching the DVC wrapper (multitab.runtime.process.run_dvc) while DVC writes `.dvc/tmp/rwlock` (here:
    as it releases the stage's locks; in a real stop, when the flow signals DVC and the stage command at
    once) must not leave the file truncated: DVC refuses every later command on a corrupted lock table. The
    wrapper exits 128 + the signal after DVC has finished the write, and DVC works in the project
    afterwards. SIGINT too: a terminal's Ctrl-C reaches DVC as well, and DVC's own KeyboardInterrupt
    stopped it inside the write."""
    root = make_project(tmp_path / "p", {"a": {"cmd": "echo a > a.txt", "outs": ["a.txt"]}})
    code = textwrap.dedent("""
        import json, os, signal, sys, types
        import dvc.rwlock
        from multitab.runtime import process

        def dump(obj, fobj, **kw):  # the first write of an empty table is the release of the stage's locks
            if not any(obj.get("read", {}).values()) and not obj.get("write") and not fired:
                fired.append(1)
                print("fired", flush=True)
                os.kill(os.getpid(), getattr(signal, os.environ["TOY_SIGNAL"]))  # handled here, before the write
            json.dump(obj, fobj, **kw)

        fired = []
        dvc.rwlock.json = types.SimpleNamespace(**{**vars(json), "dump": dump})  # rwlock's json only
        sys.exit(process.run_dvc(["repro", "--single-item", "a"]))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "DVC_NO_ANALYTICS": "1", "SHELL": "/bin/sh",
           "TOY_SIGNAL": sig}
    r = subprocess.run([PY, "-c", code], cwd=root, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 128 + {"SIGTERM": 15, "SIGINT": 2}[sig], r.stdout + r.stderr
    assert "fired" in r.stdout.split(), r.stdout + r.stderr
    text = (root / ".dvc" / "tmp" / "rwlock").read_text()
    assert text, "the lock table was left empty"
    table = json.loads(text)
    assert not any(table.get("read", {}).values()) and not table.get("write"), table  # whole, and released
    status = subprocess.run([PY, "-m", "dvc", "status"], cwd=root, capture_output=True, text=True, env=env)
    assert status.returncode == 0 and "rwlock" not in status.stdout + status.stderr, status.stdout + status.stderr


def _session_processes(sid: int) -> list:
    import psutil

    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(OSError, psutil.Error):
            if os.getsid(p.pid) == sid:
                found.append(p)
    return found


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


def test_a_summary_that_cannot_be_written_is_one_error_line_not_a_crash(tmp_path, monkeypatch, caplog):
    """A read-only results/ (the summary's folder): the run completes, its summary is printed, and the log
    says in one line why the file is missing (root writes anywhere, so the write itself is made to fail)."""
    import logging

    from flows import orchestrate

    def read_only(path, obj):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(orchestrate, "write_json", read_only)
    root = make_project(tmp_path / "p", {"a": write_stage("a")})
    with caplog.at_level(logging.ERROR):
        state = pipeline(root=str(root), return_state=True)
    assert state.is_completed()
    assert "summary not written: " in caplog.text and "Permission denied" in caplog.text
    assert not (root / "results" / "pipeline_summary.json").exists()


def test_a_corrupted_dvc_lock_table_is_named_with_what_to_do(tmp_path: Path) -> None:
    """A DVC command killed while rewriting .dvc/tmp/rwlock leaves it empty (seen after stopping `make repro`);
    reading the DAG then fails, and the flow says which file and what to do, in one line."""
    from flows.pipeline import project_error

    root = make_project(tmp_path / "p", {"a": write_stage("a")})
    lock = root / ".dvc" / "tmp" / "rwlock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    cwd = os.getcwd()
    os.chdir(root)  # DVC names the file relative to the working folder
    try:
        with pytest.raises(Exception) as caught:
            read_stage_graph(str(root), changed=True)
    finally:
        os.chdir(cwd)
    line = project_error(caught.value)
    assert line is not None and line.startswith(".dvc/tmp/rwlock: DVC's table of stage locks is unreadable"), line
    assert "rm .dvc/tmp/rwlock" in line


def test_a_stage_restored_corrupted_during_the_flow_fails_before_any_stage_reads_it(tmp_path, capsys):
    """A byte flipped in a workspace output and in its DVC cache object (its stat unchanged): DVC sees the
    workspace file changed, so the pre-flight leaves it to DVC, which restores the corrupted object during the
    flow; the stage fails there (flows/integrity.py), not a stage after it."""
    from _corrupt_dvc import DATA, cache_object, dvc, flip_byte, flow, ok, toy_project

    root = toy_project(tmp_path)
    ok(dvc(root, "repro", "prepare"))  # the stages that read its output have not run yet
    obj = cache_object(root, DATA)
    flip_byte(root / DATA)
    flip_byte(obj, keep_mtime=True)
    code, line = flow(root, capsys, "--retries", "0")
    assert code == BAD_INPUT, line
    assert line.startswith("flows.pipeline: 1 stage(s) failed; prepare: stage prepare exited with code 3 (bad "
                           f"input, not retried): {DATA}: differs from what prepare recorded in dvc.lock"), line
    assert f"rm -f {obj.relative_to(root)}" in line
    summary = json.loads((root / "results" / "pipeline_summary.json").read_text())
    assert summary["stages"]["train@toy"]["status"] == "not_run"

    # DVC now calls the file up to date; a deployment's run (the flow without the CLI around it) checks too
    state = pipeline(root=str(root), return_state=True)
    assert state.is_failed() and (state.message or "").startswith(f"{DATA}: differs from what prepare"), state
