"""Does this machine train what a committed record holds? Each run of the record at the given seed and
configurations trained again here for ONE epoch, at this checkout's code, and its first epoch compared with the
record's curves.csv (validation mean and training loss, to the 6 significant digits curves.csv keeps).

    python -m stages.first_epoch_check run --record results/study/<record> --seed 0 --configs p02_pd3_t3 ... \
        --to results/study/<check> --note "..."
    python -m stages.first_epoch_check section results/study/<check>     # section.md again from results.csv

Why one epoch: a run is deterministic on one machine, so its first epoch repeating to 6 digits says the code,
the data and the floating-point kernels are the ones the record's run had; a difference in the first epoch is
where two trajectories part (later epochs only amplify it), at a twentieth of a run's cost. The kernels are
the machine's: PyTorch, MKL and oneDNN pick AVX-512 or AVX2 code by the CPU, and their results differ in the
last bits. To train as an AVX2-only machine did on an AVX-512 one, cap all three before Python starts:
`ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2`; the header records the
capability PyTorch used and those variables (docs/study.md, "Five seeds").

Writes --to/results.csv (one row per run: the record's and this machine's values, same or not), header.md
(what ran: the record, the commit, the machine, the kernels, the note) and section.md (from those two alone).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd

from multitab.config import load_params
from multitab.evaluation.bench.generator import header_line, version_of
from multitab.evaluation.bench.numbers import StudyError, read_metrics_csv
from multitab.files.io import atomic_dir, write_csv
from multitab.runtime.provenance import git_commit, machine
from stages._common import parser, run
from stages.continue_runs import kernels, run_of, runs_by_folder, train_again

CURVES = ("val_mean", "train_loss")
RESULTS, HEADER, SECTION = "results.csv", "header.md", "section.md"


def check(root: Path, record: Path, seed: int, configs: list[str]) -> pd.DataFrame:
    """One row per run of `record` at `seed` and `configs`: epoch 1 of the record and of a run trained here."""
    params = load_params(root / "params.yaml")
    metrics = read_metrics_csv(record / "metrics.csv")
    curves = pd.read_csv(record / "curves.csv")
    by_folder = runs_by_folder(params, root)
    chosen = metrics[(metrics["seed"] == seed) & metrics["config"].isin(configs)].drop_duplicates("run")
    missing = sorted(set(configs) - set(chosen["config"]))
    if missing:
        raise StudyError(f"{record / 'metrics.csv'}: no runs of seed {seed} for {missing}")
    rows = []
    for row in chosen.itertuples():
        key, run_, written = run_of(by_folder, row.run, record / "metrics.csv")
        with tempfile.TemporaryDirectory() as tmp:  # no checkpoint to resume from
            _, history = train_again(root, key, run_, written, 1, Path(tmp))
        ref = curves[(curves["arm"] == row.arm) & (curves["config"] == row.config) & (curves["model"] == row.model)
                     & (curves["seed"] == seed) & (curves["epoch"] == 1)]
        if len(ref) != 1:
            raise StudyError(f"{record / 'curves.csv'}: no single epoch-1 row for {row.run} ({row.arm})")
        out = {"config": row.config, "arm": row.arm, "model": row.model, "seed": seed, "run": row.run}
        for c in CURVES:
            out[f"record_{c}"] = f"{float(ref[c].iloc[0]):.6g}"
            out[f"here_{c}"] = f"{float(history[0][c]):.6g}"
        out["same"] = all(out[f"record_{c}"] == out[f"here_{c}"] for c in CURVES)
        rows.append(out)
    return pd.DataFrame(rows)


def render(folder: Path, name: str | None = None) -> str:
    """section.md from header.md and results.csv alone (`name`: the check's, when `folder` is its temporary)."""
    table = pd.read_csv(folder / RESULTS, dtype=str)
    same = table["same"] == "True"
    lines = [f"## First epoch trained again: {name or folder.name}", "", (folder / HEADER).read_text().rstrip(), "",
             f"**{int(same.sum())} of {len(table)} runs repeat the record's first epoch** (validation mean and "
             "training loss to 6 significant digits).", "",
             "| Configuration | Arm | Model | Seed | Record val / loss | Here val / loss | Same |",
             "|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        lines.append(f"| {r.config} | {r.arm} | {r.model} | {r.seed} | {r.record_val_mean} / {r.record_train_loss} "
                     f"| {r.here_val_mean} / {r.here_train_loss} | {'yes' if r.same == 'True' else '**no**'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("action", choices=["run", "section"])
    p.add_argument("folder", nargs="?", type=Path, default=None, help="with `section`: the check's folder")
    p.add_argument("--record", type=Path, help="the committed record whose runs are checked")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--configs", nargs="+", default=[])
    p.add_argument("--to", dest="target", type=Path)
    p.add_argument("--note", default="")
    a = p.parse_args(argv)

    def body() -> None:
        if a.action == "section":
            if a.folder is None:
                raise StudyError("section: name the check's folder")
            (a.folder / SECTION).write_text(render(a.folder))
            return
        if a.record is None or a.target is None or not a.configs:
            raise StudyError("run: give --record, --configs and --to")
        root = Path(a.params).parent
        table = check(root, a.record, a.seed, a.configs)
        with atomic_dir(a.target) as tmp:
            write_csv(tmp / RESULTS, table)
            commit = git_commit(root)
            header = [f"> {a.note}" if a.note else "", "",
                      f"- Record: {a.record.as_posix()}; seed {a.seed}; configurations {a.configs}.",
                      f"- Commit: `{commit}`; machine: {machine()}; kernels: {kernels()}.",
                      header_line(version_of(commit)),
                      "- Each run trained here for one epoch (`python -m stages.first_epoch_check`); compared: epoch "
                      "1's val_mean and train_loss with the record's curves.csv, 6 significant digits."]
            (tmp / HEADER).write_text("\n".join(header).lstrip("\n") + "\n")
            (tmp / SECTION).write_text(render(tmp, a.target.name))
        print(f"{int(table['same'].sum())} of {len(table)} run(s) repeat the record's first epoch -> {a.target}")

    return run(f"first_epoch_check {a.action}", body)


if __name__ == "__main__":
    raise SystemExit(main())
