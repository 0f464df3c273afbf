"""Shared argument handling and error reporting for the stage scripts (and the two validation stages)."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import errno
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from multitab.config import ConfigError, Params, load_params
from multitab.files.integrity import verify_stage_inputs
from multitab.files.io import remove_stale_temporaries, write_json
from multitab.files.paths import os_error_line
from multitab.runtime.exit_codes import BAD_INPUT, INTERRUPTED
from multitab.runtime.process import ctrl_c_raises, stop_with_parent

if TYPE_CHECKING:
    from multitab.validation import Outcome


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    return p


def run(stage: str, body: Callable[[], object], outputs: Sequence[Path] = (), stems: Sequence[Path] = ()) -> int:
    """Run a stage body; turn library errors into one clear line on stderr (`[stage] error: ...`).

    First the debris of a killed earlier attempt goes: the temporaries beside each of `outputs` (files or
    folders written with multitab.files.io's atomic writers), and in each folder of `stems` (`folder/stem`) those
    of the stage's files whose names start with the stem (its files in a folder other stages write to).
    Then, when DVC runs the stage, the outputs of other stages that it depends on are checked against the
    hashes their producer recorded in dvc.lock (multitab.files.integrity): a corrupted one is bad input, named
    with what to do.

    Exit status: `BAD_INPUT` for what a retry cannot fix (ValueError, including ConfigError; KeyError; a
    missing file, a file it may not read, a path that is a folder or loops), 1 for the rest (other OS
    errors, RuntimeError such as an out-of-memory error), which flows.pipeline retries; 130 after Ctrl-C
    (one line, no traceback; the stage's outputs are written atomically, so nothing half-written stays;
    flows.pipeline does not retry it), also for a Ctrl-C during the stage's imports (stages/__init__.py).
    """
    logging.basicConfig(level=logging.INFO, format=f"[{stage}] %(levelname)s %(name)s: %(message)s")
    stop_with_parent()  # a stage never outlives the `dvc repro` that started it (multitab.runtime.process)
    try:
        ctrl_c_raises()
        for path in outputs:
            for p in remove_stale_temporaries(path.parent, path.name):
                logging.getLogger(__name__).info("removed %s (left by a killed earlier run)", p)
        for path in stems:
            remove_stale_temporaries(path.parent, stems=(path.name,))
        verify_stage_inputs()
        body()
    except (ValueError, KeyError) as e:
        print(f"[{stage}] error: {e}", file=sys.stderr)
        return BAD_INPUT
    except OSError as e:
        print(f"[{stage}] error: {os_error_line(e)}", file=sys.stderr)
        return os_error_status(e)
    except RuntimeError as e:
        print(f"[{stage}] error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return interrupted(stage)
    return 0


def exit_without_teardown(code: int) -> NoReturn:
    """End the stage's process with `code` once `run` has returned: the exit handlers run (logging's flush,
    finalizers), then the process ends without the interpreter's teardown of torch, pandas and the rest
    (0.5-1 s of a train stage's time after its result, 2-3 s on a busy machine; benchmarks/stage_overhead.py),
    which frees memory the kernel frees anyway. Every output is written whole and durably before `run`
    returns, so nothing is lost."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def interrupted(stage: str) -> int:
    """Ctrl-C in a stage: one line, exit status INTERRUPTED (130), which flows.pipeline does not retry."""
    print(f"[{stage}] interrupted (Ctrl-C); run again to continue", file=sys.stderr)
    return INTERRUPTED


# OS errors that a retry cannot change: the path is not there, may not be read or written, is a folder
# where a file should be (or the reverse), loops, or is too long.
_INPUT_ERRNOS = {errno.ENOENT, errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.ELOOP,
                 errno.ENAMETOOLONG, errno.EROFS}


def os_error_status(e: OSError) -> int:
    """BAD_INPUT for an OS error that a retry cannot change (see _INPUT_ERRNOS), else 1 (retried)."""
    deterministic = isinstance(e, FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError)
    return BAD_INPUT if deterministic or e.errno in _INPUT_ERRNOS else 1



def add_validation_args(p: argparse.ArgumentParser) -> None:
    """The options both validation stages take."""
    p.add_argument("--out", required=True, help="verdict JSON, written only if the data passes")
    p.add_argument("--context", default="gx", help="Great Expectations context folder (default: gx)")
    p.add_argument(
        "--report", default="reports/validation", help="Data Docs folder (default: reports/validation)"
    )
    p.add_argument("--warn-only", action="store_true", help="report failures but pass (exploration only)")


def run_validation(stage: str, body: Callable[[Params], Outcome], out: str, warn_only: bool, params_path: str) -> int:
    """Read params (once), run a validation; print its summary; write the verdict on success (or
    --warn-only); exit status."""
    logging.basicConfig(level=logging.INFO, format=f"[{stage}] %(levelname)s %(name)s: %(message)s")
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    stop_with_parent()
    try:
        ctrl_c_raises()
        remove_stale_temporaries(Path(out).parent, Path(out).name)  # of a verdict write that was killed
        verify_stage_inputs()
        params = load_params(params_path)
        outcome = body(params)
    except (ConfigError, ValueError, KeyError, FileNotFoundError) as e:
        print(f"[{stage}] error: {e}", file=sys.stderr)
        return BAD_INPUT
    except OSError as e:  # may be transient (a full disk, a network folder): retried, unless it cannot change
        print(f"[{stage}] error: {os_error_line(e)}", file=sys.stderr)
        return os_error_status(e)
    except KeyboardInterrupt:
        return interrupted(stage)
    max_failures = params.validation.report.max_failures
    print(outcome.summary(max_failures), file=sys.stdout if outcome.success else sys.stderr)
    if outcome.success or warn_only:
        write_json(out, outcome.verdict(warn_only=warn_only))
        if not outcome.success:
            print(f"[{stage}] --warn-only: verdict {out} written with success=false", file=sys.stderr)
        return 0
    print(
        f"[{stage}] no verdict written ({out}): fix the data, or the thresholds in params.yaml (validation:)",
        file=sys.stderr,
    )
    # Last, one line the orchestration reports as the cause: the first failed expectation.
    fails = outcome.failures
    more = f" (and {len(fails) - 1} more)" if len(fails) > 1 else ""
    print(f"[{stage}] error: validation failed: {fails[0].line()}{more}", file=sys.stderr)
    return BAD_INPUT
