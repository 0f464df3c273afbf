#!/usr/bin/env bash
# Every device measurement of the paper's scale in one prepared run for a lent GPU machine, in under 10 minutes
# (each step's time limit below; their sum is 560 s): records that name card, commit, torch, precision,
# determinism and CUDA-graph use, under $OUT (default results/benchmarks/gpu), and the log gpu_session.log.
#   1. the GPU-only tests (pytest -m gpu: the captured step against the uncaptured one, stacks of seeds and of
#      datasets on CUDA), when pytest can be imported (see the wheels below); else the log says SKIPPED;
#   2. the study at the paper's scale (1,000,000 samples x 5 seeds x the 9 configurations x 5 models) PROJECTED
#      in its best fp32 configuration: every configuration of one task count x its seeds as one stack per
#      model, the step captured as a CUDA graph, deterministic kernels (study_cost.py --stack-data --cuda-graph;
#      its fraction_of_peak is the share of the measured matrix-product rate per model);
#   3. the cost of determinism: MultiTab-Net (the one model with attention kernels) measured the same way with
#      train.deterministic false (record names it);
#   4. the precision control: tf32, bf16 and cuda_graph each against fp32 and the one-ulp nudge, 5 seeds
#      (precision_control.py; an option is acceptable unless the exact test rejects it);
#   5. one configuration for real at 1,000,000 samples x 5 models x 5 seeds against its projection
#      (projection_check.py: within 15 %?), seeds stacked and the step captured, as in step 2.
# Optional (off unless asked): STACKED=1 adds stacked_throughput.py (M separate runs against one stack), and
# SHARE=k > 1 adds k stacked study_cost processes sharing the card. The earlier H100 session's records are in
# results/benchmarks/gpu/ (docs/benchmarks.md, "The paper's scale on one H100").
#
# The GPU image has torch, numpy, pandas, pyarrow, PyYAML and scikit-learn but not rtdl_revisiting_models
# (imported by the FT-Transformer module) nor pytest: prepare wheels here first, once, into the ignored folder
# .whl/ (pure-Python wheels, except rpds-py: give the image's Python version, e.g. --python-version 3.11):
#   .venv/bin/pip download --no-deps --only-binary=:all: -d .whl rtdl_revisiting_models==0.0.2 pytest==9.2.0 \
#     pluggy==1.7.0 iniconfig==2.3.1 packaging==26.4 jsonschema==4.26.0 attrs==26.1.0 referencing==0.37.0 \
#     rpds-py==2026.9.1 jsonschema-specifications==2025.9.1 typing_extensions==4.16.0
# then run on the device with `carry: [".whl"]` and the command `MULTITAB_COMMIT=<sha> bash benchmarks/gpu_session.sh`
# (the working tree travels without its git history: the records take the commit from MULTITAB_COMMIT).
# Check it before spending device time: `bash benchmarks/gpu_session.sh --dry-run` runs every step on the CPU at
# tiny sizes (DEVICE=cpu, 2,000 samples measured at 1,000, stacks of 2 seeds, 3 epochs; each step's time limit x
# SLACK = 4; records under a temporary $OUT; tests/test_gpu_session.py, marked slow). It exits non-zero when a
# step failed. Variables set in the environment still win.
set -u
if [ "${1:-}" = "--dry-run" ]; then
  DEVICE=${DEVICE:-cpu} SAMPLES=${SAMPLES:-2000} MEASURE=${MEASURE:-1000} SEEDS=${SEEDS:-2} CAP=${CAP:-3}
  PC_SAMPLES=${PC_SAMPLES:-600} PC_EPOCHS=${PC_EPOCHS:-1} PC_SEEDS=${PC_SEEDS:-5} SLACK=${SLACK:-4}
  PY=${PY:-.venv/bin/python} OUT=${OUT:-$(mktemp -d /tmp/gpu_session_dry.XXXXXX)}
