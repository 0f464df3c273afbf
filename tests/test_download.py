"""`fetch` against a scripted HTTP server on 127.0.0.1: checksums, resume, retries, errors, gzip checks."""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _http_fixture import FixtureServer, Reply
from multitab.datasets import download
from multitab.datasets.download import DownloadError, check_integrity, fetch

FAST = {"backoff_seconds": 0.01, "timeout_seconds": 5, "progress": False}
DATA = os.urandom(300_000)
SHA = hashlib.sha256(DATA).hexdigest()


@pytest.fixture(autouse=True)
def small_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    # Network reads of 1000 bytes: a dropped connection keeps every byte before the cut (a multiple of 1000).
    monkeypatch.setattr(download, "NET_CHUNK_BYTES", 1000)


@pytest.fixture
def server() -> Iterator[FixtureServer]:
    with FixtureServer() as s:
        yield s


def _no_leftovers(dest: Path) -> None:
    assert not dest.exists()
    assert not dest.with_name(dest.name + ".part").exists()


def test_success_with_checksum(server: FixtureServer, tmp_path: Path) -> None:
    url = server.add("/f.bin", Reply(DATA))
    dest = fetch(url, tmp_path / "f.bin", sha256=SHA, **FAST)
    assert dest.read_bytes() == DATA
    assert not (tmp_path / "f.bin.part").exists()
    # A second call reuses the verified file without a request.
    fetch(url, tmp_path / "f.bin", sha256=SHA, **FAST)
    assert len(server.seen("/f.bin")) == 1


def test_checksum_mismatch_is_rejected_deleted_and_refetched(server: FixtureServer, tmp_path: Path) -> None:
    bad = bytearray(DATA)
    bad[1000] ^= 0xFF
    url = server.add("/f.bin", Reply(bytes(bad)), Reply(DATA))
    dest = fetch(url, tmp_path / "f.bin", sha256=SHA, retries=2, **FAST)
    assert dest.read_bytes() == DATA
    seen = server.seen("/f.bin")
    assert len(seen) == 2
    assert seen[1].range is None  # a rejected file is fetched from scratch, never resumed


def test_checksum_mismatch_every_time_fails_and_leaves_nothing(server: FixtureServer, tmp_path: Path) -> None:
    url = server.add("/f.bin", Reply(DATA[:-1] + b"x"))
    with pytest.raises(DownloadError, match="sha256") as e:
        fetch(url, tmp_path / "f.bin", sha256=SHA, retries=2, **FAST)
    assert url in str(e.value)
    assert len(server.seen("/f.bin")) == 3
    _no_leftovers(tmp_path / "f.bin")


def test_corrupt_cached_file_is_replaced(server: FixtureServer, tmp_path: Path) -> None:
    url = server.add("/f.bin", Reply(DATA))
    (tmp_path / "f.bin").write_bytes(b"stale")
    assert fetch(url, tmp_path / "f.bin", sha256=SHA, **FAST).read_bytes() == DATA


def test_dropped_connection_resumes_with_range(server: FixtureServer, tmp_path: Path) -> None:
    half = len(DATA) // 2
    url = server.add("/f.bin", Reply(DATA, drop_after=half), Reply(DATA))
    dest = fetch(url, tmp_path / "f.bin", sha256=SHA, retries=3, **FAST)
    assert dest.read_bytes() == DATA
    seen = server.seen("/f.bin")
    assert [r.range for r in seen] == [None, f"bytes={half}-"]


def test_server_ignoring_range_restarts_from_zero(server: FixtureServer, tmp_path: Path) -> None:
    half = len(DATA) // 3
    url = server.add(
        "/f.bin", Reply(DATA, drop_after=half, honour_range=False), Reply(DATA, honour_range=False)
    )
    dest = fetch(url, tmp_path / "f.bin", sha256=SHA, retries=3, **FAST)
    assert dest.read_bytes() == DATA  # not half + the whole file appended
    seen = server.seen("/f.bin")
    assert [r.range for r in seen] == [None, f"bytes={half}-"]  # right on the 2nd request, no refetch


def test_resume_of_a_partial_file_left_by_an_earlier_run(server: FixtureServer, tmp_path: Path) -> None:
    url = server.add("/f.bin", Reply(DATA))
    (tmp_path / "f.bin.part").write_bytes(DATA[:1234])
    assert fetch(url, tmp_path / "f.bin", sha256=SHA, **FAST).read_bytes() == DATA
    assert server.seen("/f.bin")[0].range == "bytes=1234-"


def test_404_fails_at_once_with_a_clear_error(server: FixtureServer, tmp_path: Path) -> None:
    url = server.url("/missing.csv.gz")
    t0 = time.monotonic()
    with pytest.raises(DownloadError) as e:
        fetch(url, tmp_path / "x.csv.gz", retries=5, backoff_seconds=10, timeout_seconds=5, progress=False)
    assert time.monotonic() - t0 < 5  # no backoff sleep happened
    msg = str(e.value)
    assert url in msg and "404" in msg and "params.yaml" in msg
    assert len(server.seen("/missing.csv.gz")) == 1
    _no_leftovers(tmp_path / "x.csv.gz")


