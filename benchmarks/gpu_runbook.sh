#!/usr/bin/env bash
# The GPU measurements as prepared commands of at most 9 minutes each, so that each fits a limit of
# 10 minutes per command with start-up. Run from the repository root, the first command, then the
# second if time is left:
#
#   GIT_COMMIT=$(git rev-parse HEAD) bash benchmarks/gpu_runbook.sh [--tiny] [--steps "S ..."] [OUTDIR]
#   GIT_COMMIT=$(git rev-parse HEAD) bash benchmarks/gpu_runbook.sh --steps gpu [OUTDIR]
#
# Steps, in priority order; each has its own time limit and none starts after the deadline
# (DEADLINE_S, default 540 s from the start). The default steps are gpu30s, parity and seeds; gpu
# and throughput each need a command of their own. Times on the H200 of 2026-11-26 (commit 4948cac):
#   gpu30s      python -m transformer_lib.train --preset gpu-30s        -> gpu-30s.json       70 s
#               (ended after 55 s)
#   parity      benchmarks/parity.py --preset gpu, 1,000 updates (about 21 epochs), ours and
#               nn.Transformer for seeds $PARITY_SEEDS (default 3 4), all at once on the one GPU
#               (a fixed number of updates, so sharing the GPU changes time, not results), greedy
#               and beam-4 BLEU, each also decoded in float32 with the output lengths; joined with
#               seeds 0-2 of results/gpu-parity.json                 -> gpu-parity.json   240 s
#               (one seed, 2 processes: 108 s; two seeds, 4 processes: ~140 s)
#   seeds       benchmarks/parity.py at the cpu-30min recipe's shape (pre-LN, d 256, 2+2, dropout on
#               sub-layer outputs only, 1,024-token batches), float32, 500 updates, seeds 0-4, ours
#               and nn.Transformer: ten small processes at once on the one GPU, joined into one
#               record with a verdict per seed and on the means
#                                                 -> gpu-parity-cpu-30min-2x2-seeds.json 120 s
#               (at the earlier 3+3 shape, results/gpu-parity-cpu-30min-seeds.json: ended after 44 s)
#   gpu         python -m transformer_lib.train --preset gpu: 300 s of training, plus compiling
#               (~80 s), data and evaluation; it did not end within 330 s -> gpu-5min.json  480 s
#   throughput  benchmarks/train_throughput.py, compiled vs compiled    -> gpu-throughput.json
#               (compiling both models' shapes took ~225 s on the H200)                       280 s
# A step that hits its limit is stopped and the next one runs. The records carry provenance
# (device, torch, commit, date); commit them to results/ under the same names.
#
# --tiny: every step in a seconds-long CPU configuration, to check the script end to end without a
# GPU (tests/test_benchmarks_smoke.py runs it); OUTDIR then defaults to a temporary directory.
# OUTDIR defaults to $OUT (the device tool's folder that comes back) or results/. Data: read from
# $TRANSFORMER_LIB_DATA, default ./data (copy ../shared/data/multi30k there and carry it).
set -uo pipefail
PY=${PYTHON:-python3}
tiny=0
steps="gpu30s parity seeds"
while [ $# -gt 0 ]; do
  case $1 in
    --tiny) tiny=1; shift ;;
    --steps) steps=${2:?--steps needs a list, e.g. "gpu30s parity"}; shift 2 ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    -*) echo "unknown option $1 (see --help)"; exit 2 ;;
    *) break ;;
  esac
done
if [ "$tiny" = 1 ]; then out=${1:-$(mktemp -d)}; else out=${1:-${OUT:-results}}; fi
mkdir -p "$out"
export TRANSFORMER_LIB_DATA=${TRANSFORMER_LIB_DATA:-$PWD/data}
export PYTHONUNBUFFERED=1 PYTHONHASHSEED=0 MPLBACKEND=Agg PYTHONPATH=$PWD
deadline=$(( SECONDS + ${DEADLINE_S:-540} ))
runs=$(mktemp -d)                                      # run directories (checkpoints): not kept

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
    || echo "no nvidia-smi"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  # The device machine's .git may be missing or stale: the commit comes in as GIT_COMMIT.
  echo "commit: ${GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo 'unknown (set GIT_COMMIT)')}"
} 2>&1 | tee "$out/gpu-device.txt"

step() {   # step NAME LIMIT_S COMMAND...: run with min(LIMIT_S, time to the deadline), log to OUTDIR
  local name=$1 limit=$2; shift 2
  case " $steps " in *" $name "*) ;; *) return 0 ;; esac
  local left=$(( deadline - SECONDS ))
  if [ "$left" -lt 20 ]; then
    echo "=== $name: SKIPPED (${left} s left before the deadline)" | tee "$out/gpu-$name.log"
    return 0
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  echo "=== $name (limit ${limit} s): $*"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$out/gpu-$name.log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 124 ] && echo "=== $name: TIMED OUT (limit ${limit} s)" | tee -a "$out/gpu-$name.log"
  echo "=== $name: exit $rc after $(( SECONDS - t0 )) s" | tee -a "$out/gpu-$name.log"
}

