"""A corrupted DVC cache object or workspace file is never used (multitab.files.integrity, flows/integrity.py).

DVC trusts its cache objects' names: a byte flipped in a workspace output and in its cache object (the
object's stat unchanged, as when a bit goes bad on disk), then `dvc repro --single-item <producer>`, restores
the corrupted file from the run cache and `dvc status` calls everything up to date. The tests build that in a
toy DVC project whose stages go through stages/_common.py (tests/_corrupt_dvc.py) and check that the flow's
pre-flight and the stage that reads the file both stop with exit status 3, one line naming the file and what
to do, and that doing it works. The project is built once per module and copied for each test; a stage DVC
restores corrupted during a flow run is tests/test_pipeline.py's (it needs the Prefect server).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from _corrupt_dvc import (
    DATA,
    METRICS,
    ROOT,
    copy_project,
    corrupt_and_restore,
    dvc,
    dvc_status,
    flip_byte,
    flow,
    ok,
    stage_error,
    toy_project,
)
from multitab.files import integrity
from multitab.runtime.exit_codes import BAD_INPUT


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The toy project after `dvc repro train@toy` ("trained": aggregate never ran) and after `dvc repro`
    ("all")."""
    root = toy_project(tmp_path_factory.mktemp("toy"))
    ok(dvc(root, "repro", "train@toy"))
    trained = copy_project(root, tmp_path_factory.mktemp("trained") / "p")
    ok(dvc(root, "repro"))
    return {"trained": trained, "all": root}


def test_a_corrupted_data_file_restored_from_the_cache_stops_the_flow_and_its_reader(built, tmp_path, capsys):
    root = copy_project(built["all"], tmp_path / "p")
    good = (root / METRICS).read_text()
    obj = corrupt_and_restore(root, DATA, "prepare")
    shown = obj.relative_to(root)
    assert dvc_status(root) == {}  # every stage, the ones reading the file included

    code, line = flow(root, capsys)
    assert code == BAD_INPUT, line
    assert line.startswith(f"flows.pipeline: {DATA}: differs from what prepare recorded in dvc.lock"), line
    assert f"cache object {shown}" in line and f"rm -f {shown}" in line
    assert "dvc repro --force --single-item prepare" in line

    proc = dvc(root, "repro", "--force", "--single-item", "train@toy")
    assert proc.returncode != 0 and "exited with 3" in proc.stderr.replace("\n", " "), proc.stderr
    assert stage_error(proc, "train@toy").startswith(f"{DATA}: differs from what prepare recorded in dvc.lock")
    assert not (root / METRICS).exists()  # nothing computed from it (DVC keeps the recorded one in its cache)

    # what the line says to do mends it
    obj.unlink()
    ok(dvc(root, "repro", "--force", "--single-item", "prepare"))
    ok(dvc(root, "repro", "--single-item", "train@toy"))  # its metrics (removed by the run above) restored
    assert flow(root, capsys)[0] == 0 and (root / METRICS).read_text() == good  # every output hashed


def test_a_corrupted_metrics_file_stops_the_flow_and_an_aggregate_that_never_ran(built, tmp_path, capsys):
    """A trained run's metrics.json (a DVC metric with cache: true) read by an aggregate stage that has not
    run yet (no dvc.lock entry: its inputs come from dvc.yaml)."""
    root = copy_project(built["trained"], tmp_path / "p")
    obj = corrupt_and_restore(root, METRICS, "train@toy")

    code, line = flow(root, capsys, "--targets", "train")
    assert code == BAD_INPUT, line
    assert line.startswith(f"flows.pipeline: {METRICS}: differs from what train@toy recorded in dvc.lock"), line
    assert f"rm -f {obj.relative_to(root)}" in line and "dvc repro --force --single-item train@toy" in line

    proc = dvc(root, "repro", "--single-item", "aggregate")
    assert proc.returncode != 0, proc.stdout
    assert stage_error(proc, "aggregate").startswith(f"{METRICS}: differs from what train@toy recorded")
    assert not (root / "results" / "summary").exists()


