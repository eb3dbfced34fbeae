#!/usr/bin/env bash
# The GPU measurements as two prepared commands that fit in 15 minutes of GPU time with their
# start-ups (about 30 s each), each under 10 minutes; optional steps come third, only if time is
# left. Run from the repository root:
#
#   GIT_COMMIT=$(git rev-parse HEAD) bash benchmarks/tools/gpu_runbook.sh --call 1 [OUTDIR]   # < 560 s
#   GIT_COMMIT=$(git rev-parse HEAD) bash benchmarks/tools/gpu_runbook.sh --call 2 [OUTDIR]   # < 330 s
#   GIT_COMMIT=$(git rev-parse HEAD) bash benchmarks/tools/gpu_runbook.sh --steps "S ..." [OUTDIR]
#   bash benchmarks/tools/gpu_runbook.sh --tiny --call 1|--call 2|--steps "S ..."          # CPU check
#
# Call 1 (step gpu; DEADLINE_S default 545, step limit 540 s): python -m transformer_lib.train
#   --preset gpu, its 300 s of training unchanged, eager (compiling took 161 s of them on the H200 of
#   2026-11-28 and did not pay: transformer_lib/recipe.py, above PRESETS)   -> gpu-5min.json (and
#   gpu-5min.history.json); the record's "startup" keeps the seconds before training, the seconds
#   compiling and the training clock after each of the first 100 updates. Expected ~350 s:
#   start-up, data and tokenizer ~20 s, 300 s, epoch snapshots ~15 s, the end (checkpoint, last and
#   averaged weights on validation, test greedy and beam 4) ~20 s. Why it is a call of its own:
#   - 300 s of training plus start-up and the end's evaluation do not fit beside another step.
#   - --eval-every 0 (kept): the preset evaluates every 10 epochs, with beam search, on all 1,014
#     validation sentences, the clock paused; that is ~18 evaluations of ~5 s on top of the 300 s.
#     It is evaluated only at the end.
#   - --checkpoint-every 1000000000: no full checkpoint (weights and Adam moments, ~315 MB) every
#     2,000 updates; the last one is still written.
#   - run directory in /dev/shm where it has 4 GB free: averaging the last 5 epoch snapshots writes
#     the 105 MB of weights after every epoch, ~180 times (the clock paused).
#   eval_every and checkpoint_every are run-only fields (recipe.RUN_ONLY) and the run directory is
#   no field of the recipe: what trains is the preset's recipe.
# Call 2 (step pair30s; DEADLINE_S default 320, step limit 300 s): the gpu-30s recipe at equal time,
#   ours and then nn.Transformer (benchmarks/experiments/parity.py --equal-time: the capstone's own stack, one
#   tokenizer, the same batches in the same order, the recipe's 30 s of training each, eager, the
#   recipe's precision), each in a fresh process so that each pays a fresh start, never sharing the
#   GPU; validation NLL, greedy and beam-4 BLEU of each, and the ratio of their updates and tokens/s
#   in one record                                                      -> gpu-30s-pair.json
#   Every run keeps the clock after each of its first 100 updates ("startup"), so the record shows
#   where a 30-second run's start goes (470 updates on 2026-11-28 against 920 on 2026-11-26).
#   Expected ~160 s: each process ~15 s of start-up and tokenizer, 30 s, ~30 s of validation
#   decoding (nn.Transformer has no KV cache: its beam search is the slower).
# Both calls, with ~30 s of start-up each: ~30 + ~350 + ~30 + ~160 = ~570 s of the 900 s expected;
# at their deadlines 30 + 545 + 30 + 320 = 925 s would not fit, so if call 1 ran long, run call 2
# with DEADLINE_S = the device time left less 45 s.
# Optional steps (--steps, in this order; each with its own limit, none starting after the deadline,
# DEADLINE_S default 540 s). Times on the H200 of 2026-11-26 (commit 4948cac):
#   gpu30s      python -m transformer_lib.train --preset gpu-30s        -> gpu-30s.json       70 s
#               (ended after 55 s)
#   parity      benchmarks/experiments/parity.py --preset gpu, 1,000 updates (about 21 epochs), ours and
#               nn.Transformer for seeds $PARITY_SEEDS (default 3 4), all at once on the one GPU
#               (a fixed number of updates, so sharing the GPU changes time, not results), greedy
#               and beam-4 BLEU, each also decoded in float32 with the output lengths; joined with
#               seeds 0-2 of results/gpu-parity.json                 -> gpu-parity.json   240 s
#               (one seed, 2 processes: 108 s; two seeds, 4 processes: ~140 s)
#   seeds       benchmarks/experiments/parity.py at the cpu-30min recipe's shape (pre-LN, d 256, 2+2, dropout on
#               sub-layer outputs only, 1,024-token batches), float32, 500 updates, seeds 0-4, ours
#               and nn.Transformer: ten small processes at once on the one GPU, joined into one
#               record with a verdict per seed and on the means
#                                                 -> gpu-parity-cpu-30min-2x2-seeds.json 120 s
#               (at the earlier 3+3 shape, results/gpu-parity-cpu-30min-seeds.json: ended after 44 s)
#   beam        the beam diagnosis: benchmarks/experiments/gpu30s_sweep.py --variants $BEAM_VARIANT (default
#               preset) --beam-table: 30 s of training, then validation BLEU and output lengths of
#               greedy and beam 4 at length penalties 0, 0.6, 1.0, 1.4, in bfloat16 and float32
#               (gpu-30s made 32.7 greedy and 32.7 beam)                -> gpu-30s-beam.json  150 s
#   throughput  benchmarks/speed/train_throughput.py, compiled vs compiled    -> gpu-throughput.json
#               (compiling both models' shapes took ~225 s on the H200)                       280 s
#   sweep       benchmarks/experiments/gpu30s_sweep.py, up to five variants of the gpu-30s recipe (its
#               docstring gives each and the evidence for it), one at a time, each in a fresh
#               process, 30 s each, scored on validation; the winner chosen on validation alone,
#               and only the winner translates test_2016_flickr    -> gpu-30s-sweep.json    320 s
#               (268 s on the H200 of 2026-11-28; a smaller DEADLINE_S drops the last variants)
#   wmt14       benchmarks/speed/wmt14_throughput.py: the paper's base and big models (Table 3,
#               vocabulary 37,000) at 800 sentences x 32 positions a step (25,600 a side, about
#               the paper's update), bf16 autocast, 20 timed steps each; tokens/s, the fraction of
#               $PEAK_TFLOPS (default 989, an H100/H200's dense bf16 peak) and the hours to
#               100,000 and 300,000 updates (limit 120 s; not yet run on a GPU)
#                                                               -> wmt14-throughput-gpu.json
#   gpu         call 1's step                                                                  540 s
#   pair30s     call 2's step                                                                  300 s
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
steps=""
call=""
while [ $# -gt 0 ]; do
  case $1 in
    --tiny) tiny=1; shift ;;
    --call) call=${2:?--call needs 1 or 2}; shift 2 ;;
    --steps) steps=${2:?--steps needs a list, e.g. "gpu30s parity"}; shift 2 ;;
    -h|--help) awk 'NR == 1 {next} /^#/ {print; next} {exit}' "$0"; exit 0 ;;
    -*) echo "unknown option $1 (see --help)"; exit 2 ;;
    *) break ;;
  esac
