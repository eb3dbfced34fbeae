"""Beam size and length penalty of the shipped translator, swept on the validation split only.

    python benchmarks/experiments/length_penalty_sweep.py --json results/length-penalty-val.json

Translates all 1,014 validation sentences of Multi30k with the weights `load_translator()` reads
(or, with `--run-dir RUN_DIR`, those a training run wrote: RUN_DIR/model.pt and tokenizer.json),
greedily and with beam search for every (beam, alpha) pair given, and prints sacreBLEU for each.
The test split is never looked at: the `cpu-30min` preset's `length_penalty` is chosen from a table
like this one, and test_2016_flickr is scored once, with that choice. Chapter 18 prints the record.
The length ratio is sacreBLEU's: words of all translations over words of all references.
"""
from __future__ import annotations

import argparse
import time

import sacrebleu
import torch

from transformer_lib.data import load_multi30k, load_translator
from transformer_lib.engineering import git_commit, provenance, write_json
from transformer_lib.records import load_run
from transformer_lib.stages import timed_bleu


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--beams", type=int, nargs="+", default=[4, 6])
    p.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.6, 1.0, 1.2, 1.4, 1.8])
    p.add_argument("--sentences", type=int, default=0,
                   help="first N validation sentences (0 = all)")
    p.add_argument("--run-dir", help="a training run's directory (default: the shipped weights)")
    p.add_argument("--json", help="write the record to this file")
    args = p.parse_args(argv)
    model, tok, info = load_run(args.run_dir) if args.run_dir else load_translator()
    pairs = load_multi30k("val")[:args.sentences or None]
    device = torch.device("cpu")
    record = {**provenance(device, 1, git_commit()), "translator": info, "split": "val",
              "sentences": len(pairs), "rows": []}
    settings = [(1, 0.0)] + [(b, a) for b in args.beams for a in args.alphas]
    for beam, alpha in settings:
        t0 = time.perf_counter()
        r = timed_bleu(model, tok, pairs, beam_size=beam, alpha=alpha, device=device,
                       amp_dtype=None)
        stats = sacrebleu.corpus_bleu(r["hypotheses"], [[en for _, en in pairs]])  # for the lengths
        ratio = stats.sys_len / stats.ref_len
        record["rows"].append({"beam_size": beam, "alpha": alpha, "bleu": r["bleu"],
                               "length_ratio": ratio})
        record["signature"] = r["signature"]
        print(f"beam {beam}  alpha {alpha:3.1f}  BLEU {r['bleu']:5.2f}  length ratio {ratio:.3f}  "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    if args.json:
        write_json(args.json, record)
    return record


if __name__ == "__main__":
    main()
