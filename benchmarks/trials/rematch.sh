#!/usr/bin/env bash
# Chapter 20's rematch: the GRU with additive attention (RNNsearch) against the cpu-30min recipe,
# fair to both sides. Every run is benchmarks/experiments/rnn_vs_transformer.py on the preset as it is (the
# same tokenizer, batches, loss, schedule and decoding for both models), 1,797 s of training per
# model, alone on the machine (one run at a time: two would share the cores), on validation only.
# Neither model clips its gradients (--rnn-clip 0), as the recipe trains the Transformer. Each run
# trains one model, so a trial of the GRU at seed 0 is also the GRU's half of the seed-0 pair.
#   bash benchmarks/trials/rematch.sh trials          both models at three peak learning rates each
#                                              (LRS), seed 0, the GRU at d_h = d_a = 344 (the
#                                              Transformer's size) -> gru-344-lrLR.json and
#                                              transformer-lrLR.json
#   bash benchmarks/trials/rematch.sh final LR TLR    the second seed of the pair: the GRU at its chosen
#                                              peak LR and the Transformer at its TLR (each the
#                                              best validation greedy BLEU of its trials)
#   bash benchmarks/trials/rematch.sh RUN...          single runs by name: gru-344-lr2e-3 (seed 0),
#                                              gru-344-lr2e-3-seed1, gru-448-lr3e-3,
#                                              transformer-lr1e-3[-seed1], transformer-seed0 (the
#                                              recipe's peak: 1e-3 now, 2e-3 when results/rematch/
#                                              ran)
# Every run trains in float32 (--no-amp): a CPU with bfloat16 instructions would otherwise train
# under autocast, and runs on two machines would differ in precision as well as speed. Records go
# to results/rematch/, or to REMATCH_DIR (one folder per machine: runs on two machines are not
# equal-time comparisons).
#   bash benchmarks/trials/rematch.sh flops           FLOPs of an update of each model (no training)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUDGET="--budget-s 1797 --rnn-clip 0 --no-progress --no-amp"
OUT=${REMATCH_DIR:-results/rematch}
LRS=(1e-3 2e-3 3e-3)
mkdir -p "$OUT"
one() {  # gru-WIDTH-lrLR[-seedS] | transformer[-lrLR][-seedS]
  local name=$1 lr
  # shellcheck disable=SC2086
  if [[ $name =~ ^gru-([0-9]+)-lr([0-9.e-]+[0-9])(-seed([0-9]+))?$ ]]; then
    python benchmarks/experiments/rnn_vs_transformer.py --models gru --rnn-hidden "${BASH_REMATCH[1]}" \
      --rnn-attn "${BASH_REMATCH[1]}" --rnn-peak-lr "${BASH_REMATCH[2]}" \
      --seed "${BASH_REMATCH[4]:-0}" $BUDGET --json "$OUT/$name.json"
  elif [[ $name =~ ^transformer(-lr([0-9.e-]+[0-9]))?(-seed([0-9]+))?$ && $name != transformer ]]; then
    lr=()
    [[ -n ${BASH_REMATCH[2]} ]] && lr=(--peak-lr "${BASH_REMATCH[2]}")
    python benchmarks/experiments/rnn_vs_transformer.py --models transformer "${lr[@]}" \
      --seed "${BASH_REMATCH[4]:-0}" $BUDGET --json "$OUT/$name.json"
  else
    echo "bad run name $name" >&2; exit 2
  fi
}
case ${1:?"trials | final LR TLR | flops | RUN..."} in
  trials)
    for lr in "${LRS[@]}"; do one "gru-344-lr$lr"; done
    for lr in "${LRS[@]}"; do one "transformer-lr$lr"; done ;;
  final)
    lr=${2:?final needs LR TLR} tlr=${3:?final needs LR TLR}
    one "gru-344-lr$lr-seed1"; one "transformer-lr$tlr-seed1" ;;
  flops)
    python benchmarks/experiments/update_flops.py --rnn-hidden 344 448 \
      --json "$OUT/update-flops.json" ;;
  *) for name in "$@"; do one "$name"; done ;;
esac
