"""The MultiTab-Bench study (Figures 5 and 6): per-run metrics → Δm per seed → figures, tables, the claim.

Everything is built from two CSV files, so a committed record regenerates its own figures and tables:

- `metrics.csv`: one row per (configuration, model, seed, task) with the test and validation explained
  variance, the configuration's generator settings (groups, p, PD) and the run's cost (epochs, seconds);
- `curves.csv`: one row per (configuration, model, seed, epoch) with the validation mean EV and the
  training loss (the dvclive logs), for the learning curves.

`collect(runs_dir, ...)` writes those rows from the runs' metrics.json and dvclive logs; `write_study(...)`
writes everything else from them; `regenerate(folder)` does the same for a record folder. The numbers are
computed in bench/numbers.py, the Markdown and figures drawn in bench/render.py.

Δm (Equation 5, in %) of a seed is taken against the STL seed mean (the paper's pairing). The claim of the
paper's section "Experiments with MultiTab-Bench", per configuration: MultiTab-Net's Δm is above each of
MMoE's, PLE's and STEM's. Checked by a one-sided test over the per-seed Δm (Welch's statistic, min(n) − 1
degrees of freedom; H1: MultiTab-Net's mean is greater) and the mirror test (H1: it is smaller), at level
`alpha`. Verdicts, three-valued (bench/verdict.py): `holds` (significantly above every rival), `does not hold`
(significantly below at least one after a Holm correction over the rivals), `inconclusive` (otherwise, or one
seed: no test), and `missing` while runs are absent.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from multitab.evaluation import figures
from multitab.evaluation.bench.claim import CLAIM_FILE, read_claim
from multitab.evaluation.bench.generator import generator_line
from multitab.evaluation.bench.numbers import (
    CURVES_COLUMNS,
    FIGURE5_GROUPS,
    FIGURE6_GROUPS,
    StudyError,
    StudySettings,
    apply_budget,
    claims,
    configs_from_metrics,
    convergence,
    delta_m_runs,
    read_metrics_csv,
    summarise,
)
from multitab.evaluation.bench.render import (
    claims_markdown,
    curves_figure,
    delta_m_markdown,
    figure_frame,
    render_section,
)
from multitab.files.io import atomic_path
from multitab.files.io import write_csv as write_frame

log = logging.getLogger(__name__)


def write_csv(frame: pd.DataFrame, path: Path) -> Path:
    return write_frame(path, frame, float_format="%.6g")


def write_text(text: str, path: Path) -> Path:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)
    return path


def write_study(metrics: pd.DataFrame, curves: pd.DataFrame, out: str | Path,
                settings: StudySettings | None = None, *, header: Sequence[str] = (),
                models: Sequence[str] | None = None, figure_prefix: str = "figures/") -> tuple[list[Path], str]:
    """Write into `out`: delta_m_per_seed.csv, delta_m.csv + .md (mean ± SE), claims.csv + .md,
    convergence.csv, figures/figure5_delta_m.{png,svg}, figures/figure6_delta_m.*,
    figures/learning_curves.*, and section.md (the report section, `header` lines first). Everything
    comes from `metrics` and `curves` only. Returns (paths, section markdown)."""
    settings = settings or StudySettings()
    out = Path(out)
    configs = configs_from_metrics(metrics)
    if models is None:
        models = list(dict.fromkeys(metrics["model"]))
    plotted = [m for m in models if m != settings.baseline]
    dm = delta_m_runs(metrics, settings.baseline)
    summary = summarise(dm)
    claim = apply_budget(claims(dm, list(configs), settings), metrics, settings.budget)
    conv = convergence(metrics, settings)
    written = [write_csv(dm, out / "delta_m_per_seed.csv"), write_csv(summary, out / "delta_m.csv"),
               write_csv(claim, out / "claims.csv"), write_csv(conv, out / "convergence.csv")]
    frame = figure_frame(summary, configs, plotted, settings)
    labels = [settings.label(m) for m in plotted]
    fig_paths = {}
    for name, groups, title in (
        ("figure5_delta_m", FIGURE5_GROUPS, "Figure 5: Δm (%) vs STL as task correlation, complexity and count vary"),
        ("figure6_delta_m", FIGURE6_GROUPS, "Figure 6: Δm (%) vs STL with non-uniform task complexities"),
    ):
        part = frame[frame.group.isin(groups)]
        cv = conv[conv.config.isin(set(part.config))]
        note = figures.convergence_note(int(cv["runs"].sum()), int(cv["best_at_cap"].sum()))
        fig = figures.delta_m_figure(part, groups, labels, title, note)
        paths = figures.save_figure(fig, out / "figures", name, settings.dpi)
        fig_paths[name] = paths[0]
        written += paths
    fig = curves_figure(curves, list(configs), models, settings)
    paths = figures.save_figure(fig, out / "figures", "learning_curves", settings.dpi)
    written += paths
    dm_md = delta_m_markdown(summary, configs, models, settings)
    claims_md = claims_markdown(claim, settings)
    written += [write_text(dm_md + "\n", out / "delta_m.md"), write_text(claims_md + "\n", out / "claims.md")]
    section = render_section(metrics, claim, conv, dm_md, claims_md, settings, header, figure_prefix)
    written.append(write_text(section, out / "section.md"))
    return written, section


def section_only(metrics: pd.DataFrame, settings: StudySettings, models: Sequence[str], *,
                 header: Sequence[str] = (), figure_prefix: str = "figures/", curves: bool = False,
                 convergence_file: str | None = None) -> str:
    """The report section of `metrics` without writing any file (the default report, whose Figures 5-6
    are drawn by `aggregate`): `figure_prefix` points at those figures; `curves`: link a
    learning_curves.png there too; `convergence_file`: where the caller writes the convergence flags (None:
    nowhere, and the section names no file)."""
    configs = configs_from_metrics(metrics)
    dm = delta_m_runs(metrics, settings.baseline)
    summary = summarise(dm)
    claim = apply_budget(claims(dm, list(configs), settings), metrics, settings.budget)
    return render_section(metrics, claim, convergence(metrics, settings),
                          delta_m_markdown(summary, configs, models, settings),
                          claims_markdown(claim, settings), settings, header, figure_prefix, curves=curves,
                          convergence_file=convergence_file)


def regenerate(folder: str | Path, settings: StudySettings | None = None) -> list[Path]:
    """Re-write a record folder's figures and tables from its own metrics.csv and curves.csv (the
    record's header.md, when present, heads its section.md)."""
    folder = Path(folder)
    settings = read_claim(folder, settings)  # the model it tested and the labels, when the record keeps them
    metrics = read_metrics_csv(folder / "metrics.csv")
    curves_path = folder / "curves.csv"
    curves = pd.read_csv(curves_path) if curves_path.is_file() else pd.DataFrame(columns=CURVES_COLUMNS)
    header_path = folder / "header.md"
    header = header_path.read_text().splitlines() + [""] if header_path.is_file() else []
    paths, _ = write_study(metrics, curves, folder, settings, header=header)
    return paths


