"""stages/_common.exit_without_teardown: a stage's process ends with its exit code once its exit handlers have
run and its output is flushed, without the interpreter's teardown (what took a train stage seconds after its
result on a busy machine)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_exit_handlers_run_the_output_is_flushed_and_the_teardown_is_skipped(tmp_path):
    script = textwrap.dedent(f"""
        import atexit, sys
        from pathlib import Path
        from stages._common import exit_without_teardown

        class Teardown:
            def __del__(self):  # runs when the interpreter tears its modules down
                Path({str(tmp_path / "teardown")!r}).touch()

        kept = Teardown()
        atexit.register(lambda: Path({str(tmp_path / "atexit")!r}).touch())
        sys.stdout.write("the result, not yet flushed")
        exit_without_teardown(3)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "the result, not yet flushed"
    assert (tmp_path / "atexit").exists() and not (tmp_path / "teardown").exists()