done
case "$call" in
  1) steps=gpu; default_deadline=545 ;;
  2) steps=pair30s; default_deadline=320 ;;
  "") default_deadline=540
      if [ -z "$steps" ]; then
        echo "choose --call 1, --call 2 or --steps \"S ...\" (see --help)"; exit 2
      fi ;;
  *) echo "--call takes 1 or 2, not $call"; exit 2 ;;
esac
if [ "$tiny" = 1 ]; then out=${1:-$(mktemp -d)}; else out=${1:-${OUT:-results}}; fi
mkdir -p "$out"
export TRANSFORMER_LIB_DATA=${TRANSFORMER_LIB_DATA:-$PWD/data}
export PYTHONUNBUFFERED=1 PYTHONHASHSEED=0 MPLBACKEND=Agg PYTHONPATH=$PWD
deadline=$(( SECONDS + ${DEADLINE_S:-$default_deadline} ))
# Run directories (checkpoints, snapshots): not kept. In memory where /dev/shm has 4 GB free (the
# gpu step writes ~180 epoch snapshots of 105 MB), else on disk; always on disk with --tiny.
shm_kb=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {print $4}')
if [ "$tiny" = 0 ] && [ "${shm_kb:-0}" -ge 4194304 ]; then runs=$(mktemp -d -p /dev/shm)
else runs=$(mktemp -d); fi
trap 'rm -rf "$runs"' EXIT

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
    || echo "no nvidia-smi"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  # The device machine's .git may be missing or stale: the commit comes in as GIT_COMMIT.
  echo "commit: ${GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo 'unknown (set GIT_COMMIT)')}"
  echo "steps: $steps; deadline ${DEADLINE_S:-$default_deadline} s; runs in $runs"
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
# Call 1: the preset's recipe; evaluation at the end only, and no checkpoint before the last one
# (run-only fields: see the header).
gpu5_run=(--eval-every 0 --checkpoint-every 1000000000)
if [ "$tiny" = 1 ]; then
  small=(--device cpu --no-amp --no-compile --d-model 32 --n-heads 2 --n-layers 1 --d-ff 64
         --vocab-size 500 --train-pairs 400 --batch-tokens 600 --warmup-steps 5)
  quick=("${small[@]}" --time-budget-s 3 --eval-sentences 10 --test-sentences 10 --beam-size 2)
  gpu30s=(--preset gpu-30s "${quick[@]}")
  gpu5=(--preset gpu "${gpu5_run[@]}" "${quick[@]}")
  parity=(--preset gpu "${small[@]}" --updates 8 --val-sentences 8 --beam 2 --decode-float32)
  pair=(--preset gpu-30s "${small[@]}" --time-budget-s 3 --val-sentences 8 --beam 2)
  parity_seeds="0"; parity_prior=""
  seeds=(--preset cpu-30min "${small[@]}" --updates 4 --val-sentences 6); seed_list="0 1"
  throughput=(--tiny --device cpu)
  wmt14tp=(--tiny --device cpu)
  # two of the five variants (each one is a process of its own: seconds of start-up on this CPU);
  # tests/test_benchmarks_smoke.py parses all five and checks the choice with a fake trainer
  sweep=(--variants preset budget-d512 -- "${small[@]}" --time-budget-s 1 --eval-sentences 10
         --test-sentences 10 --beam-size 2)
  beam=(--variants "${BEAM_VARIANT:-preset}" --beam-table --beams 2 --alphas 0.6 -- "${small[@]}"
        --time-budget-s 1 --eval-sentences 10 --test-sentences 10 --beam-size 2)
