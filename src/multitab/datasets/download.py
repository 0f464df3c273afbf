"""A verified, resumable HTTP download: `fetch(url, dest, ...)`.

What it guarantees:
- the file appears at `dest` only once it is complete and verified (sha256 when given; otherwise the
  format's own integrity check for .gz / .zip / .parquet, and `expected_size` when given), by an atomic
  rename of `dest.part`; a corrupt or truncated file is deleted and fetched again from scratch, never used;
- a broken transfer resumes where it stopped (HTTP Range) when the server honours Range (206), and restarts
  from zero when it does not (200);
- connection errors, timeouts, HTTP 408 / 429 and 5xx are retried with exponential backoff; other 4xx
  (404 and friends) fail at once, naming the URL and the status.

`retries` is one budget for every kind of retry: the call makes at most `retries + 1` attempts.
"""

from __future__ import annotations

import gzip
import logging
import time
import zipfile
import zlib
from pathlib import Path

import requests
import urllib3
from tqdm.auto import tqdm

from multitab.files.io import replace_durably, sha256_file

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20  # file reads (hashing, gzip checks)
NET_CHUNK_BYTES = 1 << 16  # network reads: a broken transfer loses at most one of these
MAX_BACKOFF_SECONDS = 120.0
_RETRIABLE_STATUS = {408, 425, 429}


class DownloadError(RuntimeError):
    """A download failed for good (the message names the URL and says what to do)."""


class DownloadRefused(DownloadError, ValueError):
    """The server answered, and no retry will change the answer: a 4xx status, or an HTML page (a login or
    error page) where the data should be. A ValueError, so the stage exits with BAD_INPUT (not retried)."""


_HTML_START = (b"<!doctype html", b"<html", b"<head", b"<!--")


def is_html(path: str | Path) -> bool:
    """Whether the file starts like an HTML page (after whitespace and a byte-order mark)."""
    with open(path, "rb") as f:
        head = f.read(512).lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return head.startswith(_HTML_START)


class _Retry(Exception):
    """A transient failure: try again after a backoff. `restart` drops the partial file first."""

    def __init__(self, reason: str, *, restart: bool = False, wait: float | None = None) -> None:
        super().__init__(reason)
        self.restart = restart
        self.wait = wait


def check_integrity(path: str | Path, name: str | None = None) -> str | None:
    """The format's own integrity check, chosen by `name` (default: the file's name). Returns a reason
    when the file is damaged, None when it passes (or the format has no check)."""
    path = Path(path)
    name = (name or path.name).lower()
    try:
        if name.endswith((".gz", ".tgz")):
            # gzip checks the CRC and length of every member; a stream cut short raises EOFError.
            with gzip.open(path, "rb") as f:
                while f.read(CHUNK_BYTES):
                    pass
        elif name.endswith(".zip"):
            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
            if bad is not None:
                return f"zip member {bad!r} fails its CRC check"
        elif name.endswith((".parquet", ".pq")):
            size = path.stat().st_size
            with open(path, "rb") as f:
                head = f.read(4)
                f.seek(max(size - 4, 0))
                tail = f.read(4)
            if size < 12 or head != b"PAR1" or tail != b"PAR1":
                return "not a complete Parquet file (magic bytes missing at the start or end)"
    except (EOFError, OSError, zlib.error, zipfile.BadZipFile) as e:
        return f"{type(e).__name__}: {e}"
    return None


def _verify(part: Path, dest: Path, sha256: str | None, expected_size: int | None) -> str | None:
    """None when `part` is a good copy of the file `dest` names; otherwise why not."""
    size = part.stat().st_size
    if expected_size is not None and size != expected_size:
        return f"size {size} bytes, expected {expected_size}"
    if sha256 is not None:
        got = sha256_file(part)
        if got != sha256.lower():
            return f"sha256 {got}, expected {sha256.lower()}"
        return None
    return check_integrity(part, dest.name)


def _backoff(attempt: int, base: float, wait: float | None) -> float:
    delay = min(base * (2**attempt), MAX_BACKOFF_SECONDS)
    if wait is not None:
        delay = max(delay, min(wait, MAX_BACKOFF_SECONDS))
    return delay


def _retry_after(resp: requests.Response) -> float | None:
    value = resp.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _content_range_start(value: str | None) -> int | None:
    # "bytes 100-199/200" -> 100
    if not value or not value.startswith("bytes "):
        return None
    try:
        return int(value[6:].split("-", 1)[0])
    except ValueError:
        return None


def _content_range_total(value: str | None) -> int | None:
    # "bytes */200" or "bytes 100-199/200" -> 200
    if not value or "/" not in value:
        return None
    total = value.rsplit("/", 1)[1]
    return int(total) if total.isdigit() else None


