"""Pretrained checkpoints: a local file, or a model hub file fetched into a cache, each checked against the
sha256 pinned in params before anything reads it; loaded as tensors and plain data only
(multitab.files.checkpoint: nothing in the file can run code, and a file that cannot be read so is one line
naming it)."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

from multitab.files.checkpoint import CheckpointError, load_plain
from multitab.files.paths import file_problem

__all__ = ["CheckpointError", "HubUnreachable", "fetch", "load", "sha256_of", "verify"]

log = logging.getLogger(__name__)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(path: Path, sha256: str | None) -> str:
    """The file's sha256; a CheckpointError naming both hashes when `sha256` is given and differs."""
    problem = file_problem(path)
    if problem == "does not exist":
        raise CheckpointError(f"checkpoint {path} does not exist (docs/icl.md says how to get one)")
    if problem is not None:
        raise CheckpointError(f"checkpoint {path} {problem}; point its `path` in params.yaml (icl.checkpoints) "
                              "at the checkpoint file")
    found = sha256_of(path)
    if sha256 is not None and found != sha256.lower():
        raise CheckpointError(f"checkpoint {path} is not the pinned file: expected sha256 {sha256.lower()}, "
                              f"found {found}; fetch the pinned file or update the pin in params.yaml")
    return found


def load(path: str | Path, sha256: str | None) -> tuple[dict[str, Any], str]:
    """The checkpoint dict in `path` (checked against `sha256` when given) and the file's sha256."""
    path = Path(path)
    found = verify(path, sha256)
    checkpoint = load_plain(path)
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"checkpoint {path} holds a {type(checkpoint).__name__}, not a dict")
    return checkpoint, found


def fetch(repo_id: str, filename: str, *, sha256: str | None, cache_dir: str | Path,
          revision: str | None = None) -> tuple[Path, str]:
    """`filename` of hub repository `repo_id` at `revision` (None: the default branch), downloaded into
    `cache_dir` with huggingface_hub (endpoint: the HF_ENDPOINT environment variable when set) and checked
    against `sha256`, and the commit it came from. A file that is not the pinned one is removed from the
    cache and refused; `sha256=None` (a first fetch, to learn the hash to pin): no check. The hub is asked
    once, without retries, before anything is downloaded: an unreachable hub is a HubUnreachable at once."""
    import httpx2
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    endpoint = os.environ.get("HF_ENDPOINT") or None
    where = f"{repo_id}/{filename} at revision {revision or 'main'}"
    try:
        meta = get_hf_file_metadata(hf_hub_url(repo_id, filename, revision=revision, endpoint=endpoint), timeout=30)
        commit = meta.commit_hash or revision or "main"
        path = Path(hf_hub_download(repo_id=repo_id, filename=filename, revision=commit,
                                    cache_dir=str(cache_dir), endpoint=endpoint))
    except (OfflineModeIsEnabled, LocalEntryNotFoundError, httpx2.TransportError) as e:
        raise HubUnreachable(f"the model hub ({endpoint or 'https://huggingface.co'}) cannot be reached for "
                             f"{where} ({' '.join(str(e).split())[:160]})") from None
    except (RevisionNotFoundError, RepositoryNotFoundError, EntryNotFoundError) as e:
        raise CheckpointError(f"the model hub has no {where} ({type(e).__name__})") from None
    except HfHubHTTPError as e:
        raise HubUnreachable(f"the model hub answered {' '.join(str(e).split())[:160]} for {where}") from None
    try:
        verify(path, sha256)
    except CheckpointError:
        found = sha256_of(path) if path.is_file() else "none"
        path.resolve().unlink(missing_ok=True)  # the blob, so that a later fetch downloads again
        path.unlink(missing_ok=True)
        raise CheckpointError(f"the hub's {where} is not the pinned file: expected sha256 {sha256}, found "
                              f"{found}; it was removed from {cache_dir}") from None
    log.info("checkpoint %s/%s at %s (commit %s, sha256 %s)", repo_id, filename, path, commit, sha256)
    return path, commit


class HubUnreachable(CheckpointError):
    """The model hub cannot be reached (offline, refused, timed out, or an error status)."""