elif [ $# -gt 0 ]; then
  echo "usage: bash benchmarks/gpu_session.sh [--dry-run]" >&2; exit 2
fi
OUT=${OUT:-results/benchmarks/gpu}
DEVICE=${DEVICE:-cuda}
SAMPLES=${SAMPLES:-1000000}     # the paper's samples per configuration
MEASURE=${MEASURE:-100000}      # measured at this many samples, scaled linearly to SAMPLES
SEEDS=${SEEDS:-5}               # the paper's 5 (one stack of them)
CAP=${CAP:-}                    # the real run's epoch cap (empty: the study's, 40)
CONFIG=${CONFIG:-p06_pd3_t3}    # the configuration trained for real
PC_SAMPLES=${PC_SAMPLES:-20000} PC_EPOCHS=${PC_EPOCHS:-5} PC_SEEDS=${PC_SEEDS:-5}   # the precision control's runs
SLACK=${SLACK:-1}               # each step's time limit x this
STACKED=${STACKED:-0}           # 1: also stacked_throughput.py
SHARE=${SHARE:-1}               # > 1: also SHARE stacked study_cost processes sharing the card
PY=${PY:-python3}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_session.log") 2>&1
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" > /dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:src:.
else
  export PYTHONPATH=src:.
fi
nvidia-smi -L 2>/dev/null || echo "no nvidia-smi (DEVICE=$DEVICE)"
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
record=results/study/multitab_bench_n100k_3seeds_cap40   # its epochs per run (taken at 100,000 samples)
failed=0   # the script's exit status: 1 when any step failed (the later steps still run)
step() {
  echo "== $*"; local t0=$SECONDS rc
  timeout "$@"; rc=$?
  echo "== rc=$rc in $((SECONDS - t0)) s"; [ "$rc" -eq 0 ] || failed=1
}
cost="--device $DEVICE --n-samples $SAMPLES --seeds $SEEDS --record $record --measure-samples $MEASURE --workers 1"
if [ "$DEVICE" = "cpu" ]; then
  echo "== SKIPPED pytest -m gpu: DEVICE=cpu"
elif $PY -c "import pytest, jsonschema" 2>/dev/null; then
  step $((45 * SLACK)) $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_training_graphs.py \
    tests/test_training_stacked_data.py tests/test_training_stacked.py tests/test_training.py
else
  echo "== SKIPPED pytest -m gpu: pytest or jsonschema cannot be imported (carry their wheels in .whl/)"
fi
step $((120 * SLACK)) $PY benchmarks/study_cost.py $cost --stack-data --cuda-graph \
  --out "$OUT/study_cost_${DEVICE}_stacked_data_graph.json"
step $((60 * SLACK)) $PY benchmarks/study_cost.py $cost --stack-data --cuda-graph --deterministic false \
  --models multitab_net --out "$OUT/study_cost_${DEVICE}_stacked_data_graph_nondeterministic_multitab_net.json"
step $((75 * SLACK)) $PY benchmarks/precision_control.py --device "$DEVICE" --samples "$PC_SAMPLES" \
  --epochs "$PC_EPOCHS" --seeds "$PC_SEEDS" --options tf32,bf16,cuda_graph --out "$OUT/precision_control_$DEVICE.json"
step $((240 * SLACK)) $PY benchmarks/projection_check.py --device "$DEVICE" --config "$CONFIG" --n-samples "$SAMPLES" \
  --measure-samples "$MEASURE" --seeds "$SEEDS" --record "$record" --stack --cuda-graph ${CAP:+--max-epochs "$CAP"} \
  --out "$OUT/projection_check_$DEVICE.json"
if [ "$STACKED" = "1" ]; then
  step $((180 * SLACK)) $PY benchmarks/stacked_throughput.py --device "$DEVICE" --members "$SEEDS" --rows 65536 \
    --epochs 3 --threads 2 --cuda-graph --out "$OUT/stacked_throughput_$DEVICE.json"
fi
if [ "$SHARE" -gt 1 ]; then
  mkdir -p "$OUT/concurrency"
  echo "== $SHARE stacked study_cost processes at once"
  t0=$SECONDS
  pids=()
  for i in $(seq "$SHARE"); do
    timeout $((200 * SLACK)) $PY benchmarks/study_cost.py $cost --stack --cuda-graph --workers "$SHARE" \
      --out "$OUT/concurrency/study_cost_${DEVICE}_stacked_${SHARE}way_$i.json" > "/tmp/gpu_session_way$i.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do   # these only: a bare `wait` also waits for the log's tee, which never ends
    wait "$pid" || failed=1
  done
  echo "== $SHARE at once: $((SECONDS - t0)) s of wall time"
  tail -n 3 /tmp/gpu_session_way*.log   # into this log: the device tool returns at most 8 files
fi
echo "== gpu_session: $([ "$failed" -eq 0 ] && echo 'every step passed' || echo 'a step FAILED') (records in $OUT)"
exit "$failed"