def _attempt(
    session: requests.Session,
    url: str,
    part: Path,
    *,
    timeout_seconds: float,
    progress: bool,
    validator: dict[str, str],
) -> None:
    """One transfer into `part`, resuming from its current size. Raises _Retry or DownloadError."""
    offset = part.stat().st_size if part.exists() else 0
    headers = {"Accept-Encoding": "identity"}  # byte ranges refer to the file as stored, not re-encoded
    if offset:
        headers["Range"] = f"bytes={offset}-"
        if "If-Range" in validator:  # resume only if the file is still the one we started on
            headers["If-Range"] = validator["If-Range"]
    try:
        resp = session.get(url, headers=headers, stream=True, timeout=timeout_seconds)
    except (requests.ConnectionError, requests.Timeout) as e:
        raise _Retry(f"{type(e).__name__}: {e}") from e
    with resp:
        status = resp.status_code
        if status == 416 and offset:
            total = _content_range_total(resp.headers.get("Content-Range"))
            if total == offset:
                log.info("%s: the partial file is already complete (%d bytes)", url, offset)
                return
            raise _Retry(f"HTTP 416 for a resume at byte {offset} (remote size {total})", restart=True)
        if status >= 500 or status in _RETRIABLE_STATUS:
            raise _Retry(f"HTTP {status} {resp.reason}", wait=_retry_after(resp))
        if status >= 400:
            hint = {
                404: "the file is not there: check the URL in params.yaml (datasets.<name>.remote.url)",
                410: "the file was removed: find its new location and update the URL in params.yaml",
                401: "the host needs a login: download the file yourself and use source: local",
                403: "access denied: download the file yourself and use source: local",
            }.get(status, "check the URL in params.yaml")
            raise DownloadRefused(f"GET {url} failed with HTTP {status} {resp.reason}: {hint}")
        if status == 206:
            start = _content_range_start(resp.headers.get("Content-Range"))
            if start != offset:
                raise _Retry(f"server answered a resume at {offset} with range start {start}", restart=True)
            mode = "ab"
        else:
            if offset:
                log.warning(
                    "%s: server ignored the Range request (HTTP %d); restarting from zero", url, status
                )
            offset = 0
            mode = "wb"
            etag = resp.headers.get("ETag")
            if etag and not etag.startswith("W/"):
                validator["If-Range"] = etag
            elif resp.headers.get("Last-Modified"):
                validator["If-Range"] = resp.headers["Last-Modified"]
        length = resp.headers.get("Content-Length")
        remaining = int(length) if length and length.isdigit() else None
        total = offset + remaining if remaining is not None else None
        received = 0
        bar = tqdm(
            total=total,
            initial=offset,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=part.name.removesuffix(".part"),
            disable=not progress,
            leave=False,
        )
        try:
            with open(part, mode) as f:
                # Raw bytes as stored (no Content-Encoding decoding): the checksum and byte ranges refer to them.
                for chunk in resp.raw.stream(NET_CHUNK_BYTES, decode_content=False):
                    f.write(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
        except (urllib3.exceptions.HTTPError, requests.RequestException, OSError) as e:
            # The bytes received so far stay in `part`: the next attempt resumes after them.
            raise _Retry(f"transfer broke after {offset + received} bytes: {type(e).__name__}: {e}") from e
        finally:
            bar.close()
        if remaining is not None and received < remaining:
            raise _Retry(f"transfer ended after {offset + received} of {total} bytes")


def fetch(
    url: str,
    dest: str | Path,
    *,
    sha256: str | None = None,
    expected_size: int | None = None,
    retries: int = 5,
    backoff_seconds: float = 2.0,
    timeout_seconds: float = 60,
    progress: bool = True,
) -> Path:
    """Download `url` to `dest` (see the module docstring). A verified `dest` that already exists is reused
    without a request; one that fails verification is deleted and fetched again."""
    if retries < 0:
        raise ValueError(f"{retries=} must be >= 0")
    if backoff_seconds < 0:
        raise ValueError(f"{backoff_seconds=} must be >= 0")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")

    if dest.exists():
        reason = _verify(dest, dest, sha256, expected_size)
        if reason is None:
            log.info("%s: using the cached, verified copy %s", url, dest)
            return dest
        log.warning(
            "%s: cached copy %s fails verification (%s); deleting it and downloading again", url, dest, reason
        )
        dest.unlink()

    validator: dict[str, str] = {}
    last = "no attempt made"
    last_exc: _Retry | None = None
    with requests.Session() as session:
        for attempt in range(retries + 1):
            if attempt:
                delay = _backoff(attempt - 1, backoff_seconds, last_exc.wait if last_exc else None)
                log.info("%s: retry %d/%d in %.1f s", url, attempt, retries, delay)
                time.sleep(delay)
            last_exc = None
            try:
                _attempt(
                    session,
                    url,
                    part,
                    timeout_seconds=timeout_seconds,
                    progress=progress,
                    validator=validator,
                )
            except _Retry as e:
                last_exc = e
                last = str(e)
                log.warning("%s: attempt %d/%d failed: %s", url, attempt + 1, retries + 1, e)
                if e.restart:
                    part.unlink(missing_ok=True)
                    validator.clear()
                continue
            except DownloadError:
                part.unlink(missing_ok=True)
                raise
            if is_html(part):  # a login or error page served with status 200: the same on every try
                part.unlink(missing_ok=True)
                raise DownloadRefused(
                    f"GET {url} returned an HTML page (a login or error page?), not the data: open the URL in "
                    "a browser, download the file and set datasets.<name>.source: local with local.path")
            reason = _verify(part, dest, sha256, expected_size)
            if reason is None:
                replace_durably(part, dest)  # fsync before and after the rename
                log.info("%s: downloaded and verified -> %s (%d bytes)", url, dest, dest.stat().st_size)
                return dest
            # A damaged file is never resumed or used: start again from zero.
            last = f"downloaded file rejected: {reason}"
            log.warning("%s: attempt %d/%d: %s; deleting it", url, attempt + 1, retries + 1, last)
            part.unlink(missing_ok=True)
            validator.clear()
    what = (
        "the server keeps sending a file that does not match: check the URL, or the sha256 in params.yaml "
        "if the file was legitimately updated"
        if last.startswith("downloaded file rejected")
        else "check your network and the URL, then run again (a partial download is kept and resumed)"
    )
    raise DownloadError(f"GET {url} failed after {retries + 1} attempt(s); last error: {last}. {what}")
