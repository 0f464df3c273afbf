"""Stages scheduled by the memory they are expected to need, and a stage the kernel killed named as
probably out of memory. No Prefect here (flows/orchestrate.py calls it).

Each stage's peak resident memory is measured from outside: the flow waits for its `dvc repro` with
wait4(2), whose ru_maxrss is the largest resident set of that process and of every process below it that
ended (DVC, the shell, the stage's command), the kernel's own count. The peaks are kept per stage in a
small state file (`orchestration.stage_memory`, this machine's): a stage that ran records its peak, a
failed attempt raises it (a stage killed for memory needed at least that). The next run expects that peak
again; a stage that never ran here is expected to need at least its input data's size on disk (the files
other stages or .dvc files produce that it reads: a training run holds its processed split in memory).

Admission (`MemoryBudget`): a stage starts only while the expected peaks of the stages running and its
own fit in the budget (`orchestration.memory_budget_gb`; null: the memory available when the run
starts, the cgroup's limit when lower), so two stages whose peaks together exceed it run one after the
other; a stage expected to need more than the whole budget still runs, alone. A retry of a stage first
waits until its (raised) expectation fits.

A stage's command killed by SIGKILL (exit -9, or 137 through a shell) is described as probably out of
memory: its peak, the machine's memory and limit, whether the kernel counted an out-of-memory kill
meanwhile (/proc/vmstat oom_kill), what to set, and how to get its previous outputs back.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from multitab.files.io import write_json

GB = 1e9
# a stage's exit status when its command was killed by SIGKILL: -9 (waited for directly) or 128 + 9 (through
# a shell that did not exec the command: dash)
SIGKILL_CODES = (-signal.SIGKILL, 128 + signal.SIGKILL)
_CGROUP_LIMITS = ("memory.max", "memory.limit_in_bytes")  # cgroup v2, v1
_UNLIMITED = 1 << 60


def killed_by_sigkill(code: int | None) -> bool:
    return code in SIGKILL_CODES


# ------------------------------------------------------------------------------------- the machine


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes (empty off Linux)."""
    out: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    except OSError:
        pass
    return out


def cgroup_limit() -> tuple[int, str] | None:
    """The memory limit of this process's cgroup (v2 memory.max, v1 memory.limit_in_bytes) and the file
    that says it, or None when there is none."""
    try:
        entries = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for entry in entries:
        _, controllers, path = entry.split(":", 2)
        if controllers not in ("", "memory") and "memory" not in controllers.split(","):
            continue
        base = Path("/sys/fs/cgroup") if controllers == "" else Path("/sys/fs/cgroup/memory")
        for folder in (base / path.lstrip("/"), base):  # the path may be outside this namespace's mount
            for name in _CGROUP_LIMITS:
                file = folder / name
                try:
                    text = file.read_text().strip()
                except OSError:
                    continue
                if text.isdigit() and int(text) < _UNLIMITED:
                    return int(text), str(file)
                break
    return None


def oom_kills() -> int | None:
    """The kernel's count of out-of-memory kills since boot (/proc/vmstat oom_kill), None where unknown."""
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def default_budget() -> int:
    """The memory available now (MemAvailable), or the cgroup's limit when lower."""
    available = meminfo().get("MemAvailable", 0)
    limit = cgroup_limit()
    if limit is not None:
        available = min(available, limit[0]) if available else limit[0]
    return available


def _gb(n: float) -> str:
    return f"{n / GB:.1f} GB"


# ------------------------------------------------------------------------------------- the record


def read_record(path: Path) -> dict[str, int]:
    """{stage: peak bytes} of the state file; empty when it is absent or unreadable (it is rebuilt)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    peaks = data.get("peak_rss_bytes") if isinstance(data, dict) else None
    return {str(k): int(v) for k, v in (peaks or {}).items() if isinstance(v, int | float)}


def input_bytes(root: Path, paths: Iterable[str]) -> int:
    """Bytes on disk of the files and folders `paths` (relative to `root`; missing ones count 0)."""
    total = 0
    for p in paths:
        path = root / p
        if path.is_file():
            total += path.stat().st_size
        elif path.is_dir():
            total += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return total


class MemoryBudget:
    """The stages running and the memory they are expected to need; the record of measured peaks."""

    def __init__(self, root: Path, record: Path, budget: int, inputs: dict[str, tuple[str, ...]] | None = None,
                 workers: int = 1) -> None:
        self.root, self.record, self.budget, self.workers = Path(root), Path(record), int(budget), workers
        self.inputs = inputs or {}
        self.peaks = read_record(self.root / self.record)
        self.reserved: dict[str, int] = {}
        self.assumed: dict[str, int] = {}  # what each stage was expected to need when it started
        self.measured: dict[str, int] = {}  # this run's peaks (the summary reports them)
        self._cond = threading.Condition()

    def expected(self, stage: str) -> int:
        """The stage's recorded peak, else the size of its input data (a floor)."""
        if stage in self.peaks:
            return self.peaks[stage]
        return input_bytes(self.root, self.inputs.get(stage, ()))

    def _fits(self, stage: str, need: int) -> bool:
        others = sum(v for k, v in self.reserved.items() if k != stage)
        return not any(k != stage for k in self.reserved) or others + need <= self.budget

    def try_reserve(self, stage: str) -> bool:
        """Reserve the stage's expected peak if it fits beside the stages running (or nothing runs)."""
        need = self.expected(stage)
        with self._cond:
            if not self._fits(stage, need):
                return False
            self.reserved[stage] = self.assumed[stage] = need
            return True

    def wait_to_fit(self, stage: str, stopping: threading.Event | None = None) -> None:
        """Block until the stage's expected peak (raised by a failed attempt) fits beside the others."""
        need = self.expected(stage)
        with self._cond:
            while not self._fits(stage, need) and not (stopping is not None and stopping.is_set()):
                self._cond.wait(timeout=1.0)
            self.reserved[stage] = self.assumed[stage] = need

    def release(self, stage: str) -> None:
        with self._cond:
            self.reserved.pop(stage, None)
            self._cond.notify_all()

    def measure(self, stage: str, peak: int | None, *, ran: bool, failed: bool) -> None:
        """Keep what an attempt measured: a stage that ran records its peak, a failed attempt raises the
        recorded peak to its own. The state file is rewritten (atomically) at once, so a run that is
        stopped keeps what it learnt."""
        if peak is None or not (ran or failed):
            return
        with self._cond:
            self.measured[stage] = max(self.measured.get(stage, 0), peak)
            self.peaks[stage] = max(self.peaks.get(stage, 0), peak) if failed else peak
            peaks = dict(sorted(self.peaks.items()))
        try:
            note = "each stage's peak resident memory on this machine (flows/memory.py)"
            write_json(self.root / self.record, {"peak_rss_bytes": peaks, "note": note})
        except OSError:
            pass  # a read-only results/: this run still schedules by what it measured


