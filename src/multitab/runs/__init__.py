"""The run matrix: params.yaml's run groups (`runs`) expanded into every training run, each resolved once into
the whole configuration it trains with, written to runs.yaml.

    python -m multitab.runs                  # (re)writes runs.yaml: the default DAG (`make repro`)
    python -m multitab.runs --groups study   # ... with opt-in group `study` in it (`make study`)
    python -m multitab.runs --check          # exit 3 when runs.yaml is not what params.yaml declares
    python -m multitab.runs show <run>       # a run's values, each with its source
    python -m multitab.runs diff             # the runs whose values changed since runs.yaml was written

Its modules are layered, each importing only from the layers above it in this list (tests/test_code_rules.py):
  types:       types (Run, Stack, runs.yaml's names), profiles (a group's `train` over `train`), record (a run's
               resolved configuration, typed: what the train stage reads), locate (data names, a run's file)
  expansion:   arms (the groups that train arm settings), expand (every run of the groups), stages (what
               dvc.yaml's data and report stages iterate)
  resolution:  resolve (a run's record, with the source of every value)
  checks:      check (what DVC could not run as declared)
  the file:    document (runs.yaml written, read and checked current)
  command line: cli (`python -m multitab.runs`, show, diff)

Opt-in groups (`opt_in: true`: the study, the sweeps) are in runs.yaml, and therefore in dvc.yaml's DAG, only
when asked for: plain `dvc repro`, `dvc status` and `dvc exp run` see exactly what `make repro` runs. A run that
trains with `hparams: swept` reads the sweep's selection as `make sweep` wrote it: without the file the expansion
is refused, naming it (no fallback), except in `make sweep`'s own expansion, which leaves out the runs reading a
selection its sweep groups are to write.

This module imports nothing: `import multitab.runs.record` (the train stage's typed record) costs no more than
that module.
"""
