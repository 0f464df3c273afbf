"""Stage `train@<run>`: one training run of params.yaml's run matrix (`runs`, expanded in runs.yaml); stage
`train_stack@<stack>`: the seeds of one dataset x model of a group with `train.stack_seeds`, as one stacked
model (multitab.training.stacked; each seed's files as its own run writes them).

    python -m stages.train --run real-higgs-multitab_net-0
    python -m stages.train --stack study-p06_pd3_t3-mmoe

The run's key names its group, dataset, model, grid point and seed (multitab.runs); its data, validation
verdict, output folders (relative to the params file's folder, the project root) and every setting it trains
with come from its record in runs.yaml, resolved once by `python -m multitab.runs` (multitab.runs.resolve: the
constructor keywords, optimiser, budget ...; DVC tracks the record as the stage's params), which must be what
params.yaml and the hyperparameter files resolve to now (else exit 3: run `python -m multitab.runs`). Writes
<out>/metrics.json, the per-epoch curves as a dvclive log in <out>/dvclive, and the checkpoints (best.pt is
the tested one; last.pt lets a killed run resume: just run the stage again). Every file is replaced
atomically and durably (DVC itself removes the stage's previous metrics and curves when it re-runs the stage
and keeps them in its cache: `dvc checkout <stage>` puts back what dvc.lock records; it never touches the
checkpoints, which are no DVC output); a full disk ends the stage with one line, "no space left on <path>
(needed ~N MB)", and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from multitab.config import ConfigError, load_params
from multitab.files.io import atomic_dir, read_json, remove_stale_temporaries, write_json
from multitab.registry import file_key
from multitab.runs.document import entry, stack_entry
from multitab.runs.record import RecordError, RunConfig
from multitab.runs.types import KEY, RUNS_FILE, STACKS, Run
from multitab.training.run import RunSpec, run_training
from stages._common import exit_without_teardown, parser, run

log = logging.getLogger("stages.train")
# imported only once a run starts (its dvclive log, the optimiser's torch._dynamo, the data's readers): a warm
# process of the flow's stage server has them already (multitab.runtime.stage_server)
WARM_IMPORTS = ("dvclive", "torch._dynamo", "pandas", "pyarrow.parquet")


def check_verdict(path: Path, dataset: str) -> None:
    """Refuse to train on data the validation stage did not pass."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: validation verdict not found; run `dvc repro validate_processed@{dataset}`")
    verdict = read_json(path)
    ok = verdict.get("success")
    if ok is not True:
        raise ValueError(f"{path}: the data of {dataset} failed validation (success={ok!r}); see reports/validation/")


def write_dvclive(history: list[dict[str, float]], out: Path) -> None:
    """Per-epoch curves as a dvclive log (plots/metrics/*.tsv), written whole from the history with dvclive's own
    writer (`dvclive.plots.Metric`, the files `Live.log_metric` writes, byte for byte). Only the curves: no summary
    (`metrics.json`: the stage declares the curves alone, and an undeclared file in the runs folder made the
    aggregate's dependency hash differ between a clone that trained and one that restored the runs from the DVC
    cache); the run's record is the run folder's metrics.json. `Live` itself is not used: it opens the DVC
    repository and reads git's HEAD (half a second per run) for experiment tracking this stage does not do."""
    from dvclive.plots import Metric

    with atomic_dir(out) as tmp:
        metrics: dict[str, Metric] = {}
        for step, row in enumerate(history):
            for key, value in row.items():
                if key != "epoch" and value is not None and value == value:  # skip NaN
                    name = file_key(key)  # a task's name in a file's
                    metric = metrics.setdefault(name, Metric(name, tmp / "plots"))
                    metric.step = step
                    metric.dump(float(value))


def _spec(root: Path, run_: Run) -> RunSpec:
    out = root / run_.out
    remove_stale_temporaries(out)  # of a save killed in an earlier attempt (the checkpoints: by `resume`)
    return RunSpec(dataset=run_.dataset, model=run_.model, seed=run_.seed, data_path=root / run_.data,
                   checkpoint_dir=root / run_.checkpoints)


def _config(written: dict[str, Any], where: str) -> RunConfig:
    try:
        return RunConfig.from_record(written, where)
    except RecordError as e:
        raise ConfigError(str(e)) from None


def _write(root: Path, written: dict[str, Any], run_: Run, record: dict[str, Any], history: list[dict[str, float]],
           stacked: list[int] | None) -> None:
    record["group"] = run_.group
    record["stacked"] = stacked  # the seeds it trained with in one stacked model (None: alone)
    # what params.yaml said about this run (the aggregate stage compares it with the params of its time)
    record["params"] = written["params"]
    if written["attribution"] is not None:  # the arm settings it trained with (its key's point)
        record["attribution"] = written["attribution"]
    out = root / run_.out
    write_dvclive(history, out / "dvclive")
    write_json(out / "metrics.json", record)
    print(json.dumps({k: record[k] for k in ("dataset", "model", "seed", "test", "best_epoch", "epochs")}))


def train_one(a: argparse.Namespace) -> None:
    params = load_params(a.params)
    root = Path(a.params).parent  # the project: run paths are relative to it (DVC runs stages there)
    path = a.runs if a.runs is not None else root / RUNS_FILE
    run_, written = entry(params, a.run, path)  # its record: everything it trains with, resolved by multitab.runs
    config = _config(written, f"{path}: {KEY}.{a.run}")
    check_verdict(root / run_.verdict, run_.dataset)
    spec = _spec(root, run_)
    record, history = run_training(spec, config)
    _write(root, written, run_, record, history, None)


def train_stack(a: argparse.Namespace) -> None:
    """The members of a stack as one stacked model; where stacking is refused (multitab.training.stacked:
    dropout > 0, bf16, MAYA, XGBoost ...), one after another as separate runs, with a log line saying why."""
    from multitab.training.stacked import StackRefused, run_training_stacked

    params = load_params(a.params)
    root = Path(a.params).parent
    path = a.runs if a.runs is not None else root / RUNS_FILE
    stack, written = stack_entry(params, a.stack, path)
    config = _config(written, f"{path}: {STACKS}.{a.stack}")
    check_verdict(root / stack.verdict, stack.dataset)
    members = stack.members()
    specs = [_spec(root, m) for m in members]
    seeds: list[int] | None = [m.seed for m in members]
    try:
        results = run_training_stacked(specs, config)
    except StackRefused as refused:  # raised before anything is read or written
        log.warning("%s: not stacked (%s); training its %d seeds one after another", a.stack, refused, len(specs))
        results = [run_training(spec, config) for spec in specs]
        seeds = None
    for member, (record, history) in zip(members, results):
        _write(root, written, member, record, history, seeds)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--run",
                       help="the run's key in runs.yaml's train_runs (<group>-<dataset>-<model>[-<point>]-<seed>)")
    which.add_argument("--stack",
                       help="the stack's key in runs.yaml's train_stacks (<group>-<dataset>-<model>[-<point>])")
    p.add_argument("--runs", type=Path, default=None,
                   help="the expanded run matrix (default: runs.yaml beside --params)")
    a = p.parse_args(argv)
    if a.stack is not None:
        return run(f"train_stack@{a.stack}", lambda: train_stack(a))
    return run(f"train@{a.run}", lambda: train_one(a))


if __name__ == "__main__":
    exit_without_teardown(main())
