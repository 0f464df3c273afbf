"""One case of benchmarks/train_memory.py: a project folder holding one MMoE run over a processed stand-in
folder, its train stage run in a child process that marks the first optimiser step, the phases before it and
each evaluation, and the case's record from those marks and the child's rusage. A module beside the script,
not a script.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from _train_memory_data import tensor_bytes
from multitab.config import read_yaml
from multitab.datasets.schema import SCHEMAS

MODEL = "mmoe"


def write_project(root: Path, repo: Path, dataset: str, data: Path, threads: int | None) -> str:
    """A project folder holding one run (run group `memory`: `dataset` x mmoe x seed 0, one epoch, every
    training row, CPU) over the processed folder `data`; returns the run's key."""
    params = read_yaml(repo / "params.yaml")
    params["train"].update(device="cpu", max_epochs=1, max_train_rows=None, progress=False)
    if threads is not None:
        params["train"]["num_threads"] = threads
    params["runs"] = {"memory": {"data": {"datasets": [dataset]}, "models": [MODEL], "seeds": [0], "train": {}}}
    for section in ("study", "attribution"):  # their run groups are replaced
        params.pop(section, None)
    root.mkdir(parents=True)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (root / "hparams").symlink_to(repo / "hparams")
    (root / "data" / "processed").mkdir(parents=True)
    (root / "data" / "processed" / dataset).symlink_to(data)
    (root / "data" / "validated").mkdir(parents=True)
    (root / "data" / "validated" / f"{dataset}.json").write_text(json.dumps({"success": True}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), str(repo / "src")])}
    subprocess.run([sys.executable, "-m", "multitab.runs", "--params", str(root / "params.yaml")], cwd=root,
                   env=env, check=True, capture_output=True)
    return f"memory-{dataset}-{MODEL}-0"


# The child: marks the time and peak memory (VmHWM) of the first optimiser step (a global step hook), the
# phases before it and each evaluation, then runs the train stage's main() as `python -m stages.train`
# would. With max_steps > 0 each training epoch stops after that many batches (validation, test and the
# record run as usual, on the whole splits).
_CHILD = textwrap.dedent(
    """
    import json, os, resource, sys, time
    marks_file, max_steps, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

    def cpu():  # CPU seconds of the process so far, every thread: what a quiet machine's wall time would be
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    marks = {"child_start": time.time(), "steps": [], "cpu_steps": []}

    def hwm():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

    from torch.optim.optimizer import register_optimizer_step_post_hook

    def hook(optimizer, args, kwargs):
        marks["steps"].append(time.time())
        marks["cpu_steps"].append(cpu())
        if len(marks["steps"]) == 1:
            marks["hwm_first_step"] = hwm()

    register_optimizer_step_post_hook(hook)
    import multitab.training.loop as loop
    import multitab.training.run as run

    def timed(module, name):
        inner = getattr(module, name)

        def wrapper(*a, **k):
            marks.setdefault(name, []).append([time.time()])
            marks.setdefault("cpu_" + name, []).append([cpu()])
            out = inner(*a, **k)
            marks[name][-1].append(time.time())
            marks["cpu_" + name][-1].append(cpu())
            return out
        setattr(module, name, wrapper)

    for name in ("load_run_data", "resume_settings", "build_run_model", "train"):
        timed(run, name)
    timed(loop, "evaluate")
    if max_steps:
        batches = loop.iterate_batches

        def first_batches(*a, **k):
            for i, batch in enumerate(batches(*a, **k)):
                if k.get("generator") is not None and i >= max_steps:
                    return
                yield batch
        loop.iterate_batches = first_batches
    from stages.train import main
    marks["imports_done"], marks["cpu_imports_done"] = time.time(), cpu()
    marks["rc"] = main(argv)
    marks["end"], marks["hwm_end"] = time.time(), hwm()
    with open(marks_file, "w") as f:
        json.dump(marks, f)
    """
)


def _span(marks: dict[str, Any], name: str, i: int = 0) -> float | None:
    spans = marks.get(name, [])
    return spans[i][1] - spans[i][0] if len(spans) > i and len(spans[i]) == 2 else None


