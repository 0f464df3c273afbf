"""Crash-safe writes (multitab.files.io): fsync before and after the rename, a full disk named with its path and
size, stale temporaries of a killed writer removed, nothing half-written left behind."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from multitab.files import io as mio


def test_writes_are_fsynced_before_and_after_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[tuple[str, bool]] = []  # (path, whether `path` held the new content at that moment)
    real_fsync = os.fsync
    target = tmp_path / "sub" / "a.json"

    def spy(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        synced.append((path, target.is_file()))
        real_fsync(fd)

    monkeypatch.setattr(mio.os, "fsync", spy)
    mio.write_json(target, {"x": 1})
    assert mio.read_json(target) == {"x": 1}
    (tmp_file, before), (folder, after) = synced
    assert Path(tmp_file).name.startswith(".a.json.") and tmp_file.endswith(".tmp") and not before
    assert folder == str(target.parent) and after
    synced.clear()
    with mio.atomic_dir(tmp_path / "d") as tmp:
        (tmp / "f.txt").write_text("x")
    assert [Path(p).name for p, _ in synced][-1] == tmp_path.name  # the parent, after the swap
    assert any(p.endswith("f.txt") for p, _ in synced)


def _full_disk(f: Any, data: Any, *a: Any) -> None:
    f.write(bytes(data)[:10])
    raise OSError(errno.ENOSPC, "No space left on device")


def test_disk_full_names_the_path_and_the_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "big.bin"
    target.write_bytes(b"old")
    monkeypatch.setattr(mio, "_write_chunks", _full_disk)
    with pytest.raises(mio.DiskFullError) as info:
        mio.write_bytes(target, b"\0" * 3_000_000)
    assert str(info.value).startswith(f"no space left on {target} (needed ~3.0 MB, ")
    assert isinstance(info.value, OSError) and info.value.errno == errno.ENOSPC
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["big.bin"]


def test_disk_full_inside_an_atomic_block_or_folder(tmp_path: Path) -> None:
    def fill(path: Path) -> None:
        path.write_bytes(b"\0" * 200_000)
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(mio.DiskFullError, match=r"no space left on .*t\.parquet \(needed ~0\.2 MB"):
        with mio.atomic_path(tmp_path / "t.parquet") as tmp:
            fill(tmp)
    with pytest.raises(mio.DiskFullError, match=r"no space left on .*/out \(needed ~0\.2 MB"):
        with mio.atomic_dir(tmp_path / "out") as tmp:
            fill(tmp / "part")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(OSError) as other:  # other errors pass through unchanged
        with mio.atomic_path(tmp_path / "t.parquet"):
            raise OSError(errno.EACCES, "denied")
    assert not isinstance(other.value, mio.DiskFullError)


def test_stale_temporaries_are_removed(tmp_path: Path) -> None:
    with mio.atomic_path(tmp_path / "x.parquet") as tmp:
        pd.DataFrame({"a": [1]}).to_parquet(tmp, index=False)
    (tmp_path / ".x.parquet.abc123.tmp").write_bytes(b"half")
    (tmp_path / ".dvclive.abc.tmp").mkdir()
    (tmp_path / ".dvclive.abc.tmp" / "f").write_text("x")
    (tmp_path / ".dvclive.old").mkdir()
    (tmp_path / "keep.tmp").write_text("not ours: no leading dot")
    removed = mio.remove_stale_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == [".dvclive.abc.tmp", ".dvclive.old", ".x.parquet.abc123.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.tmp", "x.parquet"]
    assert mio.remove_stale_temporaries(tmp_path / "absent") == []
    (tmp_path / ".seed0.x1.tmp").mkdir()
    (tmp_path / ".seed1.x2.tmp").mkdir()  # another writer's: left alone when only `seed0`'s are removed
    assert [p.name for p in mio.remove_stale_temporaries(tmp_path, "seed0")] == [".seed0.x1.tmp"]
    assert (tmp_path / ".seed1.x2.tmp").is_dir()


def test_outputs_get_the_modes_of_a_plain_write(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    os.umask(umask)
    mio.write_json(tmp_path / "a.json", {})
    with mio.atomic_dir(tmp_path / "d"):
        pass
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o666 & ~umask
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o777 & ~umask


def test_free_space_is_measured_after_the_temporary_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    real_usage = mio.shutil.disk_usage

    def usage(path: Any) -> Any:
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        return real_usage(path)

    monkeypatch.setattr(mio.shutil, "disk_usage", usage)
    monkeypatch.setattr(mio, "_write_chunks", _full_disk)
    with pytest.raises(mio.DiskFullError):
        mio.write_bytes(tmp_path / "x.bin", b"123")
    assert seen == [[]]


def test_a_temporary_of_a_temporary_is_its_output_s_and_a_newer_one_can_be_spared(tmp_path: Path) -> None:
    # scratch a writer kept beside its own temporary folder (`..<name>.<random>.tmp.columns.<random>.tmp`, what
    # preprocess left after a SIGKILL): the output's, removed with its other temporaries
    nested = tmp_path / "..higgs.ab12.tmp.columns.cd34.tmp"
    nested.mkdir()
    (nested / "0.bin").write_bytes(b"\0" * 10)
    (tmp_path / "..higgsx.ab12.tmp").mkdir()  # another output's (`higgsx`)
    assert [p.name for p in mio.remove_stale_temporaries(tmp_path, "higgs")] == [nested.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["..higgsx.ab12.tmp"]
    # `before`: what a writer that started since then made is left alone
    old, new = tmp_path / ".run.1.tmp", tmp_path / ".run.2.tmp"
    old.write_text("killed")
    new.write_text("being written")
    os.utime(old, (1_000_000, 1_000_000))
    assert mio.remove_stale_temporaries(tmp_path, "run", before=2_000_000) == [old]
    assert new.exists()


def test_a_json_file_cut_short_is_named(tmp_path: Path) -> None:
    # info.json, meta.json, a verdict, a declared dataset's schema.json: read by the next stage
    path = tmp_path / "info.json"
    mio.write_json(path, {"dataset": "higgs", "n_rows": {"train": 10}})
    path.write_text(path.read_text()[:20])
    with pytest.raises(ValueError, match=rf"^{path}: not readable JSON \(.*\); it was cut short or edited"):
        mio.read_json(path)
