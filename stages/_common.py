"""Shared argument handling and error reporting for the stage scripts."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

from multitab.exit_codes import BAD_INPUT


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    return p


def run(stage: str, body: Callable[[], object]) -> int:
    """Run a stage body; turn library errors into one clear line on stderr (`[stage] error: ...`).

    Exit status: `BAD_INPUT` for what a retry cannot fix (ValueError, including ConfigError; KeyError; a
    missing file), 1 for the rest (other OS errors, RuntimeError such as an out-of-memory error), which
    flows.pipeline retries.
    """
    logging.basicConfig(level=logging.INFO, format=f"[{stage}] %(levelname)s %(name)s: %(message)s")
    try:
        body()
    except (ValueError, KeyError, FileNotFoundError) as e:
        print(f"[{stage}] error: {e}", file=sys.stderr)
        return BAD_INPUT
    except (OSError, RuntimeError) as e:
        print(f"[{stage}] error: {e}", file=sys.stderr)
        return 1
    return 0
