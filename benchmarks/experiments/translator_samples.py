"""The shipped translator's translations of test_2016_flickr, as a record.

    python benchmarks/experiments/translator_samples.py \
        --json results/multi30k-cpu-30min.samples.json

Translates the German sentences of test_2016_flickr (all 1,000, or the first `--sentences`) with
the weights `load_translator()` reads, greedily and with beam search at the beam size and length
penalty of the run the file came from, exactly as chapter 18 calls `translate`, and writes each
translation and the BLEU of those sentences (no source or reference text: the data set stays
out of the repository). `benchmarks/tools/ship_translator.py` scored the whole split when the file
was made (`*.shipped.json`); chapter 18 prints those scores, analyses the recorded translations by
sentence length and beam against greedy, and translates the first 100 sentences live, checking
that its translations are (all but a near-tie or two) the recorded ones.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from transformer_lib.data import (
    TRANSLATOR_NAME,
    load_multi30k,
    load_translator,
    records_dir,
    sha256_of,
)
from transformer_lib.engineering import git_commit, provenance, write_json
from transformer_lib.stages import translate
from transformer_lib.text import corpus_bleu

REPO = Path(__file__).resolve().parents[2]


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sentences", type=int, default=0,
                   help="the first N test sentences (0 = all)")
    p.add_argument("--translator", help="a translator file (default: load_translator()'s)")
    p.add_argument("--json", help="write the record to this file")
    args = p.parse_args(argv)
    model, tok, info = load_translator(args.translator) if args.translator else load_translator()
    run = json.loads((records_dir() / Path(info["record"]).name).read_text())["test_2016_flickr"]
    beam, alpha = run["beam_size"], run["length_penalty"]
    pairs = load_multi30k("test_2016_flickr")[:args.sentences or None]
    sources, refs = [de for de, _ in pairs], [en for _, en in pairs]
    torch.manual_seed(0)
    greedy = translate(model, tok, sources)
    beamed = translate(model, tok, sources, beam_size=beam, alpha=alpha)
    path = Path(args.translator) if args.translator else REPO / TRANSLATOR_NAME
    record = {**provenance(torch.device("cpu"), 1, git_commit()),
              "threads": torch.get_num_threads(), "translator_sha256": sha256_of(path),
              "split": "test_2016_flickr", "sentences": len(pairs), "beam_size": beam,
              "length_penalty": alpha, "bleu_greedy": corpus_bleu(greedy, refs)[0],
              "bleu_beam": corpus_bleu(beamed, refs)[0],
              "greedy": greedy, "beam": beamed}
    print(f"{len(pairs)} test sentences: greedy BLEU {record['bleu_greedy']:.2f}, beam {beam} "
          f"(alpha {alpha}) {record['bleu_beam']:.2f}")
    if args.json:
        write_json(args.json, record)
    return record


if __name__ == "__main__":
    main()