def out_of_memory_line(stage: str, code: int, peak: int | None, kills_before: int | None,
                       budget: MemoryBudget | None) -> str:
    """`killed by SIGKILL (exit -9): probably out of memory; ...`: the evidence (the kernel's count of
    out-of-memory kills, the stage's peak), the machine's memory and limit, what to set, and that
    `dvc checkout <stage>` restores the outputs DVC removed."""
    parts = [f"killed by SIGKILL (exit {code}): probably out of memory"]
    kills = oom_kills()
    if kills is not None and kills_before is not None:
        if kills > kills_before:
            parts.append("the kernel's out-of-memory killer struck meanwhile "
                         f"(/proc/vmstat oom_kill {kills_before} -> {kills})")
        else:
            parts.append("the kernel counted no out-of-memory kill meanwhile (/proc/vmstat oom_kill): if nobody "
                         "stopped it by hand, a container's limit may have")
    if peak is not None:
        parts.append(f"its largest process had reached {_gb(peak)} resident")
    elif budget is not None and stage in budget.peaks:
        parts.append(f"its recorded peak: {_gb(budget.peaks[stage])}")
    info = meminfo()
    machine = f"this machine has {_gb(info['MemTotal'])}" if "MemTotal" in info else "this machine's memory is unknown"
    limit = cgroup_limit()
    if limit is not None:
        machine += f", limit {_gb(limit[0])} ({limit[1]})"
    if "MemAvailable" in info:
        machine += f", {_gb(info['MemAvailable'])} available now"
    if budget is not None:
        machine += f"; this run: memory budget {_gb(budget.budget)}, {budget.workers} stage(s) at once"
    parts.append(machine)
    parts.append("to fit: fewer stages at once (--workers, orchestration.workers) or a lower "
                 "orchestration.memory_budget_gb; for a training stage also a smaller train.batch_size or "
                 "train.max_train_rows")
    # DVC removed the stage's outputs before its command (dvc/stage/__init__.py, Stage.run) and a failed
    # run leaves dvc.lock as it was, so the cached version it records is the previous output
    parts.append(f"its previous outputs are in DVC's cache: `dvc checkout {stage}` restores them")
    return "; ".join(parts)


# The budget of the flow run in progress in this process (its tasks run in this process's threads), set by
# the flow; a module attribute, so that a served deployment's pickled tasks find it by name.
ACTIVE: MemoryBudget | None = None


def start(root: Path, record: str, budget_gb: float | None, inputs: dict[str, tuple[str, ...]], workers: int
          ) -> MemoryBudget:
    """The run's budget (`budget_gb`, else `default_budget()`), made the active one."""
    global ACTIVE
    budget = int(budget_gb * GB) if budget_gb is not None else default_budget()
    ACTIVE = MemoryBudget(root, Path(record), budget or _UNLIMITED, inputs, workers)
    return ACTIVE


def describe(budget: MemoryBudget) -> str:
    """One log line: the budget and where it came from."""
    return f"memory budget {_gb(budget.budget)} ({len(budget.peaks)} stage peak(s) known from {budget.record})"


def summary_fields(budget: MemoryBudget | None, stage: str) -> dict[str, Any]:
    """The summary's memory fields of a stage: its measured peak this run and what it was expected to need."""
    if budget is None:
        return {}
    return {"peak_rss_bytes": budget.measured.get(stage), "expected_peak_bytes": budget.assumed.get(stage)}


# A stage process's exit: its status and the largest resident set below it (wait4's ru_maxrss: kB on Linux).
def wait_peak(pid: int) -> tuple[int, int]:
    _, status, usage = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024
