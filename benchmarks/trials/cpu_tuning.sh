#!/usr/bin/env bash
# Full thirty-minute runs of variants of the earlier cpu-30min recipe (3+3 layers, dropout 0.1 in all
# three places), chosen on the validation split only; layers_2_residual_dropout won and became the
# recipe (its record is results/tuning/layers_2_residual_dropout.json). Every trial names its layers
# and dropouts; THEN pins what the preset was then (8,000 tokens, peak 2e-3, not watched), before
# results/tuning-2x2/ (benchmarks/trials/recipe_trials.sh) changed it.
# Each TRIAL is `python -m transformer_lib.train --preset cpu-30min` with the changes below, on all
# the machine's cores for the preset's whole time budget (1,797 s of training), then a sweep of the
# length penalty of beam search (beam 4) on the validation split with the run's own weights:
#   bash benchmarks/trials/cpu_tuning.sh TRIAL...      (one at a time: two runs would share the cores)
# writes results/tuning/TRIAL.json (the run's record; it also scores test_2016_flickr at the end,
# as every run does, but trials are compared on validation only) and TRIAL.val-beam.json (the
# sweep). The changes come from chapter 18's one-epoch ablation table: two layers and less dropout
# were the rows that beat the recipe on both seeds while also training faster.
set -euo pipefail
cd "$(dirname "$0")/../.."
THEN="--vocab-size 8000 --eval-every 0 --eval-beam --keep-snapshots 0 --peak-lr 2e-3 --amp"
declare -A TRIALS=(
  [layers_2_dropout_0]="--n-layers 2 --dropout 0 --attn-dropout 0 --ffn-dropout 0"
  [layers_2_residual_dropout]="--n-layers 2 --dropout 0.1 --attn-dropout 0 --ffn-dropout 0"
  [residual_dropout]="--n-layers 3 --dropout 0.1 --attn-dropout 0 --ffn-dropout 0"
  [layers_2]="--n-layers 2 --dropout 0.1 --attn-dropout 0.1 --ffn-dropout 0.1"
)
mkdir -p results/tuning
for trial in "$@"; do
  [[ -v TRIALS[$trial] ]] || { echo "unknown trial $trial; trials: ${!TRIALS[*]}" >&2; exit 2; }
  out=$(mktemp -d)
  # shellcheck disable=SC2086
  python -m transformer_lib.train --preset cpu-30min --out-dir "$out/run" --no-progress \
    --results "results/tuning/$trial.json" $THEN ${TRIALS[$trial]}
  cp "$out/run/history.json" "results/tuning/$trial.history.json"
  python benchmarks/experiments/length_penalty_sweep.py --run-dir "$out/run" --beams 4 \
    --alphas 0.6 1.0 1.2 1.5 --json "results/tuning/$trial.val-beam.json"
  rm -rf "$out"
done
