"""Cross-attention at every epoch snapshot of a run: how the decoder's alignment changes as the
model learns (chapter 18's figure).

    python benchmarks/experiments/attention_snapshots.py --run-dir runs/cpu-30min \
        --json results/multi30k-cpu-30min.attention.json

The weights, in order: every epoch snapshot the run kept (RUN_DIR/snapshots/epoch_*.pt, written
with `--keep-snapshots N`), then its final weights (RUN_DIR/model.pt). For each, teacher-forced as
in training, the cross-attention weights of the last decoder layer:
  * for one sentence, the one chapter 18 plots (`pick_sentence`: the first test_2016_flickr pair
    whose German has 9 to 12 subwords and whose English at most 12), the whole matrix (English
    positions x German positions), averaged over the heads and for each head;
  * over the first `--sentences` test pairs (default 100), two summaries of how concentrated the
    weights are: the mean of each row's largest weight and the mean entropy of a row (nats), for
    every head on its own and for the mean of the heads.
With the run's validation loss and greedy BLEU at that epoch (history.json's `evals`). The record
holds indices into the test split and numbers, no text of the data set.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from transformer_lib.data import load_multi30k
from transformer_lib.engineering import git_commit, provenance, write_json
from transformer_lib.optimization import read_checkpoint
from transformer_lib.records import load_run


def pick_sentence(pairs: list[tuple[str, str]], tok) -> int:
    "Index of the first pair with 9 to 12 German subwords and at most 12 English ones."
    return next(i for i, (de, en) in enumerate(pairs)
                if 9 <= len(tok.tokens(de)) <= 12 and len(tok.tokens(en)) <= 12)


@torch.no_grad()
def cross_attention(model, tok, de: str, en: str) -> torch.Tensor:
    """The last decoder layer's cross-attention for one teacher-forced pair, every head:
    (h, L_t, L_s), rows = the decoder's inputs (<bos> and the reference but its last token)."""
    src = torch.tensor([tok.encode(de, add_eos=True)])
    tgt = torch.tensor([tok.encode(en, add_bos=True, add_eos=True)])
    attn = model.decoder.layers[-1].cross_attn
    attn.need_weights = True
    try:
        model(src, tgt[:, :-1])
        return attn.attn_weights[0]                               # (h, L_t, L_s)
    finally:
        attn.need_weights = False


def concentration(weights: list[torch.Tensor], prefix: str) -> dict:
    """Mean largest weight of a row and mean row entropy (nats) of attention matrices (..., L_t,
    L_s): over the rows of each matrix, then over the matrices."""
    peaks = [float(w.max(-1).values.mean()) for w in weights]
    entropy = [float(-(w * w.clamp_min(1e-12).log()).sum(-1).mean()) for w in weights]
    return {f"{prefix}_peak": sum(peaks) / len(peaks),
            f"{prefix}_entropy": sum(entropy) / len(entropy)}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run-dir", required=True, help="a finished training run's directory")
    p.add_argument("--sentences", type=int, default=100,
                   help="first N test pairs for the summaries (default 100)")
    p.add_argument("--json", help="write the record to this file")
    args = p.parse_args(argv)
    run_dir = Path(args.run_dir)
    if not (run_dir / "model.pt").is_file():
        p.error(f"--run-dir {run_dir} holds no model.pt: it is not a finished training run")
    model, tok, info = load_run(run_dir)
    snaps = sorted((run_dir / "snapshots").glob("epoch_*.pt"))
    evals = {e["epoch"]: e for e in json.loads((run_dir / "history.json").read_text())["evals"]
             if "weights" not in e}                                # per-epoch, not the final ones
    test = load_multi30k("test_2016_flickr")
    index = pick_sentence(test, tok)
    record = {**provenance(torch.device("cpu"), 1, git_commit()), "translator": info,
              "split": "test_2016_flickr", "sentence_index": index,
              "summary_sentences": args.sentences, "layer": "last decoder layer, mean of heads",
              "weights": []}
    for path in [*snaps, run_dir / "model.pt"]:
        model.load_state_dict(read_checkpoint(path)["model"])
        model.eval()
        epoch = int(path.stem.split("_")[1]) if path in snaps else None
        heads = [cross_attention(model, tok, de, en) for de, en in test[:args.sentences]]
        summary = {**concentration(heads, "per_head"),                  # each head on its own
                   **concentration([w.mean(0) for w in heads], "head_mean")}   # what is plotted
        matrix = cross_attention(model, tok, *test[index])
        row = {"file": path.name, "epoch": epoch, "attention": matrix.mean(0).tolist(),
               "heads": matrix.tolist(), **summary}
        if epoch in evals:
            row |= {"step": evals[epoch]["step"], "val_loss": evals[epoch]["val_loss"],
                    "val_bleu_greedy": evals[epoch]["bleu_greedy"]}
        record["weights"].append(row)
        print(f"{path.name}: mean largest weight per head {summary['per_head_peak']:.3f}, of the "
              f"head mean {summary['head_mean_peak']:.3f}; entropy per head "
              f"{summary['per_head_entropy']:.3f}, of the mean {summary['head_mean_entropy']:.3f} "
              "nats" + (f", val greedy BLEU "
                                                       f"{row['val_bleu_greedy']:.1f}"
                                                       if "val_bleu_greedy" in row else ""))
    if args.json:
        write_json(args.json, record)
    return record


if __name__ == "__main__":
    main()
