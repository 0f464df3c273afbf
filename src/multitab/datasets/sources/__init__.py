"""The `local` and `remote` sources of `acquire@<dataset>`: real files -> `<file_key>.parquet` in raw schema.

`acquire_local` / `acquire_remote` (here) write `out_dir/<file_key>.parquet` for every raw file of the
schema, each atomically; if one file fails, the files this call already wrote are removed, so nothing is
left half-done. Downloads go to `cache_dir` (verified, resumable: `download.fetch`) and are reused.

The parts, one concern each:
- formats.py: which format a file is, how to open it, `SourceError`, a broken CSV's diagnostics;
- readers.py: streaming readers of CSV, gzipped CSV, Parquet and ARFF (batches of the raw columns);
- typed.py: `read_raw_table` / `read_raw_file`: the schema's typed columns, checked strictly (every problem
  names the file, the column and, where it applies, the row, and says what to do);
- archives.py: locating the raw files in a file, a folder or a .zip / .tar.gz archive.
"""

from __future__ import annotations

import contextlib
import logging
import re
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from multitab.config.data import LocalConfig, RemoteConfig
from multitab.datasets.download import fetch
from multitab.datasets.schema import DatasetSchema
from multitab.datasets.sources.archives import extract_archive, is_archive_path, locate_in_folder
from multitab.datasets.sources.formats import FORMAT_SUFFIX, SourceError
from multitab.datasets.sources.typed import RawSummary, read_raw_file, read_raw_table, write_raw_parquet
from multitab.files.io import atomic_path, sha256_file
from multitab.files.paths import file_problem, local_path_not_regular, not_regular

log = logging.getLogger(__name__)


