#!/usr/bin/env bash
# The CPU ablation table of chapter 18: each row is the earlier, three-layer version of the cpu-30min
# recipe (BASE below: 3+3 layers, dropout 0.1 in all three places) with one change, trained for
# one epoch's worth of updates of the recipe's batches (458 updates of <= 1,024 padded positions; the
# budget schedule decays over the updates instead of over the time) and scored on the validation
# split (all 1,014 sentences, greedy). Rows train in float32 (--no-amp), as the first rows did,
# except the row that turns the recipe's mixed precision on (bf16: only on a CPU with bfloat16
# instructions; elsewhere it repeats base, and chapter 18's table leaves it out). One thread per row, so two rows can
# share a 2-core machine without slowing each other: `bash benchmarks/cpu_ablations.sh ROW...`, ROW from the list below.
# Each run writes results/ablations/ROW.json (the run's record; SEED=N writes ROW.seedN.json, the same
# row from another seed of the weights, dropout and batch order); chapter 18 reads them.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS="--time-budget-s 0 --max-steps 458 --test-sentences 50 --no-progress --no-amp"
BASE="--n-layers 3 --attn-dropout 0.1 --ffn-dropout 0.1"   # the recipe when the rows were measured
declare -A ROWS=(
  [base]=""
  [post_ln]="--no-norm-first"
  [batch_2048]="--batch-tokens 2048 --max-steps 229 --warmup-steps 50"
  [batch_4096_post_ln]="--no-norm-first --batch-tokens 4096 --max-steps 115 --warmup-steps 25"
  [lr_3e-3]="--peak-lr 0.003"
  [vocab_4000_batch_2048]="--vocab-size 4000 --batch-tokens 2048 --max-steps 258 --warmup-steps 50"
  [heads_1]="--n-heads 1"
  [heads_8]="--n-heads 8"
  [heads_16]="--n-heads 16"
  [dropout_0]="--dropout 0 --attn-dropout 0 --ffn-dropout 0"
  [dropout_0.3]="--dropout 0.3 --attn-dropout 0.3 --ffn-dropout 0.3"
  [smoothing_0]="--label-smoothing 0"
  [learned_positions]="--positional learned"
  [layers_2]="--n-layers 2"
  [d_ff_2048]="--d-ff 2048"
  [bf16]="--amp"
)
SEED=${SEED:-0}
suffix=$([[ $SEED == 0 ]] && echo "" || echo ".seed$SEED")
mkdir -p results/ablations
for row in "$@"; do
  [[ -v ROWS[$row] ]] || { echo "unknown row $row; rows: ${!ROWS[*]}" >&2; exit 2; }
  out=$(mktemp -d)
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 python -m transformer_lib.train --preset cpu-30min --out-dir "$out/run" \
    --results "results/ablations/$row$suffix.json" --seed "$SEED" $STEPS $BASE ${ROWS[$row]}
  rm -rf "$out"
done
