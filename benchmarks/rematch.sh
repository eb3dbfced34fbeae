#!/usr/bin/env bash
# Chapter 20's rematch: the GRU with additive attention (RNNsearch) against the cpu-30min recipe,
# fair to both sides. Every run is benchmarks/rnn_vs_transformer.py on the preset as it is (the
# same tokenizer, batches, loss, schedule and decoding for both models), 1,797 s of training per
# model, alone on the machine (one run at a time: two would share the cores), on validation only.
# Neither model clips its gradients (--rnn-clip 0), as the recipe trains the Transformer.
#   bash benchmarks/rematch.sh trials          the GRU alone at d_h = d_a = 344 (the Transformer's
#                                              size) and 448, three peak learning rates each
#                                              -> results/rematch/gru-WIDTH-lrLR.json
#   bash benchmarks/rematch.sh final W LR      the chosen GRU (best validation greedy BLEU of the
#                                              trials) and the Transformer, one after the other,
#                                              seeds 0 and 1 -> results/rematch/final-seedS.json
#   bash benchmarks/rematch.sh TRIAL...        single trials by name, e.g. gru-344-lr2e-3
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET="--budget-s 1797 --rnn-clip 0 --no-progress"
WIDTHS=(344 448)
LRS=(1e-3 2e-3 3e-3)
mkdir -p results/rematch
trial() {  # gru-WIDTH-lrLR
  local name=$1 width lr
  [[ $name =~ ^gru-([0-9]+)-lr([0-9.e-]+)$ ]] || { echo "bad trial name $name" >&2; exit 2; }
  width=${BASH_REMATCH[1]} lr=${BASH_REMATCH[2]}
  # shellcheck disable=SC2086
  python benchmarks/rnn_vs_transformer.py --models gru --rnn-hidden "$width" --rnn-attn "$width" \
    --rnn-peak-lr "$lr" $BUDGET --json "results/rematch/$name.json"
}
case ${1:?"trials | final WIDTH LR | TRIAL..."} in
  trials)
    for w in "${WIDTHS[@]}"; do for lr in "${LRS[@]}"; do trial "gru-$w-lr$lr"; done; done ;;
  final)
    w=${2:?final needs WIDTH LR} lr=${3:?final needs WIDTH LR}
    for seed in 0 1; do
      # shellcheck disable=SC2086
      python benchmarks/rnn_vs_transformer.py --rnn-hidden "$w" --rnn-attn "$w" --rnn-peak-lr \
        "$lr" --seed "$seed" $BUDGET --json "results/rematch/final-seed$seed.json"
    done ;;
  *) for name in "$@"; do trial "$name"; done ;;
esac
