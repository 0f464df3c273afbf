"""Exit codes of the stage scripts (`python -m stages.<name>`) that the orchestration acts on.

A stage that fails because of its input (a failed validation, a schema or config mismatch, a malformed
file) fails the same way however often it runs: it exits with `BAD_INPUT`, and flows.pipeline fails it at
once instead of retrying. Any other non-zero status (1 for an unexpected error, a signal for a kill or an
out-of-memory kill, a DVC lock error) may succeed on a retry and is retried, except `INTERRUPTED`: a
stage stopped by Ctrl-C (someone stopped it; the next run continues it).
"""

from __future__ import annotations

BAD_INPUT = 3  # deterministic: validation, schema or bad input; a retry cannot help
INTERRUPTED = 130  # 128 + SIGINT: Ctrl-C; not retried
