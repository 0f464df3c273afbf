"""The MultiTab-Bench study (`make study`, stage `group_report@study`, params `study`, results/study_report).

- `numbers`: the runs' metrics and curves as rows, Δm per seed, its summary, the paper's claim per
  configuration, convergence, the study's budget;
- `render`: the study's Markdown tables, figure rows, learning-curve grid and report section;
- `study`: writes the study's files from its metrics and curves CSVs, and regenerates a committed record
  (`python -m multitab.evaluation.bench.study`).
"""
