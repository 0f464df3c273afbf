"""Stage `train@<dataset>-<model>-<seed>` (and `train_bench@<config>-<model>-<seed>`): one training run.

    python -m stages.train --dataset higgs --model multitab_net --seed 0 \
        --data data/processed/higgs --verdict data/validated/higgs.json \
        --out results/runs/higgs/multitab_net/seed0 --checkpoints results/checkpoints/higgs/multitab_net/seed0

Writes <out>/metrics.json, the per-epoch curves as a dvclive log in <out>/dvclive, and the checkpoints
(best.pt is the tested one; last.pt lets a killed run resume: just run the stage again). Every file is
replaced atomically and durably, so a failed attempt leaves the previous results; a full disk ends the
stage with one line, "no space left on <path> (needed ~N MB)", and exit status 1.
`--profile bench|study|sweep` lays `bench.train` / `study.train` / `sweep.train` over `train`
(multitab.profiles). `--hparams hparams/<train.hparams>.yaml` is the selections file of the switch
`train.hparams` (read when it is `swept`; `authors` is the package's own copy). A sweep's grid point
(stages sweep_<family>@...) passes its coordinates as `--point lr=0.001 dropout=0.1`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from multitab.config import load_params
from multitab.io import atomic_dir, read_json, read_yaml_file, remove_stale_temporaries, write_json
from multitab.profiles import PROFILES, profiled, run_params
from multitab.training.run import RunSpec, run_training
from stages._common import parser, run


def check_verdict(path: Path, dataset: str) -> None:
    """Refuse to train on data the validation stage did not pass."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: validation verdict not found; run `dvc repro validate_processed@{dataset}`")
    verdict = read_json(path)
    ok = verdict.get("success")
    if ok is not True:
        raise ValueError(f"{path}: the data of {dataset} failed validation (success={ok!r}); see reports/validation/")


def parse_point(items: list[str]) -> dict[str, Any]:
    """`--point lr=0.001 rope=true max_depth=3` -> {"lr": 0.001, "rope": True, "max_depth": 3}."""
    point: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--point {item!r}: expected KEY=VALUE (e.g. lr=0.001)")
        low = text.lower()
        value: Any
        if low in ("true", "false"):
            value = low == "true"
        else:
            try:
                value = int(text)
            except ValueError:
                try:
                    value = float(text)
                except ValueError:
                    raise ValueError(f"--point {item!r}: {text!r} is not a number or true/false") from None
        point[key] = value
    return point


def read_selections(path: Path) -> dict[str, Any]:
    """A selections file (dataset -> model -> entry, the authors' format; yaml.safe_load: data only)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: selections file not found; `make sweep` writes hparams/swept.yaml, "
                                "or set train.hparams: authors")
    data = read_yaml_file(path) or {}
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ValueError(f"{path}: expected dataset -> model -> selection (as src/multitab/models/selected_hparams.yaml)")
    return data


def write_dvclive(history: list[dict[str, float]], out: Path) -> None:
    """Per-epoch curves as a dvclive log (plots/metrics/*.tsv), written whole from the history."""
    from dvclive import Live
    from scmrepo.exceptions import SCMError

    with atomic_dir(out) as tmp:
        try:
            live = Live(dir=str(tmp), save_dvc_exp=False, dvcyaml=None, report=None)
        except SCMError as e:  # dvclive reads the project's git HEAD, which fails before the first commit
            raise RuntimeError(
                f"dvclive could not read the git repository around {out} ({e}): commit once "
                "(`git add -A && git commit -m init`), then re-run the stage"
            ) from e
        with live:
            for row in history:
                for key, value in row.items():
                    if key != "epoch" and value is not None and value == value:  # skip NaN
                        live.log_metric(key, float(value))
                live.next_step()


def train_one(a: argparse.Namespace) -> None:
    if a.verdict is not None:
        check_verdict(a.verdict, a.dataset)
    remove_stale_temporaries(a.out)  # of a save killed in an earlier attempt (the checkpoints: by `resume`)
    spec = RunSpec(dataset=a.dataset, model=a.model, seed=a.seed, data_path=a.data,
                   checkpoint_dir=a.checkpoints)
    params = load_params(a.params)
    config = profiled(params, a.profile).train
    point = parse_point(a.point or [])
    selections = None
    if config.hparams == "swept" and not point:  # a grid point starts from the authors' selection
        if a.hparams is None:
            raise ValueError("train.hparams is `swept`: pass the selections file (--hparams hparams/swept.yaml)")
        selections = read_selections(a.hparams)
    record, history = run_training(spec, config, selections=selections, point=point or None)
    record["profile"] = a.profile
    # what params.yaml said about this run (the aggregate stage compares it with the params of its time)
    record["params"] = run_params(params, a.profile, a.dataset, a.model)
    write_dvclive(history, a.out / "dvclive")
    write_json(a.out / "metrics.json", record)
    print(json.dumps({k: record[k] for k in ("dataset", "model", "seed", "test", "best_epoch", "epochs")}))


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--dataset", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--seed", required=True, type=int)
    p.add_argument("--data", required=True, type=Path, help="processed folder (meta.json + split parquet)")
    p.add_argument("--verdict", type=Path, default=None, help="validation verdict JSON that must say success")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--checkpoints", required=True, type=Path)
    p.add_argument("--profile", choices=PROFILES, default="default",
                   help="bench | study | sweep: `<profile>.train` replaces keys of `train` (see multitab.profiles)")
    p.add_argument("--hparams", type=Path, default=None,
                   help="selections file of train.hparams (hparams/authors.yaml | hparams/swept.yaml)")
    p.add_argument("--point", nargs="*", metavar="KEY=VALUE", help="a sweep's grid point (e.g. lr=0.001 dropout=0.1)")
    a = p.parse_args(argv)
    return run(f"train@{a.dataset}-{a.model}-{a.seed}", lambda: train_one(a))


if __name__ == "__main__":
    raise SystemExit(main())