# Recipe flags per step: the real ones, or seconds-long CPU stand-ins with --tiny.
if [ "$tiny" = 1 ]; then
  small=(--device cpu --no-amp --no-compile --d-model 32 --n-heads 2 --n-layers 1 --d-ff 64
         --vocab-size 500 --train-pairs 400 --batch-tokens 600 --warmup-steps 5)
  quick=("${small[@]}" --time-budget-s 3 --eval-sentences 10 --test-sentences 10 --beam-size 2)
  gpu30s=(--preset gpu-30s "${quick[@]}")
  gpu5=(--preset gpu "${quick[@]}")
  parity=(--preset gpu "${small[@]}" --updates 8 --val-sentences 8 --beam 2 --decode-float32)
  parity_seeds="0"; parity_prior=""
  seeds=(--preset cpu-30min "${small[@]}" --updates 4 --val-sentences 6); seed_list="0 1"
  throughput=(--tiny --device cpu)
else
  gpu30s=(--preset gpu-30s)
  gpu5=(--preset gpu --eval-every 0)
  parity=(--preset gpu --updates 1000 --beam 4 --decode-float32)
  # seeds 0-2 are in results/gpu-parity.json (2026-11-26); new seeds join them in one record
  parity_seeds=${PARITY_SEEDS:-3 4}; parity_prior=results/gpu-parity.json
  seeds=(--preset cpu-30min --device cuda --no-amp --updates 500); seed_list="0 1 2 3 4"
  throughput=(--steps 40 --rounds 3)
fi

step gpu30s 70 "$PY" -m transformer_lib.train "${gpu30s[@]}" --no-progress \
  --out-dir "$runs/gpu-30s" --results "$out/gpu-30s.json"

parity_both() {   # ours and nn.Transformer at every seed at once, one process each; one record
  local files=() m sd rc=0
  for sd in $PARITY_SEEDS; do
    for m in ours nn.Transformer; do
      "$PY" benchmarks/parity.py "${parity[@]}" --seed "$sd" --models "$m" \
        --json "$runs/parity-$m-$sd.json" > "$runs/parity-$m-$sd.log" 2>&1 &
      files+=("$runs/parity-$m-$sd.json")
    done
  done
  for job in $(jobs -p); do wait "$job" || rc=$?; done
  tail -n 12 "$runs"/parity-*.log
  [ "$rc" = 0 ] || return "$rc"
  # joined with the earlier seeds if the recipe is still theirs, else on their own
  "$PY" benchmarks/parity.py --combine $PARITY_PRIOR "${files[@]}" --json "$out/gpu-parity.json" \
    || "$PY" benchmarks/parity.py --combine "${files[@]}" --json "$out/gpu-parity.json"
}
# `timeout` runs a program, not a shell function: hand the function and its flags to a new bash.
export PY runs out PARITY_FLAGS="${parity[*]}" PARITY_SEEDS="$parity_seeds" \
  PARITY_PRIOR="$parity_prior"
step parity 240 bash -c "$(declare -f parity_both)"'; parity=($PARITY_FLAGS); parity_both'

seeds_all() {   # ours and nn.Transformer at every seed, one process each, all at once; one record
  local files=() m sd
  for sd in $SEED_LIST; do
    for m in ours nn.Transformer; do
      OMP_NUM_THREADS=1 "$PY" benchmarks/parity.py "${seeds[@]}" --seed "$sd" --models "$m" \
        --json "$runs/seeds-$m-$sd.json" > "$runs/seeds-$m-$sd.log" 2>&1 &
      files+=("$runs/seeds-$m-$sd.json")
    done
  done
  wait
  tail -n 3 "$runs"/seeds-*.log
  "$PY" benchmarks/parity.py --combine "${files[@]}" --json "$out/gpu-parity-cpu-30min-2x2-seeds.json"
}
export SEEDS_FLAGS="${seeds[*]}" SEED_LIST="$seed_list"
step seeds 120 bash -c "$(declare -f seeds_all)"'; seeds=($SEEDS_FLAGS); seeds_all'

step gpu 480 "$PY" -m transformer_lib.train "${gpu5[@]}" --no-progress \
  --out-dir "$runs/gpu-5min" --results "$out/gpu-5min.json"

step throughput 280 "$PY" benchmarks/train_throughput.py "${throughput[@]}" \
  --json "$out/gpu-throughput.json"

rm -rf "$runs"
ls -la "$out"
