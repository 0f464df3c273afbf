"""Stage `icl`: the pretrained in-context baselines (params: icl, datasets; docs/icl.md) on the processed
splits of each dataset of `icl.datasets`, every model of `icl.models`, every seed of `icl.seeds`.

    python -m stages.icl --params params.yaml --data data/processed --out results/icl

Writes <out>/<dataset>/<model>/seed<k>/metrics.json (multitab.icl.run.evaluate: per task val/test metric or
"not applicable" / "not run: no checkpoint", the checkpoint's sha256, the context rule, chunk and ensemble
sizes, time, device) and <out>/summary.md, one line per dataset x model x seed. A model without a
checkpoint in params costs nothing and is reported as not run, with how to get its checkpoint."""

from __future__ import annotations

from pathlib import Path

from multitab.config import load_params
from multitab.icl.run import NOT_RUN, evaluate
from multitab.io import write_json, write_text
from stages._common import parser, run

HOW_TO = ("get a checkpoint with `python -m multitab.icl.fetch <model>` (online; it downloads the hub file named "
          "in params `icl.checkpoints.<model>` into .cache/icl and prints its sha256), then set that entry's "
          "`path` and `sha256`")


def summary_line(record: dict) -> str:
    status = record["status"]
    tasks = ", ".join(f"{task}: {record['test'][task]:.4f}" if state == "ok" else f"{task}: {state}"
                      for task, state in status.items())
    shas = ", ".join(f"{name} sha256 {c['sha256']}" for name, c in record["checkpoints"].items()) or "no checkpoint"
    return f"| {record['dataset']} | {record['model']} | {record['seed']} | {tasks} | {shas} |"


def write_all(params_path: str, data: Path, out: Path) -> None:
    params = load_params(params_path)
    config = params.icl
    root = Path(params_path).resolve().parent
    lines = ["# Pretrained in-context baselines (test metric per task)", "",
             f"Pretrained, no training on these datasets. Context: at most {config.context_size} training rows "
             f"({config.context_rule} seeded sample); test rows in seeded chunks of {config.chunk_size}; "
             f"{config.n_estimators} ensemble view(s).", "",
             "| dataset | model | seed | test | checkpoint |", "|---|---|---|---|---|"]
    not_run = False
    for dataset in config.datasets:
        for model in config.models:
            for seed in config.seeds:
                record = evaluate(data / dataset, model=model, seed=seed, config=config, root=root)
                write_json(out / dataset / model / f"seed{seed}" / "metrics.json", record)
                lines.append(summary_line(record))
                not_run |= NOT_RUN in record["status"].values()
    if not_run:
        lines += ["", f"{NOT_RUN}: {HOW_TO}."]
    write_text(out / "summary.md", "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--data", default="data/processed", help="folder of the processed datasets")
    p.add_argument("--out", default="results/icl")
    args = p.parse_args(argv)
    return run("icl", lambda: write_all(args.params, Path(args.data), Path(args.out)), outputs=[Path(args.out)])


if __name__ == "__main__":
    raise SystemExit(main())
