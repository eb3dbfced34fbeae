#!/usr/bin/env bash
# Thirty-minute trials of variants of the cpu-30min recipe as it was before them (2+2 layers, residual
# dropout 0.1, 8,000 BPE tokens, 1,024-token batches, peak 2e-3, not watched: THEN below pins what
# has changed since), compared on the validation split only; vocab_4000 won and became the preset; the test set
# is scored at the end of every run, as every run does, but never used to choose. Each trial is
# `python -m transformer_lib.train --preset cpu-30min` with the changes below, on all the machine's
# cores for the preset's 1,797 s of training, *watched*: the validation loss and greedy BLEU after
# every epoch (the training clock is paused while it evaluates, so the run trains as long as an
# unwatched one), and the epochs' weights kept (--average-last 8 keeps the last eight snapshots:
# all of a seven-epoch run, all but the first of a nine-epoch one; at the end the run evaluates
# their average against the last weights on validation and keeps the better, as every run with
# snapshots does). After the run, a sweep of beam search's length penalty on validation with the
# run's own weights; benchmarks/experiments/snapshot_averages.py then scores averages of the last few.
#   bash benchmarks/trials/recipe_trials.sh TRIAL...   (one at a time: two runs would share the cores)
# writes results/tuning-2x2/TRIAL.json (record), TRIAL.history.json (training log) and
# TRIAL.val-beam.json (the sweep); the run directory (weights, snapshots, tokenizer) stays in
# runs/tuning/TRIAL for shipping and for chapter 18's snapshots.
set -euo pipefail
cd "$(dirname "$0")/../.."
declare -A TRIALS=(
  [recipe]=""                                   # today's recipe, watched
  [vocab_4000]="--vocab-size 4000"              # a cheaper softmax and more epochs in the budget
  [dropout_0.2]="--dropout 0.2"                 # more regularisation for a seven-epoch run
  [lr_3e-3]="--peak-lr 3e-3 --warmup-steps 200" # a higher peak with a longer warm-up
  [vocab_4000_dropout_0.2]="--vocab-size 4000 --dropout 0.2"
  [vocab_4000_lr_3e-3]="--vocab-size 4000 --peak-lr 3e-3 --warmup-steps 200"
  [vocab_3000]="--vocab-size 3000"
  [vocab_2000]="--vocab-size 2000"
)
THEN="--vocab-size 8000 --keep-snapshots 0 --peak-lr 2e-3 --amp"   # the preset before these trials
WATCH="--eval-every 1 --no-eval-beam --average-last 8"
mkdir -p results/tuning-2x2 runs/tuning
for trial in "$@"; do
  [[ -v TRIALS[$trial] ]] || { echo "unknown trial $trial; trials: ${!TRIALS[*]}" >&2; exit 2; }
  run="runs/tuning/$trial"
  rm -rf "$run"
  # shellcheck disable=SC2086
  python -m transformer_lib.train --preset cpu-30min --out-dir "$run" --no-progress \
    --results "results/tuning-2x2/$trial.json" $THEN $WATCH ${TRIALS[$trial]}
  cp "$run/history.json" "results/tuning-2x2/$trial.history.json"
  python benchmarks/experiments/length_penalty_sweep.py --run-dir "$run" --beams 4 \
    --alphas 0.6 1.0 1.2 1.5 1.8 --json "results/tuning-2x2/$trial.val-beam.json"
done
