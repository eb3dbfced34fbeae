#!/usr/bin/env bash
# Every GPU measurement the issues ask for, in stages that each fit one 10-minute call of a lent GPU
# machine (30 minutes of GPU time per session). Run from the repository root:
#
#   bash benchmarks/gpu_runbook.sh STAGE [OUTDIR]
#
# STAGE (in the order to run them; the first three fit one session):
#   capstone  execute notebooks/18_capstone.ipynb on the GPU (the `gpu` recipe, 5 min of training)
#             -> OUTDIR/18_capstone.ipynb (executed) and OUTDIR/multi30k.json      (issue 7)
#   quick     python -m transformer_lib.train --preset gpu-30s (eager, then compiled), then exercise 3's character model
#             with 30 s and 180 s budgets                                         (issues 7, 8)
#   bench     the attention, model, decoding and training-throughput benchmarks   (issues 4-7)
#   ablate    the capstone's ablation rows at a fixed number of epochs, all rows at once on the one GPU
#             (a fixed epoch count, not a time budget, so sharing the GPU does not change them); if
#             they do not fit one call, run them in two: ROWS="recipe layers6 dropout01", then the rest
#
# OUTDIR defaults to $OUT (set by the device tool, which brings back at most 8 files) or results/gpu. Each command has its own time
# limit, so one that hangs cannot eat the whole call; every log is kept. Data: the datasets are read
# from $TRANSFORMER_LIB_DATA, default ./data (copy ../shared/data there and carry it). Python packages
# the GPU machine lacks (nbclient, ipykernel and their dependencies, for `capstone`) are installed from
# ./.whl when it exists (see README.md, "Measuring on a GPU").
set -uo pipefail
PY=${PYTHON:-python3}
stage=${1:?usage: bash benchmarks/gpu_runbook.sh capstone|quick|bench|ablate [OUTDIR]}
out=${2:-${OUT:-results/gpu}}
mkdir -p "$out"
export TRANSFORMER_LIB_DATA=${TRANSFORMER_LIB_DATA:-$PWD/data}
export PYTHONUNBUFFERED=1 PYTHONHASHSEED=0 MPLBACKEND=Agg
if [ -d .whl ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "installing the carried wheels failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  # The device machine's copy has no .git: pass the commit in, e.g. GIT_COMMIT=$(git rev-parse HEAD) here.
  git rev-parse HEAD 2>/dev/null || echo "commit: ${GIT_COMMIT:-unknown (no .git; set GIT_COMMIT)}"; } 2>&1 | tee "$out/device.txt"

step() {   # step NAME SECONDS COMMAND...: run with a time limit, log to OUTDIR/NAME.log
  local name=$1 limit=$2; shift 2
  echo "=== $name (limit ${limit}s): $*"
  local t0=$SECONDS
  # A pipeline, not `> >(tee ...)`: the shell waits for tee to write the whole log before the exit
  # line is appended (with a process substitution the line could land first and be overwritten).
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 124 ] && echo "=== $name: TIMED OUT (limit ${limit}s)" | tee -a "$out/$name.log"
  echo "=== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$out/$name.log"
}

case $stage in
  capstone)
    # The notebook picks the `gpu` recipe when CUDA is available. Its kernel runs in notebooks/, so the
    # run directory is notebooks/runs/capstone-*; the record goes to results/multi30k.json when the
    # copy has .git, else to that run directory's results.json (the device machine's copy has no .git).
    export RUNBOOK_OUT=$out
    # Figures go into the notebook's outputs (the Agg backend above would drop them).
    export MPLBACKEND=module://matplotlib_inline.backend_inline
    stamp=$(mktemp)                          # a record newer than this was written by this run
    step capstone 560 "$PY" - <<'EOF'
import os
import signal

import nbformat
from nbclient import NotebookClient


def stop(signum, frame):       # `timeout` sends SIGTERM at the step's limit: save what ran, then exit
    raise SystemExit(f"stopped by signal {signum} (the step's time limit)")


signal.signal(signal.SIGTERM, stop)
nb = nbformat.read("notebooks/18_capstone.ipynb", as_version=4)
try:
    NotebookClient(nb, timeout=540, kernel_name="python3", resources={"metadata": {"path": "notebooks"}}).execute()
finally:
    nbformat.write(nb, os.environ.get("RUNBOOK_OUT", "results/gpu") + "/18_capstone.ipynb")
EOF
    record=$(find results/multi30k.json notebooks/runs/capstone-*/results.json -newer "$stamp" 2>/dev/null | head -1)
    if [ -n "$record" ]; then cp "$record" "$out/multi30k.json" && echo "results record: $record"
    else echo "no results record written"; fi
    rm -f "$stamp"
    ;;
  quick)
    # The preset runs eager; its 30 s include compilation, so it is measured compiled as well.
    step gpu30s 110 "$PY" -m transformer_lib.train --preset gpu-30s --out-dir runs/gpu-30s \
      --results "$out/gpu-30s.json" --no-progress
    step gpu30s-compiled 160 "$PY" -m transformer_lib.train --preset gpu-30s --compile --out-dir runs/gpu-30s-compiled \
      --results "$out/gpu-30s-compiled.json" --no-progress
    step charmodel 290 "$PY" benchmarks/char_model_gpu.py --budgets 30 180
    ;;
  bench)
    step attention 75 "$PY" benchmarks/attention_benchmark.py --device cuda
    step attention-causal 45 "$PY" benchmarks/attention_benchmark.py --device cuda --causal --impls fast fast-mask torch
    step model 180 "$PY" benchmarks/model_benchmark.py --device cuda --size base
    step decoding 50 "$PY" benchmarks/decoding_benchmark.py --device cuda
    step throughput 220 "$PY" benchmarks/train_throughput.py --json "$out/throughput.json"
    ;;
  ablate)
    # Rows of chapter 18's ablation table, all at once on the one GPU; each trains EPOCHS epochs with
    # no time budget, so sharing the GPU changes how long they take, not what they reach. ROWS picks some.
    epochs=${EPOCHS:-20}
    common=(--preset gpu --time-budget-s 0 --epochs "$epochs" --eval-every 0 --no-progress)
    declare -A flags=([recipe]="" [layers6]="--n-layers 6" [dropout01]="--dropout 0.1 --attn-dropout 0.1 --ffn-dropout 0.1"
                      [preln]="--norm-first" [nols]="--label-smoothing 0" [vocab16k]="--vocab-size 16000"
                      [noavg]="--average-last 1")
    for name in ${ROWS:-recipe layers6 dropout01 preln nols vocab16k noavg}; do
      # shellcheck disable=SC2086
      step "ablate-$name" 540 "$PY" -m transformer_lib.train "${common[@]}" --out-dir "runs/ablate-$name" \
        --results "$out/ablate-$name.json" ${flags[$name]} &
    done
    wait
    # The device tool brings back at most 8 files: one archive holds every row's log and record.
    (cd "$out" && tar czf ablate.tgz ablate-*) && rm -f "$out"/ablate-*
    ;;
  *) echo "unknown stage $stage"; exit 2 ;;
esac
ls -la "$out"