def test_an_edited_workspace_file_with_an_intact_cache_object_says_checkout_relink(built, tmp_path, capsys):
    root = copy_project(built["all"], tmp_path / "p")
    flip_byte(root / DATA)
    proc = dvc(root, "repro", "--force", "--single-item", "train@toy")
    line = stage_error(proc, "train@toy")
    assert line.startswith(f"{DATA}: differs from what prepare recorded in dvc.lock"), line
    assert f"restore it with `dvc checkout --relink --force {DATA}`" in line
    assert proc.returncode != 0

    # what the line says to do mends it; the same edit with its mtime put back (DVC sees nothing, as with a
    # bit gone bad on disk): the pre-flight says the same
    ok(dvc(root, "checkout", "--relink", "--force", DATA))
    ok(dvc(root, "repro", "--force", "--single-item", "train@toy"))
    assert dvc_status(root) == {}
    flip_byte(root / DATA, keep_mtime=True)
    assert dvc_status(root) == {}
    code, line = flow(root, capsys)
    assert code == BAD_INPUT and f"dvc checkout --relink --force {DATA}" in line, line


def test_the_warm_check_hashes_only_changed_files(built, tmp_path, monkeypatch):
    root = copy_project(built["all"], tmp_path / "p")
    hashed: list[Path] = []
    real = integrity.md5_file
    monkeypatch.setattr(integrity, "md5_file", lambda p: hashed.append(Path(p)) or real(p))

    assert (root / integrity.STATE_FILE).is_file()  # the stages that read outputs checked them
    (root / integrity.STATE_FILE).unlink()
    cold = integrity.verify_outputs(root)
    assert cold.files == cold.hashed == 4  # train.bin, meta.json, metrics.json, summary/summary.json
    assert (root / integrity.STATE_FILE).is_file()
    hashed.clear()
    warm = integrity.verify_outputs(root)
    assert (warm.files, warm.hashed, hashed) == (4, 0, [])

    # a same-size edit with a new mtime is hashed again and caught
    flip_byte(root / DATA)
    with pytest.raises(integrity.IntegrityError) as caught:
        integrity.verify_outputs(root)
    assert caught.value.path == DATA and [p.name for p in hashed][0] == "train.bin"

    # a folder output without a copy in DVC's cache (`cache: false`) is compared as a whole
    (root / "results" / "summary" / "summary.json").write_text('{"mean_auc": 0.99}')
    with pytest.raises(integrity.IntegrityError, match=r"^results/summary: differs from what aggregate recorded in "
                       r"dvc\.lock .*holds no list of its files: re-run the stage: `dvc repro --force "
                       r"--single-item aggregate`$"):
        integrity.verify_outputs(root, ["aggregate"])


def test_declared_deps_resolve_every_stage_of_the_repository_as_dvc_does():
    """dvc.yaml's foreach / matrix items and ${...} references (params.yaml, runs.yaml) resolved without DVC
    give each stage the dependencies DVC gives it (a stage's check of its inputs before it ever ran)."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    from multitab.files.stage_deps import Declarations, declared_deps, normalise

    declarations = Declarations.load(ROOT)  # what declared_deps reads for each stage, read once here
    with Repo(str(ROOT)) as repo:
        stages = list(repo.index.stages)
    assert len(stages) > 20
    for stage in stages:
        # `deps:` only: a stage's `params:` (params.yaml, and runs.yaml's run records for the train stages) are
        # values DVC compares itself, not outputs read from DVC's cache
        expected = sorted({normalise(os.path.relpath(d.fs_path, ROOT)) for d in stage.deps
                           if not isinstance(d, ParamsDependency)})
        assert sorted(set(declarations.deps(stage.addressing))) == expected, stage.addressing
    some = stages[-1]  # the stage's own call reads the files itself
    assert declared_deps(ROOT, some.addressing) == declarations.deps(some.addressing)


def test_outside_dvc_or_without_dvc_lock_nothing_is_checked(tmp_path):
    assert integrity.verify_stage_inputs({}) == integrity.Tally()
    env = {"DVC_STAGE": "train@toy", "DVC_ROOT": str(tmp_path)}
    assert integrity.verify_stage_inputs(env) == integrity.Tally()
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {}}))
    assert integrity.verify_stage_inputs(env) == integrity.Tally()
