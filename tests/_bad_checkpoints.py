"""Files that are not checkpoints, for every checkpoint loader's tests: random bytes, a checkpoint cut short
(torch.save writes a zip archive: its end, the central directory, is missing), a checkpoint whose pickle
calls a function (loading it the unsafe way runs code: it writes `marker`), and a directory where the file
belongs."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch

WHY = {  # what each one is called
    "random bytes": "unreadable (truncated or corrupt",
    "truncated zip": "unreadable (truncated or corrupt",
    "pickled callable": "refused: it holds pickled Python code or objects",
    "directory": "is a directory, not a file",
}


class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def bad_checkpoints(folder: Path, good: dict[str, Any], marker: Path) -> dict[str, Path]:
    """Each kind of WHY in `folder`, built from the checkpoint dict `good`."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {kind: folder / f"{kind.replace(' ', '_')}.ckpt" for kind in WHY}
    paths["random bytes"].write_bytes(random.Random(0).randbytes(4096))
    torch.save(good, paths["truncated zip"])
    whole = paths["truncated zip"].read_bytes()
    paths["truncated zip"].write_bytes(whole[: len(whole) // 2])
    torch.save({**good, "hook": _RunsCode(marker)}, paths["pickled callable"])
    paths["directory"].mkdir()
    return paths
