"""Download a pretrained checkpoint named in params (`icl.checkpoints.<name>`: `hub_repo`, `hub_file`)
from the model hub into .cache/icl and print its path and sha256, to pin in params.yaml.

    python -m multitab.icl.fetch orion_msp [--params params.yaml] [--sha256 <expected>]

With `--sha256` (or a pinned `sha256` in params) a different file is refused and removed from the cache."""

from __future__ import annotations

import argparse
import sys

from multitab.config import load_params
from multitab.icl.checkpoint import CheckpointError, fetch, sha256_of


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("name", help="a key of icl.checkpoints (orion_msp, tabicl, tabicl_regressor)")
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--sha256", default=None, help="expected sha256 (default: the pin in params)")
    p.add_argument("--cache", default=".cache/icl")
    args = p.parse_args(argv)
    try:
        entry = load_params(args.params).icl.checkpoints[args.name]
    except KeyError:
        print(f"error: no icl.checkpoints.{args.name} in {args.params}", file=sys.stderr)
        return 3
    if not entry.hub_repo or not entry.hub_file:
        print(f"error: icl.checkpoints.{args.name} names no hub_repo / hub_file", file=sys.stderr)
        return 3
    pin = args.sha256 or entry.sha256
    try:
        path = fetch(entry.hub_repo, entry.hub_file, sha256=pin, cache_dir=args.cache)
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    # the file and its hash (on a first fetch, the value to pin in params)
    print(f"{path}\nsha256 {sha256_of(path)}" + ("" if pin else " (not pinned yet: pin it in params)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
