"""Evaluation, by what it evaluates.

- At the top, the measures more than one subject uses: `delta_m` (multitask gain, Equation 5),
  `significance` (one-sided tests), `curves` (the runs' learning curves), `tables` (the table type and its
  renderings) and `figures` (the Δm bar figures, learning curves, `save_figure`).
- `paper/`: what the `aggregate` stage writes for the paper's tables and figures (results/report.md,
  results/tables, results/figures, results/index.html), and the complexity stage's counts (Table 4).
- `bench/`: the MultiTab-Bench study (`make study`, stage `group_report@study`, results/study_report).
- `sweep`: the hyperparameter sweeps' selection and report (stage `sweep_select`).

The per-task metrics are multitab.metrics (training and the in-context runs score with them, and both sit
below this package); `metrics` here re-exports them. Import from the defining module; this package
re-exports nothing.
"""
