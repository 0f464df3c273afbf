# The README's two commands live here: `make repro` and `make test`. Each bootstraps the virtual
# environment it needs (Python 3.11, the pinned stack) when it is missing or pyproject.toml changed.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The npm packages Great Expectations' Data Docs load from CDNs (src/multitab/validation/datadocs_assets.json),
# fetched once with their integrity checked so that the pages work offline; tests read only this cache.
ASSETS := .cache/datadocs/.fetched
ASSETS_MANIFEST := src/multitab/validation/datadocs_assets.json
# The released Orion-MSP model files (PyPI tabtune 0.2.1, MIT), installed without their dependencies in a
# test-only folder: tests/test_orion_msp.py compares our model's logits with them (and skips, saying why,
# when the folder is absent, e.g. PyPI could not be reached).
REFERENCE := .cache/reference/tabtune/.installed

# Offline by design: no telemetry, no update checks.
export DO_NOT_TRACK := 1
export DVC_NO_ANALYTICS := 1
export DVC_NO_UPDATER := 1
export GX_ANALYTICS_ENABLED := false
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY := false
export PREFECT_UI_ENABLED ?= true
export PYTHONUNBUFFERED := 1
# Stage commands in dvc.yaml call `python`: the venv's.
export PATH := $(abspath $(BIN)):$(PATH)

# `make test`'s pytest processes (pytest-xdist): two fit the 2-core CI machine, where most of the suite's
# time is spent waiting on DVC, Prefect and Great Expectations subprocesses. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2

.PHONY: help repro study study-interim attribution layers layers-save layers-continue precision-pair sweep test lint ui benchmarks clean-venv assets postgres \
	compare icl-weights icl-benchmark

# `make help`: every target with its line (the `## ` note on the target's own line).
help: ## this list: every target and what it does
	@grep -E '^[a-zA-Z][a-zA-Z_-]*:.*## ' $(firstword $(MAKEFILE_LIST)) | sed -E 's/^([^:]+):.*## /\1\t/' | \
	  awk -F'\t' '{printf "  make %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; install Python 3.11 or run 'make PYTHON=/path/to/python3.11'" >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned resolution would pull a multi-GB CUDA build.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

$(ASSETS): $(ASSETS_MANIFEST) $(STAMP)
	$(BIN)/python -m multitab.validation.assets
	@touch $@

assets: $(ASSETS) ## fetch the Data Docs' CSS/JS once (npm pack, checksummed) so the pages work offline

$(REFERENCE): $(STAMP)
	@rm -rf $(dir $@)
	$(BIN)/python -m pip install --quiet --no-deps --target $(dir $@) tabtune==0.2.1 && touch $@ \
	  || echo "warning: tabtune==0.2.1 not installed; the Orion-MSP equivalence test will skip" >&2

repro: $(STAMP) $(ASSETS) ## the whole pipeline (the DVC DAG through Prefect) on stand-in data; then open results/index.html
	$(BIN)/python -m flows.pipeline

# The pretrained in-context models' checkpoints (docs/icl.md, "Weights"): fetched at the revisions params.yaml
# pins, verified, written to icl.lock for the icl stage. Offline it says how to copy a file in by hand.
icl-weights: $(STAMP) ## fetch and verify the pretrained in-context models' checkpoints (docs/icl.md)
	$(BIN)/python -m multitab.icl.fetch

# The icl stage's cost under the cpu profile on the processed stand-ins, released-size random-weight models
# (docs/icl.md, "Profiles"; cost only).
icl-benchmark: $(STAMP) ## the icl stage's cost under the cpu profile (docs/icl.md)
	$(BIN)/python benchmarks/icl_stage_cost.py

# mypy checks beside pytest (the workers leave about a third of the 2 cores idle, waiting on subprocesses); its
# report is printed after pytest's, and either failing fails the target.
test: $(STAMP) $(ASSETS) $(REFERENCE) postgres ## lint (ruff), type-check (mypy) and the test suite (pytest)
	$(BIN)/ruff check src stages flows tests benchmarks
	@log=$$(mktemp); $(BIN)/mypy >"$$log" 2>&1 & mypy=$$!; \
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal; tests=$$?; \
	wait $$mypy; typed=$$?; echo "mypy:"; cat "$$log"; rm -f "$$log"; \
	test $$tests -eq 0 && test $$typed -eq 0

