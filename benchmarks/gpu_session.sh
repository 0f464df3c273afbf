#!/usr/bin/env bash
# Issue 27 item 4 in one prepared run for a lent GPU machine (about 6 minutes of device time on an H100): stacked
# against separate training of every Figure 5/6 model at the study's shapes, and the paper-scale study
# (1,000,000 samples x 5 seeds x the 9 configurations x 5 models) projected from measured epochs, separate,
# with seeds stacked, and with SHARE stacked stages on the GPU at once (each its own process, projecting with
# --workers SHARE from the epochs it measured while the others ran; SHARE=1 skips it). Writes its records and
# its log under $OUT (default results/benchmarks/gpu; the shared runs' under $OUT/concurrency). Measured
# 2026-11-27 on an H100: docs/benchmarks.md, "The paper's scale on one H100".
#
# The GPU image has torch, numpy, pandas, pyarrow, PyYAML and scikit-learn but not rtdl_revisiting_models
# (imported by the FT-Transformer module): prepare it here first, once, into the ignored folder .whl/:
#   .venv/bin/pip download --no-deps --only-binary=:all: -d .whl rtdl_revisiting_models==0.0.2
# then run on the device with `carry: [".whl"]` and the command `MULTITAB_COMMIT=<sha> bash benchmarks/gpu_session.sh`
# (the working tree travels without its git history: the records take the commit from MULTITAB_COMMIT).
# Check it before spending device time: `bash benchmarks/gpu_session.sh --dry-run` runs every step on the CPU at
# tiny sizes (DEVICE=cpu, 2,000 samples, stacks of 2 seeds, 2 stages sharing, 256 rows in stacked_throughput,
# each step's time limit x SLACK = 4; records under a temporary $OUT; tests/test_gpu_session.py, marked slow: 7.6
# minutes on the 2-core CPU at nice 19 beside a load of 4.5, most of it process and model start-up). It exits
# non-zero when a step failed. Variables set in the environment still win.
set -u
if [ "${1:-}" = "--dry-run" ]; then
  TEPOCHS=${TEPOCHS:-2} DEVICE=${DEVICE:-cpu} SAMPLES=${SAMPLES:-2000} MEASURE=${MEASURE:-2000} ROWS=${ROWS:-256} MEMBERS=${MEMBERS:-2}
  SEEDS=${SEEDS:-2} SHARE=${SHARE:-2} SLACK=${SLACK:-4} PY=${PY:-.venv/bin/python}
  OUT=${OUT:-$(mktemp -d /tmp/gpu_session_dry.XXXXXX)}
elif [ $# -gt 0 ]; then
  echo "usage: bash benchmarks/gpu_session.sh [--dry-run]" >&2; exit 2
fi
OUT=${OUT:-results/benchmarks/gpu}
DEVICE=${DEVICE:-cuda}
SAMPLES=${SAMPLES:-1000000}     # the paper's samples per configuration
MEASURE=${MEASURE:-100000}      # measured at this many samples, scaled linearly to SAMPLES
ROWS=${ROWS:-65536}             # stacked_throughput's training rows per epoch
MEMBERS=${MEMBERS:-5}           # stacked_throughput's seeds per stack
SEEDS=${SEEDS:-5}               # the projected study's seeds (the paper's 5; stacked: one stack of them)
SLACK=${SLACK:-1}               # each step's time limit x this
SHARE=${SHARE:-3}               # stacked stages sharing the GPU in the last step
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
step $((180 * SLACK)) $PY benchmarks/stacked_throughput.py --device "$DEVICE" --members "$MEMBERS" --rows "$ROWS" --epochs "${TEPOCHS:-3}" \
  --threads 2 --out "$OUT/stacked_throughput_$DEVICE.json"
step $((150 * SLACK)) $PY benchmarks/study_cost.py --device "$DEVICE" --n-samples "$SAMPLES" --seeds "$SEEDS" --record "$record" \
  --measure-samples "$MEASURE" --stack --workers 1 --out "$OUT/study_cost_${DEVICE}_stacked.json"
step $((100 * SLACK)) $PY benchmarks/study_cost.py --device "$DEVICE" --n-samples "$SAMPLES" --seeds "$SEEDS" --record "$record" \
  --measure-samples "$MEASURE" --workers 1 --out "$OUT/study_cost_$DEVICE.json"
if [ "$SHARE" -gt 1 ]; then
  mkdir -p "$OUT/concurrency"
  echo "== $SHARE stacked study_cost processes at once"
  t0=$SECONDS
  pids=()
  for i in $(seq "$SHARE"); do
    timeout $((200 * SLACK)) $PY benchmarks/study_cost.py --device "$DEVICE" --n-samples "$SAMPLES" --seeds "$SEEDS" --record "$record" \
      --measure-samples "$MEASURE" --stack --workers "$SHARE" \
      --out "$OUT/concurrency/study_cost_${DEVICE}_stacked_${SHARE}way_$i.json" > "/tmp/gpu_session_way$i.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do   # these only: a bare `wait` also waits for the log's tee, which never ends
    wait "$pid" || failed=1
  done
  echo "== $SHARE at once: $((SECONDS - t0)) s of wall time (one alone: the stacked step above)"
  tail -n 3 /tmp/gpu_session_way*.log   # into this log: the device tool returns at most 8 files
fi
echo "== gpu_session: $([ "$failed" -eq 0 ] && echo 'every step passed' || echo 'a step FAILED') (records in $OUT)"
exit "$failed"