def test_500_is_retried_with_backoff_then_succeeds(
    server: FixtureServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sleeps: list[float] = []
    monkeypatch.setattr(download.time, "sleep", sleeps.append)
    url = server.add("/f.bin", Reply(status=500), Reply(status=503), Reply(DATA))
    dest = fetch(url, tmp_path / "f.bin", sha256=SHA, retries=3, backoff_seconds=0.5, progress=False)
    assert dest.read_bytes() == DATA
    assert sleeps == [0.5, 1.0]  # exponential
    assert len(server.seen("/f.bin")) == 3


def test_500_every_time_ends_in_a_clear_error(server: FixtureServer, tmp_path: Path) -> None:
    url = server.add("/f.bin", Reply(status=500))
    with pytest.raises(DownloadError) as e:
        fetch(url, tmp_path / "f.bin", retries=2, **FAST)
    assert url in str(e.value) and "HTTP 500" in str(e.value) and "3 attempt" in str(e.value)
    assert len(server.seen("/f.bin")) == 3
    _no_leftovers(tmp_path / "f.bin")


def test_connection_refused_is_retried_then_clear_error(tmp_path: Path) -> None:
    with FixtureServer() as s:
        url = s.url("/f.bin")
    with pytest.raises(DownloadError, match="ConnectionError") as e:
        fetch(url, tmp_path / "f.bin", retries=1, **FAST)
    assert url in str(e.value)


GZ = gzip.compress(b"1.0,2.0,3.0\n" * 20_000)


def test_gzip_cut_short_is_rejected_without_checksum(server: FixtureServer, tmp_path: Path) -> None:
    # The server itself serves a truncated file (complete from HTTP's point of view).
    url = server.add("/HIGGS.csv.gz", Reply(GZ[: len(GZ) // 2]))
    with pytest.raises(DownloadError, match="rejected") as e:
        fetch(url, tmp_path / "HIGGS.csv.gz", retries=1, **FAST)
    assert "EOFError" in str(e.value) or "BadGzip" in str(e.value)
    _no_leftovers(tmp_path / "HIGGS.csv.gz")


def test_gzip_cut_short_then_good_is_refetched(server: FixtureServer, tmp_path: Path) -> None:
    url = server.add("/d.csv.gz", Reply(GZ[:-9]), Reply(GZ))
    dest = fetch(url, tmp_path / "d.csv.gz", retries=2, **FAST)
    assert dest.read_bytes() == GZ
    assert server.seen("/d.csv.gz")[1].range is None


def test_truncated_cached_gzip_is_never_used(server: FixtureServer, tmp_path: Path) -> None:
    url = server.add("/d.csv.gz", Reply(GZ))
    (tmp_path / "d.csv.gz").write_bytes(GZ[:100])
    assert fetch(url, tmp_path / "d.csv.gz", **FAST).read_bytes() == GZ


def test_expected_size_is_checked(server: FixtureServer, tmp_path: Path) -> None:
    url = server.add("/f.bin", Reply(DATA))
    with pytest.raises(DownloadError, match="size"):
        fetch(url, tmp_path / "f.bin", expected_size=len(DATA) + 1, retries=0, **FAST)


def test_integrity_checks(tmp_path: Path) -> None:
    p = tmp_path / "x.parquet"
    p.write_bytes(b"PAR1" + b"\0" * 20 + b"PAR1")
    assert check_integrity(p) is None
    p.write_bytes(b"PAR1" + b"\0" * 20)
    assert check_integrity(p) is not None
    z = tmp_path / "x.gz"
    z.write_bytes(GZ[:-4])
    assert check_integrity(z) is not None


def test_logs_through_logging(
    server: FixtureServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = server.add("/f.bin", Reply(status=500), Reply(DATA))
    with caplog.at_level(logging.INFO, logger="multitab.datasets.download"):
        fetch(url, tmp_path / "f.bin", sha256=SHA, retries=1, **FAST)
    assert any("HTTP 500" in r.getMessage() for r in caplog.records)


def test_content_encoding_is_not_decoded(server: FixtureServer, tmp_path: Path) -> None:
    # Some servers label a .gz file "Content-Encoding: gzip"; the file on disk must be the bytes as stored.
    url = server.add("/d.csv.gz", Reply(GZ, headers={"Content-Encoding": "gzip"}))
    assert fetch(url, tmp_path / "d.csv.gz", **FAST).read_bytes() == GZ


def test_an_html_page_instead_of_the_data_fails_at_once_as_bad_input(server: FixtureServer, tmp_path: Path) -> None:
    """A login page served with status 200 is the same on every try: refused at once (a ValueError, so the
    stage exits with BAD_INPUT and the flow does not retry it), nothing left behind."""
    page = b"\n<!DOCTYPE html><html><head><title>Sign in</title></head><body>login</body></html>"
    url = server.add("/HIGGS.csv.gz", Reply(page))
    with pytest.raises(download.DownloadRefused) as e:
        fetch(url, tmp_path / "HIGGS.csv.gz", retries=3, **FAST)
    assert isinstance(e.value, ValueError) and "HTML page" in str(e.value) and "local" in str(e.value)
    assert len(server.seen("/HIGGS.csv.gz")) == 1
    _no_leftovers(tmp_path / "HIGGS.csv.gz")
    with pytest.raises(ValueError):  # a 404 is not retried by the flow either
        fetch(server.url("/gone.csv.gz"), tmp_path / "gone.csv.gz", retries=0, **FAST)