def _write_all(
    schema: DatasetSchema,
    files: dict[str, Path],
    out_dir: Path,
    refs: dict[str, dict[str, Any]],
    labels: dict[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Convert each raw file into out_dir/<key>.parquet; on any failure remove what this call wrote."""
    out_dir = Path(out_dir)
    written: list[Path] = []
    info: dict[str, dict[str, Any]] = {}
    try:
        for key in schema.raw_files:
            target = out_dir / f"{key}.parquet"
            with atomic_path(target) as tmp:
                summary = write_raw_parquet(files[key], tmp, schema, key, (labels or {}).get(key))
            written.append(target)
            rows = summary.rows
            _check_dropped_constant(schema, summary, (labels or {}).get(key) or str(files[key]))
            info[key] = {"rows": rows, **refs[key]}
            expected = schema.real_rows.get(key)
            if expected is not None and rows != expected:
                log.warning(
                    "%s/%s: %d rows, the published figure is %d; check that the file is complete and the right "
                    "one",
                    schema.name,
                    key,
                    rows,
                    expected,
                )
    except BaseException:
        for p in written:
            p.unlink(missing_ok=True)
        raise
    return info


def _check_dropped_constant(schema: DatasetSchema, summary: RawSummary, label: str) -> None:
    """The columns the study drops as constant (AliExpress' categorical_1, numerical_58..60) should be: if one
    varies, the file may not be the published release (or the columns are shifted), so say so."""
    for name, (lo, hi) in summary.min_max.items():
        if lo != hi:
            log.warning(
                "%s: column %r varies (%s .. %s) but is constant in the %s release (the study drops it); check that "
                "the columns are the release's",
                label, name, lo, hi, schema.name,
            )


def acquire_local(schema: DatasetSchema, cfg: LocalConfig, out_dir: str | Path) -> dict[str, Any]:
    """Files the user already has: `cfg.path` is a file (one raw file), a folder holding `<key>.csv`,
    `<key>.csv.gz` or `<key>.parquet` per raw file (AliExpress: train, test), or a .zip / .tar.gz of them."""
    where = f"datasets.{schema.name}.local.path in params.yaml"
    if cfg.path is None:
        kind = ("a folder with " + " and ".join(schema.raw_files) + " files" if len(schema.raw_files) > 1
                else "CSV, CSV.gz or Parquet")
        raise SourceError(f"{schema.name}: source is 'local' but {where} is not set; set it to your file ({kind})")
    root = Path(cfg.path)
    if not root.exists():
        raise SourceError(
            f"{root}: no such file or folder ({where}); check the path (relative to the repo root)"
        )
    odd = not_regular(root)
    if odd is not None:
        raise SourceError(local_path_not_regular(f"datasets.{schema.name}.local.path", root, *odd))
    out_dir = Path(out_dir)
    labels: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        if root.is_dir():
            files = locate_in_folder(root, schema, where)
        elif is_archive_path(root):
            # inside out_dir (the output's temporary folder): a kill leaves the extracted members in that
            # temporary, which acquire's next run removes
            out_dir.mkdir(parents=True, exist_ok=True)
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=".extract.", suffix=".tmp", dir=out_dir)))
            extracted = extract_archive(root, schema, tmp)
            files = {k: p for k, (p, _) in extracted.items()}
            labels = {k: lab for k, (_, lab) in extracted.items()}
        elif len(schema.raw_files) == 1:
            files = {schema.raw_files[0]: root}
        else:
            raise SourceError(
                f"{root}: {schema.name} needs the files {list(schema.raw_files)}: point {where} at a folder (or "
                ".zip / .tar.gz) holding them"
            )
        source_sha = sha256_file(root) if root.is_file() else None
        refs = {
            k: {"sha256": source_sha or sha256_file(p), "path": str(root if root.is_file() else p)}
            for k, p in files.items()
        }
        if root.is_file() and is_archive_path(root):
            refs = {k: {**r, "member": files[k].name} for k, r in refs.items()}
        return {"source": "local", "standin": False, "files": _write_all(schema, files, out_dir, refs, labels)}


def _is_url(value: str) -> bool:
    return urlparse(value).scheme in {"http", "https"}


def _cache_name(url: str, fmt: str) -> str:
    name = Path(unquote(urlparse(url).path)).name or "download"
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    suffix = FORMAT_SUFFIX[fmt]
    aliases = {".parquet": (".parquet", ".pq"), ".tar.gz": (".tar.gz", ".tgz")}.get(suffix, (suffix,))
    return name if name.lower().endswith(aliases) else name + suffix


def acquire_remote(
    schema: DatasetSchema, cfg: RemoteConfig, out_dir: str | Path, cache_dir: str | Path
) -> dict[str, Any]:
    """The real files: download `cfg.url` into `cache_dir/<dataset>/` (verified against `cfg.sha256`,
    resumable, reused on a re-run) or take a local archive path, then convert as `acquire_local` does.
    `cfg.format` says what the file is: csv / csv.gz / parquet / arff (one raw file) or zip / tar.gz (an
    archive holding `<key>.csv` etc. per raw file, e.g. AliExpress_NL/train.csv and test.csv)."""
    where = f"datasets.{schema.name}.remote"
    if cfg.url is None:
        hint = (
            "its host needs a login: download AliExpress_NL (train.csv, test.csv) yourself and set "
            f"{where}.url to the archive's path or URL, or use source: local"
            if len(schema.raw_files) > 1
            else f"set {where}.url in params.yaml"
        )
        raise SourceError(f"{schema.name}: source is 'remote' but {where}.url is not set; {hint}")
    is_archive = cfg.format in ("zip", "tar.gz")
    if not is_archive and len(schema.raw_files) > 1:
        raise SourceError(
            f"{where}.format={cfg.format!r} gives one file but {schema.name} needs {list(schema.raw_files)}: "
            "use format zip or tar.gz (an archive holding them)"
        )
    cache = Path(cache_dir) / schema.name
    if _is_url(cfg.url):
        src = fetch(
            cfg.url,
            cache / _cache_name(cfg.url, cfg.format),
            sha256=cfg.sha256,
            retries=cfg.retries,
            backoff_seconds=cfg.backoff_seconds,
            timeout_seconds=cfg.timeout_seconds,
        )
        digest = cfg.sha256.lower() if cfg.sha256 else sha256_file(src)
    else:
        parsed = urlparse(cfg.url)
        if parsed.scheme not in ("", "file"):
            raise SourceError(f"{where}.url={cfg.url!r}: only http(s) URLs or local paths are supported")
        src = Path(unquote(parsed.path) if parsed.scheme == "file" else cfg.url)
        if (problem := file_problem(src)) is not None:  # a directory is named as one, not as missing
            raise SourceError(f"{src}: {problem} ({where}.url); check the path (relative to the repo root)")
        digest = sha256_file(src)
        if cfg.sha256 and digest != cfg.sha256.lower():
            raise SourceError(
                f"{src}: sha256 {digest} does not match {where}.sha256={cfg.sha256}; the file is damaged or a "
                "different version: fetch it again, or update the checksum if you trust this file"
            )
    if not cfg.sha256:
        log.warning(
            "%s: no checksum configured; this file has sha256 %s: pin it as %s.sha256 in params.yaml",
            src,
            digest,
            where,
        )
    labels: dict[str, str] = {}
    if is_archive:
        extracted = extract_archive(src, schema, cache / f"{src.name}.{digest[:12]}")
        files = {k: p for k, (p, _) in extracted.items()}
        labels = {k: lab for k, (_, lab) in extracted.items()}
        refs = {k: {"sha256": digest, "url": cfg.url, "member": p.name} for k, p in files.items()}
    else:
        files = {schema.raw_files[0]: _as_kind(src, cfg.format)}
        refs = {schema.raw_files[0]: {"sha256": digest, "url": cfg.url}}
    return {
        "source": "remote",
        "standin": False,
        "files": _write_all(schema, files, Path(out_dir), refs, labels),
    }


def _as_kind(src: Path, fmt: str) -> Path:
    """`src` itself, checked to be named for its format (the reader picks the parser by the name)."""
    name = src.name.lower()
    suffix = FORMAT_SUFFIX[fmt]
    if name.endswith(suffix) or (fmt == "parquet" and name.endswith(".pq")):
        return src
    raise SourceError(
        f"{src}: remote.format is {fmt!r} but the file name does not end in {suffix}; rename it"
    )


__all__ = [
    "SourceError",
    "acquire_local",
    "acquire_remote",
    "read_raw_file",
    "read_raw_table",
]