# PostgreSQL for the Prefect server of several machines (docs/orchestration.md, "Several machines";
# tests/test_fleet.py): Debian's package, installed when missing (needs root; CI runs as root).
postgres: ## install PostgreSQL for a several-machine Prefect server (needs root)
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null; \
	  else echo "make postgres: PostgreSQL is not installed; as root: apt-get install postgresql" >&2; fi; }

# DVC experiments side by side (docs/orchestration.md, "Experiments"): the params that differ between them and
# the headline results (results/metrics.json), a column per experiment; EXPS="name ..." shows only those.
compare: $(STAMP) ## DVC experiments side by side: the params that differ and the headline results (EXPS="a b")
	$(BIN)/python -m multitab.evaluation.experiments $(EXPS)

ui: $(STAMP) $(ASSETS) ## the Prefect UI with the pipeline's deployment (flow runs, logs, artifacts)
	$(BIN)/python -m flows.deploy

# The speed and memory targets (benchmarks/, docs/benchmarks.md); "bench" is MultiTab-Bench.
# benchmarks/_*.py are modules the scripts share, not scripts.
benchmarks: $(STAMP) ## the speed and memory targets in benchmarks/ (docs/benchmarks.md)
	for b in benchmarks/[!_]*.py; do $(BIN)/python $$b || exit 1; done

clean-venv: ## remove the virtual environment
	rm -rf $(VENV)

# The validation pages (reports/validation/) written again where the validation stages were restored from the
# DVC cache (a fresh clone with a shared cache or a remote): the pages are no DVC output. The stages write the
# same verdicts, so no later stage re-runs; then the aggregate stage again, so that results/index.html links them.
validation-pages: $(STAMP) $(ASSETS) ## write the validation pages (reports/validation/) again after a restore from the DVC cache
	$(BIN)/dvc repro --force --single-item --glob 'validate_*'
	$(BIN)/dvc repro --force --single-item aggregate

# The MultiTab-Bench study (Figures 5 and 6 to convergence, several seeds; params `study`, run group
# runs.study): the same DVC stages and Prefect flow as `repro`, with the opt-in group `study` put in the DAG
# (runs.yaml); `make repro` and plain `dvc repro` leave it out.
# Outputs: results/study_report/ (report.md, figures, tables, metrics.csv).
study: $(STAMP) $(ASSETS) ## the MultiTab-Bench study: Figures 5-6 to convergence over several seeds -> results/study_report/
	$(BIN)/python -m flows.pipeline --groups study --targets 'group_report@study*'

# Where a study that is still training stands: the script of stage group_report@study over the runs finished
# so far (absent runs read `missing`), written to results/study_interim/, outside DVC; safe while `make study`
# runs (it only reads finished runs' metrics.json and curves).
study-interim: $(STAMP) ## the study's report over the runs finished so far -> results/study_interim/
	$(BIN)/python -m stages.aggregate_study --params params.yaml --runs results/study_runs --out results/study_interim

# The hyperparameter sweeps (run groups runs.sweep_*, docs/sweeps.md): every grid point, then the selection
# (hparams/swept/, which `train.hparams: swept` trains with) and results/sweeps/report.md.
sweep: $(STAMP) $(ASSETS) ## the hyperparameter sweeps and their selection -> hparams/swept/, results/sweeps/
	$(BIN)/python -m flows.pipeline --groups 'sweep_*' --targets sweep_select

# The attribution study (params `attribution`, run group runs.attribution; docs/study.md, "Attribution"): the
# paper's MultiTab-Bench claim arm by arm, from the authors' exact setup to the `paper` study, one factor at a
# time, through the same DVC stages and Prefect flow (a run two arms share is one train@ stage).
# Outputs: results/attribution_report/ (report.md, ladder.{csv,md}, figures/ladder.png).
attribution: $(STAMP) $(ASSETS) ## the attribution study, arm by arm -> results/attribution_report/
	$(BIN)/python -m flows.pipeline --groups attribution --targets group_report@attribution

