"""Locating the raw files of a `local` / `remote` source: a file, a folder, or a .zip / .tar.gz archive
(members extracted safely into a temporary folder)."""

from __future__ import annotations

import logging
import shutil
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import IO, Any

from multitab.datasets.schema import DatasetSchema
from multitab.datasets.sources.formats import ARCHIVE_SUFFIXES, DATA_SUFFIXES, SourceError
from multitab.files.io import atomic_path

log = logging.getLogger(__name__)


def _candidates(key: str) -> set[str]:
    return {f"{key}{s}" for s in DATA_SUFFIXES}


def is_archive_path(path: Path) -> bool:
    return path.name.lower().endswith(ARCHIVE_SUFFIXES)


def locate_in_folder(folder: Path, schema: DatasetSchema, where: str) -> dict[str, Path]:
    files = sorted(p for p in folder.iterdir() if p.is_file())
    found: dict[str, Path] = {}
    for key in schema.raw_files:
        hits = [p for p in files if p.name.lower() in _candidates(key)]
        if not hits and len(schema.raw_files) == 1:
            hits = [p for p in files if p.name.lower().endswith(DATA_SUFFIXES)]
        if len(hits) != 1:
            what = "no" if not hits else f"{len(hits)} ({[p.name for p in hits]})"
            listing = [p.name for p in files][:30]
            folders = sorted(p.name for p in folder.iterdir() if p.name.lower() in _candidates(key) and p.is_dir())
            named = f" ({', '.join(folders)}: a directory, not a file)" if folders and not hits else ""
            raise SourceError(
                f"{folder}: found {what} file(s){named} for {schema.name!r} raw file {key!r}; expected exactly one "
                f"of {sorted(_candidates(key))} ({where}). The folder holds {len(files)} file(s): "
                f"{listing}{' ...' if len(files) > 30 else ''}; rename or move the file, or point the path at it"
            )
        found[key] = hits[0]
    return found


_ARCHIVE_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, tarfile.TarError, EOFError, zlib.error, OSError)


def extract_archive(archive: Path, schema: DatasetSchema, dest_dir: Path) -> dict[str, tuple[Path, str]]:
    """Extract the member for each raw file (e.g. AliExpress_NL/train.csv) into `dest_dir`; members already
    there with the right size are reused. Returns raw file -> (extracted path, `archive:member` label).
    A damaged archive (cut short, bad CRC, bad compressed data) raises SourceError naming archive and member."""
    is_zip = archive.name.lower().endswith(".zip")
    what = "zip" if is_zip else "tar"
    try:
        if is_zip:
            with zipfile.ZipFile(archive) as z:
                members = {i.filename: i.file_size for i in z.infolist() if not i.is_dir()}
                return _extract_members(archive, schema, dest_dir, members, lambda m: z.open(m))
        with tarfile.open(archive, "r:*") as t:
            tar_members = {m.name: m for m in t.getmembers() if m.isfile()}

            def open_member(m: str) -> IO[bytes]:
                f = t.extractfile(tar_members[m])
                assert f is not None  # regular files only
                return f

            sizes = {n: m.size for n, m in tar_members.items()}
            return _extract_members(archive, schema, dest_dir, sizes, open_member)
    except _MemberError as e:
        raise SourceError(
            f"{archive}:{e.member}: the archive member is damaged ({e.cause}); the archive was cut short or "
            "corrupted (an interrupted download or copy): download or copy it again"
        ) from e.cause
    except _ARCHIVE_ERRORS as e:
        raise SourceError(
            f"{archive}: not a readable {what} archive ({type(e).__name__}: {e}); it is cut short or damaged (an "
            "interrupted download or copy): download or copy it again"
        ) from e


class _MemberError(Exception):
    def __init__(self, member: str, cause: BaseException) -> None:
        super().__init__(member)
        self.member = member
        self.cause = cause


def _extract_members(
    archive: Path, schema: DatasetSchema, dest_dir: Path, members: dict[str, int], open_member: Any
) -> dict[str, tuple[Path, str]]:
    usable = {m: s for m, s in members.items() if "__MACOSX" not in m and not Path(m).name.startswith("._")}
    found: dict[str, tuple[Path, str]] = {}
    for key in schema.raw_files:
        hits = sorted(m for m in usable if Path(m).name.lower() in _candidates(key))
        if len(hits) != 1:
            listing = sorted(usable)[:20]
            raise SourceError(
                f"{archive}: found {len(hits)} member(s) for {schema.name!r} raw file {key!r} "
                f"({hits or 'none'}); expected exactly one named like {sorted(_candidates(key))}. "
                f"Members: {listing}{' ...' if len(usable) > 20 else ''}"
            )
        member = hits[0]
        out = dest_dir / Path(member).name
        if not (out.exists() and out.stat().st_size == usable[member]):
            log.info("%s: extracting %s -> %s", archive, member, out)
            try:
                with atomic_path(out) as tmp, open_member(member) as src, open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst, 16 << 20)
            except _ARCHIVE_ERRORS as e:
                raise _MemberError(member, e) from e
        found[key] = (out, f"{archive}:{member}")
    return found
