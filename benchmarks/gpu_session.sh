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
# Checked on a CPU in a virtual environment holding only those packages and a tiny scale:
# `DEVICE=cpu SAMPLES=4000 MEASURE=4000 ROWS=4096 MEMBERS=2 bash benchmarks/gpu_session.sh`).
set -u
OUT=${OUT:-results/benchmarks/gpu}
DEVICE=${DEVICE:-cuda}
SAMPLES=${SAMPLES:-1000000}     # the paper's samples per configuration
MEASURE=${MEASURE:-100000}      # measured at this many samples, scaled linearly to SAMPLES
ROWS=${ROWS:-65536}             # stacked_throughput's training rows per epoch
MEMBERS=${MEMBERS:-5}           # seeds per stack (the study's 5)
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
record=results/study/multitab_bench_n100k_3seeds_cap40   # its median epochs per model
step() { echo "== $*"; local t0=$SECONDS; timeout "$@"; echo "== rc=$? in $((SECONDS - t0)) s"; }
step 180 $PY benchmarks/stacked_throughput.py --device "$DEVICE" --members "$MEMBERS" --rows "$ROWS" --epochs 3 \
  --threads 2 --out "$OUT/stacked_throughput_$DEVICE.json"
step 150 $PY benchmarks/study_cost.py --device "$DEVICE" --n-samples "$SAMPLES" --seeds 5 --record "$record" \
  --measure-samples "$MEASURE" --stack --workers 1 --out "$OUT/study_cost_${DEVICE}_stacked.json"
step 100 $PY benchmarks/study_cost.py --device "$DEVICE" --n-samples "$SAMPLES" --seeds 5 --record "$record" \
  --measure-samples "$MEASURE" --workers 1 --out "$OUT/study_cost_$DEVICE.json"
if [ "$SHARE" -gt 1 ]; then
  mkdir -p "$OUT/concurrency"
  echo "== $SHARE stacked study_cost processes at once"
  t0=$SECONDS
  pids=()
  for i in $(seq "$SHARE"); do
    timeout 200 $PY benchmarks/study_cost.py --device "$DEVICE" --n-samples "$SAMPLES" --seeds 5 --record "$record" \
      --measure-samples "$MEASURE" --stack --workers "$SHARE" \
      --out "$OUT/concurrency/study_cost_${DEVICE}_stacked_${SHARE}way_$i.json" > "/tmp/gpu_session_way$i.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"   # these only: a bare `wait` also waits for the log's tee, which never ends
  echo "== $SHARE at once: $((SECONDS - t0)) s of wall time (one alone: the stacked step above)"
  tail -n 3 /tmp/gpu_session_way*.log   # into this log: the device tool returns at most 8 files
fi
