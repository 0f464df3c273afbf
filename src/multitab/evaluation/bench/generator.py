"""Which MultiTab-Bench generator a record's datasets came from, for its header.

The generator (multitab.datasets.bench) carries no version number of its own; its versions are the commits
that changed what it draws from a seed. Only one has: 7df1fcf (docs/deviations.md D13) replaced
W = Q Λ^½ Uᵀ by W = P^½ Uᵀ, the same distribution but other labels from the same seed on every
configuration of Figures 5 and 6 (the features x are the same). A record's version follows from whether
its commit descends from that one.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

V2_SINCE = "7df1fcf"
VERSIONS = {
    "v1": f"W = Q Λ^½ Uᵀ, before {V2_SINCE}; Q is eigh's basis of P's repeated eigenvalue, which depends on "
          "the BLAS kernel",
    "v2": f"W = P^½ Uᵀ, since {V2_SINCE}; docs/deviations.md D13; today's",
}
CURRENT = "v2"


def git_descends(commit: str, ancestor: str, cwd: str | Path = ".") -> bool | None:
    """Whether `commit` descends from `ancestor` in the git history at `cwd` (None: git cannot tell)."""
    try:
        done = subprocess.run(["git", "merge-base", "--is-ancestor", ancestor, commit], cwd=cwd,
                              capture_output=True, timeout=30, check=False)
    except OSError:
        return None
    return {0: True, 1: False}.get(done.returncode)


def version_of(commit: str, descends: Callable[[str, str], bool | None] = git_descends) -> str | None:
    """The generator version a run at `commit` used, or None when the history cannot tell."""
    after = descends(commit, V2_SINCE)
    return None if after is None else ("v2" if after else "v1")


def header_line(version: str | None) -> str:
    """The header.md line that names the generator; a version other than today's says what does not
    reproduce."""
    if version is None:
        return "- Generator: MultiTab-Bench, version unknown (the commit is not in this history)."
    line = f"- Generator: MultiTab-Bench {version} ({VERSIONS[version]})."
    if version != CURRENT:
        line += (f" Today's generator ({CURRENT}) draws other labels from the same seeds, so today's code "
                 "would not reproduce this record's per-run numbers (test and validation EV, Δm, epochs, "
                 "curves); its tables and verdicts regenerate from its CSVs.")
    return line


def generator_line(commit: str) -> str:
    """The header line naming the generator version the runs at `commit` used."""
    return header_line(version_of(commit))
