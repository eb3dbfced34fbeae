"""BLEU lost when attention heads of the shipped translator are switched off, as a record.

    python benchmarks/experiments/heads_off.py --threads 1 --json results/heads-off-val.json

Translates the first `--sentences` (default 300) validation sentences of Multi30k greedily with
the weights `load_translator()` reads (or `--translator FILE`): with every head, without each head
in turn, without all heads of each attention module, and without all self- or all cross-attention
heads, each head switched off by zeroing its block of W_O (`transformer_lib.inside.heads_off`;
33 translations for 2+2 layers of 4 heads). Chapter 19 prints the record, checks its claims on it,
and repeats three of the translations live.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from transformer_lib.data import TRANSLATOR_NAME, load_multi30k, load_translator, sha256_of
from transformer_lib.engineering import git_commit, provenance, write_json
from transformer_lib.inside import heads_off

REPO = Path(__file__).resolve().parents[2]


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sentences", type=int, default=300, help="the first N validation sentences")
    p.add_argument("--translator", help="a translator file (default: load_translator()'s)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads (default: torch's own choice)")
    p.add_argument("--json", help="write the record to this file")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tok, info = load_translator(args.translator) if args.translator else load_translator()
    path = Path(args.translator) if args.translator else REPO / TRANSLATOR_NAME
    pairs = load_multi30k("val")[:args.sentences]
    t0 = time.perf_counter()
    result = heads_off(model, tok, [de for de, _ in pairs], [en for _, en in pairs],
                       log=lambda line: print(line, flush=True))
    seconds = time.perf_counter() - t0
    translations = 1 + sum(len(d) + 1 for d in result["per_head"].values()) + len(
        result["per_kind"])
    record = {**provenance(torch.device("cpu"), 1, git_commit()),
              "threads": torch.get_num_threads(), "translator": info,
              "translator_sha256": sha256_of(path), "split": "val", "sentences": len(pairs),
              "decoding": "greedy", "n_heads": model.config.n_heads,
              "translations": translations, "seconds": seconds, **result}
    print(f"BLEU with every head {result['bleu']:.2f}; without every self-attention head "
          f"{result['bleu'] - result['per_kind']['self']:.2f}, every cross-attention head "
          f"{result['bleu'] - result['per_kind']['cross']:.2f} ({translations} translations of "
          f"{len(pairs)} sentences in {seconds:.0f} s)")
    if args.json:
        write_json(args.json, record)
    return record


if __name__ == "__main__":
    main()