else
  gpu30s=(--preset gpu-30s)
  gpu5=(--preset gpu "${gpu5_run[@]}")
  parity=(--preset gpu --updates 1000 --beam 4 --decode-float32)
  pair=(--preset gpu-30s --beam 4)
  # seeds 0-2 are in results/gpu-parity.json (2026-11-26); new seeds join them in one record
  parity_seeds=${PARITY_SEEDS:-3 4}; parity_prior=results/gpu-parity.json
  seeds=(--preset cpu-30min --device cuda --no-amp --updates 500); seed_list="0 1 2 3 4"
  throughput=(--steps 40 --rounds 3)
  wmt14tp=(--device cuda --amp --rows 800 --length 32 --steps 20 --warmup 3
           --peak-tflops "${PEAK_TFLOPS:-989}")
  sweep=()
  beam=(--variants "${BEAM_VARIANT:-preset}" --beam-table)
fi

step gpu30s 70 "$PY" -m transformer_lib.train "${gpu30s[@]}" --no-progress \
  --out-dir "$runs/gpu-30s" --results "$out/gpu-30s.json"

parity_both() {   # ours and nn.Transformer at every seed at once, one process each; one record
  local files=() m sd rc=0
  for sd in $PARITY_SEEDS; do
    for m in ours nn.Transformer; do
      "$PY" benchmarks/experiments/parity.py "${parity[@]}" --seed "$sd" --models "$m" \
        --json "$runs/parity-$m-$sd.json" > "$runs/parity-$m-$sd.log" 2>&1 &
      files+=("$runs/parity-$m-$sd.json")
    done
  done
  for job in $(jobs -p); do wait "$job" || rc=$?; done
  tail -n 12 "$runs"/parity-*.log
  [ "$rc" = 0 ] || return "$rc"
  # joined with the earlier seeds if the recipe is still theirs, else on their own
  "$PY" benchmarks/experiments/parity.py --combine $PARITY_PRIOR "${files[@]}" --json "$out/gpu-parity.json" \
    || "$PY" benchmarks/experiments/parity.py --combine "${files[@]}" --json "$out/gpu-parity.json"
}
# `timeout` runs a program, not a shell function: hand the function and its flags to a new bash.
export PY runs out PARITY_FLAGS="${parity[*]}" PARITY_SEEDS="$parity_seeds" \
  PARITY_PRIOR="$parity_prior"