def record_header(metrics: pd.DataFrame, *, commit: str, machine: str, note: str,
                  flow_wall_seconds: float | None = None) -> list[str]:
    """header.md lines of a committed record: what was run, where, at which commit and with which generator
    (bench/generator.py), and the training time per model (from the runs' own train_seconds)."""
    runs = metrics.drop_duplicates(["config", "model", "seed"])
    rows = sorted({int(x) for x in runs["n_train"].dropna()})
    lines = [f"> {note}", "",
             f"- Commit: `{commit}`; machine: {machine}.", generator_line(commit),
             f"- Scale: configurations {list(dict.fromkeys(runs['config']))}, seeds "
             f"{sorted(int(s) for s in runs['seed'].unique())}, {rows} training rows per run.",
             "- Training time per model (train_seconds of the runs, epochs and validation included; sum over "
             "runs, and per run):"]
    for model, part in runs.groupby("model", sort=False):
        lines.append(f"  - {model}: {part['train_seconds'].sum():.0f} s in {len(part)} runs "
                     f"({part['train_seconds'].mean():.0f} s per run, median {part['epochs'].median():g} epochs)")
    if flow_wall_seconds is not None:
        lines.append("- Wall time of the whole `flows.pipeline` run (every stage, 2 at once): "
                     f"{flow_wall_seconds:.0f} s.")
    return lines + [""]


def add_record_commands(sub: Any) -> Any:
    """The `record` (--from, --to, --note, --flow-wall-seconds) and `regenerate FOLDER` subcommands every
    record kind's command line has (study, attribution, precision pair); returns `record`'s parser."""
    rec = sub.add_parser("record")
    rec.add_argument("--from", dest="source", required=True, type=Path)
    rec.add_argument("--to", dest="target", required=True, type=Path)
    rec.add_argument("--note", required=True, help="what this record is (e.g. its scale against the paper's)")
    rec.add_argument("--flow-wall-seconds", type=float, default=None)
    sub.add_parser("regenerate").add_argument("folder", type=Path)
    return rec


def copy_into_record(source: Path, target: Path, names: Sequence[str], make: str) -> None:
    """Copy a report's CSVs `names` from `source` into the record folder `target` (created); StudyError naming
    the first one absent and the command (`make`) that writes it."""
    import shutil

    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        if not (source / name).is_file():
            raise StudyError(f"{source / name}: not found; run `{make}` first")
        shutil.copy(source / name, target / name)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m multitab.evaluation.bench.study record --from results/study_report --to results/study/<name>
    --note "..."`: copy a study's metrics.csv and curves.csv into a record folder, write its header.md and
    regenerate its figures and tables from them. `regenerate FOLDER`: only the last step."""
    import argparse

    from multitab.runtime.provenance import git_commit, machine

    p = argparse.ArgumentParser(prog="python -m multitab.evaluation.bench.study")
    add_record_commands(p.add_subparsers(dest="command", required=True))
    a = p.parse_args(argv)
    try:
        if a.command == "regenerate":
            regenerate(a.folder)
            return 0
        copy_into_record(a.source, a.target, ("metrics.csv", "curves.csv"), "make study")
        if (a.source / CLAIM_FILE).is_file():  # the claim it tested (bench/claim.py)
            copy_into_record(a.source, a.target, (CLAIM_FILE,), "make study")
        header = record_header(read_metrics_csv(a.target / "metrics.csv"), commit=git_commit(a.source),
                               machine=machine(), note=a.note, flow_wall_seconds=a.flow_wall_seconds)
        write_text("\n".join(header) + "\n", a.target / "header.md")
        regenerate(a.target)
    except (StudyError, OSError) as e:
        print(f"bench.study: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