def run_case(repo: Path, dataset: str, data: Path, sizes: dict[str, int], work: Path, a: argparse.Namespace
             ) -> dict[str, Any]:
    schema = SCHEMAS[dataset]
    key = write_project(work / dataset, repo, dataset, data, a.threads)
    marks_file, log_file = work / f"{dataset}.marks.json", work / f"{dataset}.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), str(repo / "src")])}
    cmd = [sys.executable, "-c", _CHILD, str(marks_file), str(a.max_steps),
           "--run", key, "--params", str(work / dataset / "params.yaml")]
    t0 = time.time()
    with log_file.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=work / dataset, env=env, stdout=log, stderr=subprocess.STDOUT)
        timer = threading.Timer(a.timeout, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own rusage: its peak RSS
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
    marks = json.loads(marks_file.read_text()) if marks_file.is_file() else {}
    tensors = sum(tensor_bytes(schema, n) for n in sizes.values())
    peak = usage.ru_maxrss * 1024
    out: dict[str, Any] = {
        "dataset": dataset, "model": MODEL, "rows": sizes, "rows_total": sum(sizes.values()),
        "tensors_gb": round(tensors / 1e9, 3), "peak_rss_gb": round(peak / 1e9, 3),
        "peak_over_tensors": round(peak / tensors, 2), "exit_code": proc.returncode,
        "stage_seconds": round(time.time() - t0, 1),
    }
    if proc.returncode != 0 or marks.get("rc", 0) != 0:
        out["log_tail"] = log_file.read_text(errors="replace").splitlines()[-15:]
    steps = marks.get("steps", [])
    if steps:
        out["seconds_to_first_step"] = round(steps[0] - t0, 1)
        out["peak_rss_gb_to_first_step"] = round(marks["hwm_first_step"] / 1e9, 3)
        load = marks["load_run_data"][0][0]
        phases = {"interpreter_and_imports": marks["imports_done"] - t0,
                  "params_runs_hparams": load - marks["imports_done"]}
        for name, label in (("load_run_data", "load"), ("resume_settings", "fingerprint_with_data_sha256"),
                            ("build_run_model", "build_model")):
            phases[label] = _span(marks, name) or 0.0
        phases["train_setup_and_first_step"] = steps[0] - marks["train"][0][0]
        phases["other"] = out["seconds_to_first_step"] - sum(phases.values())
        out["phases_to_first_step"] = {k: round(v, 1) for k, v in phases.items()}
        # CPU seconds (all threads): independent of other jobs on the machine, about a quiet machine's wall
        # time where one thread works (imports, the model) and more than it where several do (the load)
        out["cpu_seconds_to_first_step"] = round(marks["cpu_steps"][0], 1)
        out["cpu_seconds_load"] = round(_span(marks, "cpu_load_run_data") or 0.0, 1)
    n_batches = -(-sizes["train"] // 2048)
    if len(steps) > 1:
        per_step = (steps[-1] - steps[0]) / (len(steps) - 1)
        out["steps_measured"] = len(steps)
        out["epoch_loop_seconds"] = round(per_step * n_batches, 1)
        out["epoch_loop_extrapolated"] = len(steps) < n_batches
        out["samples_per_second"] = round(2048 / per_step)
        cpu_step = (marks["cpu_steps"][-1] - marks["cpu_steps"][0]) / (len(steps) - 1)
        out["cpu_seconds_epoch_loop"] = round(cpu_step * n_batches, 1)
    val, test = _span(marks, "evaluate", 0), _span(marks, "evaluate", 1)
    if val is not None:
        out["val_seconds"] = round(val, 1)
        out["cpu_seconds_val"] = round(_span(marks, "cpu_evaluate", 0) or 0.0, 1)
        if "epoch_loop_seconds" in out:
            out["epoch_seconds"] = round(out["epoch_loop_seconds"] + val, 1)
    if test is not None:
        out["test_seconds"] = round(test, 1)
        out["cpu_seconds_test"] = round(_span(marks, "cpu_evaluate", 1) or 0.0, 1)
    return out