step parity 240 bash -c "$(declare -f parity_both)"'; parity=($PARITY_FLAGS); parity_both'

pair_30s() {   # ours, then nn.Transformer: each a fresh process, the recipe's time budget; one record
  local files=() m rc=0
  for m in ours nn.Transformer; do
    "$PY" benchmarks/experiments/parity.py "${pair[@]}" --equal-time --models "$m" \
      --json "$runs/pair-$m.json" || rc=$?
    [ -f "$runs/pair-$m.json" ] && files+=("$runs/pair-$m.json")
  done
  # both runs in one record with their ratios; one alone is still recorded
  [ "${#files[@]}" -gt 0 ] && "$PY" benchmarks/experiments/parity.py --combine "${files[@]}" \
    --json "$out/gpu-30s-pair.json"
  return "$rc"
}
export PAIR_FLAGS="${pair[*]}"
step pair30s 300 bash -c "$(declare -f pair_30s)"'; pair=($PAIR_FLAGS); pair_30s'

seeds_all() {   # ours and nn.Transformer at every seed, one process each, all at once; one record
  local files=() m sd
  for sd in $SEED_LIST; do
    for m in ours nn.Transformer; do
      OMP_NUM_THREADS=1 "$PY" benchmarks/experiments/parity.py "${seeds[@]}" --seed "$sd" --models "$m" \
        --json "$runs/seeds-$m-$sd.json" > "$runs/seeds-$m-$sd.log" 2>&1 &
      files+=("$runs/seeds-$m-$sd.json")
    done
  done
  wait
  tail -n 3 "$runs"/seeds-*.log
  "$PY" benchmarks/experiments/parity.py --combine "${files[@]}" --json "$out/gpu-parity-cpu-30min-2x2-seeds.json"
}
export SEEDS_FLAGS="${seeds[*]}" SEED_LIST="$seed_list"
step seeds 120 bash -c "$(declare -f seeds_all)"'; seeds=($SEEDS_FLAGS); seeds_all'

step beam 150 "$PY" benchmarks/experiments/gpu30s_sweep.py --runs "$runs/beam" \
  --json "$out/gpu-30s-beam.json" "${beam[@]}"

step throughput 280 "$PY" benchmarks/speed/train_throughput.py "${throughput[@]}" \
  --json "$out/gpu-throughput.json"

# call 1
step wmt14 120 "$PY" benchmarks/speed/wmt14_throughput.py "${wmt14tp[@]}" \
  --json "$out/wmt14-throughput-gpu.json"

step gpu 540 "$PY" -m transformer_lib.train "${gpu5[@]}" --no-progress \
  --out-dir "$runs/gpu-5min" --results "$out/gpu-5min.json"
[ -f "$runs/gpu-5min/history.json" ] \
  && cp "$runs/gpu-5min/history.json" "$out/gpu-5min.history.json"

# the sweep ends itself 15 s before the step's limit (it skips a variant that would not fit)
sweep_left=$(( deadline - SECONDS - 15 ))
step sweep 320 "$PY" benchmarks/experiments/gpu30s_sweep.py --runs "$runs/sweep" --deadline-s "$sweep_left" \
  --json "$out/gpu-30s-sweep.json" "${sweep[@]}"

ls -la "$out"
