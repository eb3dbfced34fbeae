"""Where could beam search lose its gain? The decoding paths the GPU runs use, checked on the CPU
with one set of weights.

    python benchmarks/experiments/beam_diagnosis.py --sentences 300 \
        --json results/beam-diagnosis-cpu.json

On the GPU's `gpu` shape, beam search gained less over greedy for ours than for `nn.Transformer`
(+1.3 to +2.0 BLEU against +2.9 to +4.5), with bfloat16 autocast and our KV cache in ours' path.
This script decodes the first `--sentences` validation sentences with one model's weights (the
shipped translator, or `--run-dir`), greedy and with beam search (beam 4 at each `--alphas`), in
every combination of:
  * the model: ours, or `nn.Transformer` holding the same weights (`TorchReference.from_ours`,
    which has no KV cache and re-reads the prefix at every step);
  * the precision: float32, or bfloat16 autocast as the GPU runs decode (on a CPU without
    bfloat16 instructions it is emulated: slow, but it rounds the same way);
  * for ours, the KV cache on or off.
For each it records BLEU, greedy and beam, the beam's gain, and how many translations equal those
of ours in float32 with the cache. Reading: if bfloat16 shrinks the gain in both models, the
precision does it; if ours gains less than `nn.Transformer` at equal precision, our decoding path
does; if the cache changes bfloat16 translations that the prefix re-read does not, the cache does.
The weights were trained in float32: a bf16-trained model (the GPU's) may differ, which only the
GPU can confirm.
"""
from __future__ import annotations

import argparse
import time

import torch

from transformer_lib.benchmarking import TorchReference
from transformer_lib.data import load_multi30k, load_translator
from transformer_lib.engineering import git_commit, provenance, write_json
from transformer_lib.records import load_run
from transformer_lib.stages import translate
from transformer_lib.text import corpus_bleu


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sentences", type=int, default=300, help="first N validation sentences")
    p.add_argument("--alphas", type=float, nargs="+", default=[0.6, 1.2],
                   help="length penalties of beam search (default 0.6, the gpu preset's, and 1.2)")
    p.add_argument("--beam", type=int, default=4, help="beam size (default 4)")
    p.add_argument("--run-dir", help="a training run's directory (default: the shipped weights)")
    p.add_argument("--json", help="write the record to this file")
    args = p.parse_args(argv)
    ours, tok, info = load_run(args.run_dir) if args.run_dir else load_translator()
    models = {"ours": ours, "nn.Transformer": TorchReference.from_ours(ours)}
    pairs = load_multi30k("val")[:args.sentences]
    german, refs = [de for de, _ in pairs], [en for _, en in pairs]
    record = {**provenance(torch.device("cpu"), 1, git_commit()), "translator": info,
              "split": "val", "sentences": len(pairs), "beam_size": args.beam, "rows": []}
    reference = {}                                  # ours, float32, cache: the translations
    for name, model in models.items():
        for dtype in (None, torch.bfloat16):
            for cache in ((True, False) if name == "ours" else (False,)):
                t0 = time.perf_counter()
                row = {"model": name, "precision": "bfloat16" if dtype else "float32",
                       "kv_cache": cache}
                for decoder, beam, alpha in [("greedy", 1, 0.0),
                                             *((f"beam_alpha_{a:g}", args.beam, a)
                                               for a in args.alphas)]:
                    hyps = translate(model, tok, german, beam_size=beam, alpha=alpha,
                                     amp_dtype=dtype, use_cache=cache)
                    reference.setdefault(decoder, hyps)      # the first row fills it
                    row[decoder] = {"bleu": corpus_bleu(hyps, refs)[0],
                                    "same_as_ours_float32": sum(
                                        a == b for a, b in zip(hyps, reference[decoder]))}
                for a in args.alphas:
                    beam_bleu = row[f"beam_alpha_{a:g}"]["bleu"]
                    row[f"gain_alpha_{a:g}"] = beam_bleu - row["greedy"]["bleu"]
                row["seconds"] = time.perf_counter() - t0
                record["rows"].append(row)
                print(f"{name:15s} {row['precision']:9s} cache {'on ' if cache else 'off'}: "
                      f"greedy {row['greedy']['bleu']:.2f}; " + "; ".join(
                          f"beam α {a:g} {row[f'beam_alpha_{a:g}']['bleu']:.2f} "
                          f"(gain {row[f'gain_alpha_{a:g}']:+.2f}, "
                          f"{row[f'beam_alpha_{a:g}']['same_as_ours_float32']} same)"
                          for a in args.alphas) + f"  [{row['seconds']:.0f} s]")
    if args.json:
        write_json(args.json, record)
    return record


if __name__ == "__main__":
    main()
