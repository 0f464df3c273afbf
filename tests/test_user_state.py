"""The test suite keeps out of the user's state (tests/conftest.py): run in a copy of the checkout, with a home
folder of its own and no location set for any tool, a pipeline test that starts `python -m flows.pipeline`
with Prefect's own temporary server (as tests/test_pipeline.py does) leaves no Prefect database in the
checkout (.prefect/: what `make ui` and `make repro` show), nothing in the home folder, and no DVC site cache
in DVC's default place (/var/tmp/dvc/repo/<the project's token>)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# where a tool's state goes when set (tests/conftest.py sets them all): dropped, so that each tool uses its default
LOCATIONS = ("PREFECT_", "XDG_", "DVC_GLOBAL_CONFIG_DIR", "DVC_SYSTEM_CONFIG_DIR", "DVC_SITE_CACHE_DIR", "MPLCONFIGDIR",
             "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")

INNER_TEST = textwrap.dedent('''
    import os, subprocess, sys
    from pathlib import Path

    from _toy_dvc import PY, make_project, write_stage


    def test_a_flow_with_its_own_temporary_server():
        root = make_project(Path(os.environ["USER_STATE_PROJECT"]), {"a": write_stage("a")})
        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
        env["PYTHONPATH"] = os.pathsep.join(sys.path)
        proc = subprocess.run([PY, "-m", "flows.pipeline", "--root", str(root)], env=env, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (root / "dvc.lock").is_file()
''')


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_the_suite_leaves_the_checkout_and_the_users_state_alone(tmp_path, monkeypatch):
    checkout, home, project = tmp_path / "checkout", tmp_path / "home", tmp_path / "project"
    for folder in ("flows", "stages"):
        shutil.copytree(REPO / folder, checkout / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (checkout / "tests").mkdir()
    for name in ("conftest.py", "_toy_dvc.py"):
        shutil.copy(REPO / "tests" / name, checkout / "tests" / name)
    (checkout / "tests" / "test_inner.py").write_text(INNER_TEST)
    shutil.copy(REPO / "pyproject.toml", checkout / "pyproject.toml")
    home.mkdir()
    # a user with nothing set: every tool picks its own default under this home (or /var/tmp for DVC)
    env = {k: v for k, v in os.environ.items() if not k.startswith(LOCATIONS) and k != "PYTHONPATH"}
    env |= {"HOME": str(home), "USER_STATE_PROJECT": str(project)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp_path / "basetemp"), "tests/test_inner.py"],
                          cwd=checkout, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    assert not (checkout / ".prefect").exists(), _files(checkout / ".prefect")
    assert _files(home) == []
    from dvc.dirs import site_cache_dir
    from dvc.repo import Repo

    with Repo(str(project)) as repo:  # its token, under this process's own site cache
        token = Path(repo.site_cache_dir).name
    monkeypatch.delenv("DVC_SITE_CACHE_DIR")
    default = Path(site_cache_dir()) / "repo" / token
    assert not default.exists(), f"{default}: DVC's site cache of a test's project, in the user's place"