# Both MultiTab-Net layers on the nine configurations of Figures 5 and 6 (params `attribution`: arms A6 and A7;
# docs/study.md, "Both layers"): one configuration's runs after another, so that each finished configuration can
# be recorded (results/study/README.md) before the next starts; resumable like every stage (checkpoints, the
# DVC cache). LAYER_CONFIGS: the seven the eight-arm record did not run (its two are reused, not retrained).
LAYER_CONFIGS ?= p06_pd234_t3 p02_pd3_t3 p10_pd3_t3 p06_pd4_t3 p06_pd5_t3 p06_pd3_t5 p06_pd3_t7
# Which of each configuration's runs: a glob over the rest of the run key, `<model>-<point>-<seed>` (default all
# of runs.attribution.seeds; seeds 3 and 4 of five: LAYER_RUNS='*-[34]'; docs/study.md, "Five seeds").
LAYER_RUNS ?= *
# The finished runs travel in git (flows/progress.py, results/study/progress/): loaded into DVC's cache first,
# so DVC restores them where it would train them again, and saved after each configuration's flow, even a
# failed one. After stopping it (Ctrl-C), `make layers-save` keeps what finished. Then the runs that reached the
# epoch cap still improving are continued until early stopping ends them (stages/continue_runs.py: the paper's
# rule, no cap that binds), into results/study/continued/ (commit it with results/study/progress/).
layers: $(STAMP) $(ASSETS) ## both MultiTab-Net layers on Figures 5-6's nine configurations, one configuration at a time
	$(BIN)/python -m flows.progress load
	@for c in $(LAYER_CONFIGS); do \
	  $(BIN)/python -m flows.pipeline --groups attribution \
	    --targets "train@attribution-$${c}_ho_std_fixed-$(LAYER_RUNS)"; \
	  rc=$$?; $(BIN)/python -m flows.progress save || exit $$?; test $$rc -eq 0 || exit $$rc; \
	  $(BIN)/python -m stages.continue_runs run --runs "attribution-$${c}_ho_std_fixed-$(LAYER_RUNS)" || exit $$?; done

layers-save: $(STAMP) ## keep the finished runs of an interrupted make layers (results/study/progress/)
	$(BIN)/python -m flows.progress save

# A committed record's runs that reached their epoch cap still improving, continued until early stopping ends
# them (CONTINUE_RECORD, e.g. results/study/layers_n100k_3seeds_9of9: its 5 capped runs; their seeds must be in
# runs.attribution.seeds). `make layers-continue CONTINUE_ACTION=list` only lists them; CONTINUE_RUNS (a glob
# over run keys, e.g. 'attribution-p06_pd3_t5_*') keeps only those: their configurations' data must be made.
CONTINUE_RECORD ?=
CONTINUE_ACTION ?= run
CONTINUE_RUNS ?=
layers-continue: $(STAMP) ## a record's runs that reached their epoch cap still improving, continued until early stopping
	set -f; $(BIN)/python -m stages.continue_runs $(CONTINUE_ACTION) $(if $(CONTINUE_RECORD),--record $(CONTINUE_RECORD)) \
	  $(if $(CONTINUE_RUNS),--runs '$(CONTINUE_RUNS)')

# The paired fp32/bf16 comparison (run group runs.study_bf16; docs/study.md, "bf16"): the study's runs of that
# group's configurations in fp32 (run group study, results/study_runs, shared with `make study`) and in bf16
# autocast (results/study_bf16_runs), through the same DVC stages and Prefect flow; then the comparison.
# Output: results/precision_pair/ (section.md, pair.csv, verdicts.csv, metrics.csv).
precision-pair: $(STAMP) $(ASSETS) ## the paired fp32/bf16 comparison -> results/precision_pair/
	set -f; $(BIN)/python -m flows.pipeline --groups study study_bf16 --targets $$($(BIN)/python -m multitab.evaluation.bench.precision targets)
	$(BIN)/python -m multitab.evaluation.bench.precision compare --out results/precision_pair
