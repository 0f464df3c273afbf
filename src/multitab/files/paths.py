"""Why a path cannot be read as the file it should be, in words for a message: missing, a folder, a named pipe
or a device, a permission; and the one line for an OSError that names a path."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def file_problem(path: str | Path) -> str | None:
    """Why `path` cannot be read as a file, to follow the path in a message ("does not exist", "is a
    directory, not a file", ...); None when it is a file. A directory where a file belongs is named as one,
    not as a missing file."""
    try:
        mode = Path(path).stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "does not exist"
    except OSError as e:  # a symlink loop, a folder on the way it may not enter
        return os_error_line(e).removeprefix(f"{e.filename}: ") if e.filename is not None else str(e)
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    return None if stat.S_ISREG(mode) else "is not a regular file"


def os_error_line(e: OSError) -> str:
    """`path: what` for an OSError that names a path (without Python's `[Errno N]`), else its text."""
    if e.filename is not None and e.strerror:
        what = e.strerror[0].lower() + e.strerror[1:]
        hint = {errno.EACCES: "; check the file's permissions", errno.EPERM: "; check the file's permissions",
                errno.EROFS: "; the file system is read-only"}.get(e.errno or 0, "")
        return f"{e.filename}: {what}{hint}"
    return str(e)


_NOT_REGULAR = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
                (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def not_regular(path: str | Path) -> tuple[Path, str] | None:
    """The first entry at or under `path` (a folder's files too; symbolic links followed) that is neither a
    regular file nor a folder, with what it is ("a named pipe (FIFO)", ...); None when there is none or
    `path` does not exist. Reading a named pipe waits for a writer, forever if none comes (DVC hashing
    such a dependency hangs); a device may never end."""
    root = Path(path)
    entries = [root]
    if root.is_dir():
        entries += sorted(Path(folder) / name for folder, _, names in os.walk(root) for name in names)
    for entry in entries:
        try:
            mode = entry.stat().st_mode
        except OSError:  # gone, or a broken link: whoever reads it says so
            continue
        for test, what in _NOT_REGULAR:
            if test(mode):
                return entry, what
    return None


def local_path_not_regular(key: str, path: Path, entry: Path, what: str) -> str:
    """The one line for a params path (`key`) that is, or holds, an entry `not_regular` found."""
    inside = "" if entry == path else f" holds {entry}, which"
    return (f"{key}: {path}{inside} is {what}, not a file or folder: reading it would wait forever (DVC hashes "
            "it as a dependency); point the key at the data file, or at a folder of data files")
