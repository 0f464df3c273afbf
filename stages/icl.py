"""Stage `icl`: the pretrained in-context baselines (params: icl; docs/icl.md) on each dataset of `icl.datasets`
(a key of `datasets`: its processed splits; a key of `bench.configs`: that MultiTab-Bench configuration's
synthetic data), every model of `icl.models`, every seed of `icl.seeds`, with the checkpoint files icl.lock
names (written and verified by `make icl-weights`).

    python -m stages.icl --params params.yaml --data data/processed --synthetic data/synthetic \
        --lock icl.lock --out results/icl

Writes <out>/<dataset>/<model>/seed<k>/metrics.json (multitab.icl.run.evaluate: per task val/test metric or
"not applicable" / "not run: no checkpoint", the profile and device, the checkpoints' sha256, the context
rule, chunk and ensemble sizes, time) and <out>/summary.md, one line per dataset x model x seed and the
MultiTab-Bench configurations on their own. A model without a locked checkpoint costs nothing and is
reported as not run, with how to get its checkpoint."""

from __future__ import annotations

from pathlib import Path

import torch

from multitab.config import Params, load_params
from multitab.files.io import write_json, write_text
from multitab.icl import lock
from multitab.icl.run import NOT_RUN, evaluate
from stages._common import parser, run

HOW_TO = ("run `make icl-weights` (python -m multitab.icl.fetch: it fetches every checkpoint params.yaml "
          "`icl.checkpoints` names at its pinned revision, checks its sha256 and writes icl.lock; offline, it says "
          "how to copy a file in by hand), then run this stage again")


def summary_line(record: dict) -> str:
    status = record["status"]
    tasks = ", ".join(f"{task}: {record['test'][task]:.4f}" if state == "ok" else f"{task}: {state}"
                      for task, state in status.items())
    shas = ", ".join(f"{name} sha256 {c['sha256']}" for name, c in record["checkpoints"].items()) or "no checkpoint"
    return f"| {record['dataset']} | {record['model']} | {record['seed']} | {tasks} | {shas} |"


def device_of(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("icl.device is 'cuda' but torch sees no CUDA device; use 'auto' or 'cpu'")
    return torch.device("cuda" if name == "auto" and torch.cuda.is_available() else "cpu" if name == "auto" else name)


def data_folder(params: Params, name: str, data: Path, synthetic: Path) -> Path:
    if name in params.datasets:
        return data / name
    if name in params.bench.configs:
        return synthetic / name
    raise ValueError(f"icl.datasets: {name!r} is neither a key of `datasets` ({', '.join(params.datasets)}) nor of "
                     f"`bench.configs` ({', '.join(params.bench.configs)})")


def write_all(params_path: str, data: Path, synthetic: Path, lock_path: Path, out: Path) -> None:
    params = load_params(params_path)
    config = params.icl
    folders = {name: data_folder(params, name, data, synthetic) for name in config.datasets}
    device = device_of(config.device)
    profile_name, profile = config.settings(device.type)
    entries = lock.read(lock_path)
    # the lock's paths are relative to the folder it is in (the project root, where fetch writes them)
    files = {name: lock.checkpoint(name, config.checkpoints.get(name), entries, lock_path.absolute().parent)
             for name in {"tabicl_regressor", *config.checkpoints}}
    scored = (f"at most {profile.eval_rows:,} val and test rows scored per split (seeded sample)" if profile.eval_rows
              else "every val and test row scored")
    lines = ["# Pretrained in-context baselines (test metric per task)", "",
             f"Pretrained, no training on these datasets. Profile `{profile_name}` on {device.type}: context of at "
             f"most {profile.context_size or 'all'} training rows ({config.context_rule} seeded sample); "
             f"{scored}; test rows in "
             f"seeded chunks of {profile.chunk_size or 'a whole split'}; ensemble views "
             f"{', '.join(f'{m} {n}' for m, n in profile.n_estimators.items())}.", "",
             "| dataset | model | seed | test | checkpoint |", "|---|---|---|---|---|"]
    bench: list[str] = []
    not_run = False
    for dataset, folder in folders.items():
        for model in config.models:
            for seed in config.seeds:
                record = evaluate(folder, model=model, seed=seed, config=config, checkpoints=files, device=device)
                write_json(out / dataset / model / f"seed{seed}" / "metrics.json", record)
                (bench if dataset in params.bench.configs else lines).append(summary_line(record))
                not_run |= NOT_RUN in record["status"].values()
    if bench:
        lines += ["", "## MultiTab-Bench", "",
                  "The configurations' synthetic data (data/synthetic, `bench.data`): every task is a regression, so "
                  "TabICL runs its regressor and Orion-MSP reads \"not applicable\" (test explained variance per "
                  "task). The multitask models on the same data: results/report.md, its MultiTab-Bench section "
                  "(run group `bench`).", "",
                  "| configuration | model | seed | test | checkpoint |", "|---|---|---|---|---|", *bench]
    if not_run:
        whys = sorted({w for w in files.values() if isinstance(w, str)})
        lines += ["", f"{NOT_RUN}: {HOW_TO}.", *[f"- {why}" for why in whys]]
    write_text(out / "summary.md", "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--data", default="data/processed", help="folder of the processed datasets")
    p.add_argument("--synthetic", default="data/synthetic", help="folder of the MultiTab-Bench datasets")
    p.add_argument("--lock", default="icl.lock", help="the checkpoint files (make icl-weights writes it)")
    p.add_argument("--out", default="results/icl")
    args = p.parse_args(argv)
    return run("icl", lambda: write_all(args.params, Path(args.data), Path(args.synthetic), Path(args.lock),
                                        Path(args.out)), outputs=[Path(args.out)])


if __name__ == "__main__":
    raise SystemExit(main())
