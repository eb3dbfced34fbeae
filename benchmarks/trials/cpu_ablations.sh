#!/usr/bin/env bash
# The CPU ablations of chapter 18: each row is the cpu-30min recipe (2+2 layers, 4,000 BPE tokens,
# 1,024-token batches, at the peak 2e-3 it had when the rows ran: --peak-lr pins it; the preset's
# peak has been 1e-3 since results/rematch-xeon chose it) with one change, trained for one epoch's
# worth of updates (517 updates of <= 1,024 padded positions; a row that changes the batch or the vocabulary
# changes the number of batches in an epoch, and its row says how many; the budget schedule decays
# over the updates instead of over the time) and scored on the validation split (all 1,014
# sentences, greedy). Rows train in float32 (--no-amp: the same on a CPU with bfloat16 instructions
# as on one without). One thread per row, so two rows can share a 2-core machine without slowing each
# other: `bash benchmarks/trials/cpu_ablations.sh ROW...`, ROW from the list below.
# Each run writes results/ablations-2x2/ROW.json (the run's record; SEED=N writes ROW.seedN.json, the
# same row from another seed of the weights, dropout and batch order); chapter 18 reads them.
# The rows of the earlier 3+3 recipe, results/ablations/, came from this script as of commit c778523 (its BASE: 3+3 layers, dropout 0.1 in all three places).
set -euo pipefail
cd "$(dirname "$0")/../.."
EPOCH=517                                    # batches in one epoch of the recipe's batches
STEPS="--time-budget-s 0 --epochs 0 --test-sentences 50 --no-progress --no-amp --eval-every 0
       --keep-snapshots 0 --peak-lr 2e-3"
declare -A ROWS=(
  [base]=""
  [post_ln]="--no-norm-first"                                  # the paper's post-LN
  [layers_3]="--n-layers 3"                                    # (C): one more layer each side
  [heads_1]="--n-heads 1"                                      # (A): one head of 256
  [heads_8]="--n-heads 8"                                      # (A): eight heads of 32
  [dropout_0]="--dropout 0"                                    # (D): no dropout
  [smoothing_0]="--label-smoothing 0"                          # (D): one-hot targets
  [learned_positions]="--positional learned"                   # (E)
  [vocab_8000]="--vocab-size 8000 --max-steps 458"             # the earlier vocabulary (458 batches)
  [batch_2048]="--batch-tokens 2048 --max-steps 258 --warmup-steps 50"  # half as many, twice the size
)
SEED=${SEED:-0}
suffix=$([[ $SEED == 0 ]] && echo "" || echo ".seed$SEED")
mkdir -p results/ablations-2x2
for row in "$@"; do
  [[ -v ROWS[$row] ]] || { echo "unknown row $row; rows: ${!ROWS[*]}" >&2; exit 2; }
  out=$(mktemp -d)
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 python -m transformer_lib.train --preset cpu-30min --out-dir "$out/run" \
    --results "results/ablations-2x2/$row$suffix.json" --seed "$SEED" --max-steps $EPOCH $STEPS \
    ${ROWS[$row]}
  rm -rf "$out"
done
