"""A recurrent baseline against the Transformer at equal CPU time on Multi30k de→en.

What it measures: the GRU encoder–decoder with additive attention of chapter 20
(`transformer_lib.recurrent.RecurrentTranslator`, RNNsearch of Bahdanau et al., 2015) and the
capstone's Transformer each train for the same number of training seconds (`--budget-s`,
evaluation excluded), one after the other, never in parallel (GRU first unless
--transformer-first). Then each translates the validation split (all 1,014 sentences, or the first
`--val-sentences N`), greedy and with beam search (`--beam`, default 4), scored with sacreBLEU as
the capstone scores them.

* One training stack for both, the capstone's (`transformer_lib.equal_time.compare`, built on
  `transformer_lib.train.prepare` and chapter 13's `train`): the recipe's tokenizer, token-count
  batches (same seed, same order), label-smoothed loss, the paper's Adam, the recipe's schedule (the
  budget schedule decays to zero at each model's own end of budget) and precision.
* The recipe: `--preset` (default cpu-30min) changed by any flag of `python -m
  transformer_lib.train`. The Transformer is that recipe's model. The GRU has d_embed = d_model,
  d_hidden = d_attn = 448 (`--rnn-hidden`, `--rnn-attn`), about the parameter count of the
  Transformer of the earlier cpu-30min recipe, 3+3 layers with all three dropouts at 0.1 and 8,000
  tokens, which chapter 20's records ran (`--n-layers 3 --attn-dropout 0.1 --ffn-dropout 0.1
  --vocab-size 8000`; 7,722,240 against 7,578,624 parameters). Next to the current cpu-30min, 2+2
  layers and 4,000 tokens (4,711,424), a GRU of about its size has `--rnn-hidden 344 --rnn-attn
  344` (4,731,808). The
  GRU's peak learning rate is the recipe's (`--rnn-peak-lr`) and its gradient norm is clipped to 1
  (Bahdanau et al.'s value).
* Validation NLL is measured `--points` times during each run (training clock paused), so the
  record holds NLL against training seconds; after training, 10 updates are timed phase by phase
  (encoder forward, decoder forward with the loss, backward, optimiser step).
* Fairness switches: `--rnn-clip 0` trains the GRU without gradient clipping, as the recipe trains
  the Transformer (or give both `--rnn-clip 1 --clip-grad-norm 1`); `--models gru` trains the GRU
  alone, for its learning-rate trials on validation.

  python benchmarks/experiments/rnn_vs_transformer.py --n-layers 3 --attn-dropout 0.1 \
      --ffn-dropout 0.1 \
      --vocab-size 8000 --budget-s 300 --json results/rnn-vs-transformer-cpu-300s.json
  smoke test:  python benchmarks/experiments/rnn_vs_transformer.py --preset cpu-tiny --budget-s 2
  --train-pairs 500 --vocab-size 500 --val-sentences 10 --beam 2 --points 2

Writes with --json: device, torch version, git commit, date, the recipe, the GRU's sizes and
learning rate, and for each model its precision, parameters, training seconds, updates, target
tokens/s, validation NLL (and its curve), BLEU, seconds per update by phase, and the matrix-product
FLOPs of one update (forward and backward, counted on the first 20 batches, the same for both
models).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from transformer_lib.engineering import write_json
from transformer_lib.equal_time import RNN_CLIP, RNN_SIZES, compare
from transformer_lib.recipe import parse_args as recipe_args


def parse_args(argv=None):
    """This script's flags, and the recipe: --preset (default cpu-30min) and any other flag of
    `python -m transformer_lib.train`."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                epilog="Every other flag is a recipe flag of python -m "
                                       "transformer_lib.train.")
    p.add_argument("--budget-s", type=float, default=300.0,
                   help="training seconds per model (default 300)")
    p.add_argument("--val-sentences", type=int, default=0,
                   help="validation sentences for NLL and BLEU (0 = all 1,014)")
    p.add_argument("--beam", type=int, default=4, help="beam size (0 or 1 = greedy only)")
    p.add_argument("--points", type=int, default=6,
                   help="validation NLL measurements per run, the last at the end (default 6)")
    p.add_argument("--rnn-hidden", type=int, default=RNN_SIZES["d_hidden"],
                   help=f"GRU state per direction (default {RNN_SIZES['d_hidden']})")
    p.add_argument("--rnn-attn", type=int, default=RNN_SIZES["d_attn"],
                   help=f"additive attention width (default {RNN_SIZES['d_attn']})")
    p.add_argument("--rnn-peak-lr", type=float, default=None,
                   help="the GRU's peak learning rate (default: the recipe's peak_lr)")
    p.add_argument("--rnn-clip", type=float, default=RNN_CLIP,
                   help=f"the GRU's gradient-norm clipping (0 = none; default {RNN_CLIP:g}); the "
                        "Transformer's is the recipe's --clip-grad-norm")
    p.add_argument("--models", default="gru,transformer",
                   help="which models to train, in order (default gru,transformer; e.g. gru for "
                        "a tuning trial of the GRU alone)")
    p.add_argument("--transformer-first", action="store_true", help="train the Transformer first")
    p.add_argument("--json", help="also write the record to this file")
    args, rest = p.parse_known_args(argv)
    args.models = tuple(m.strip() for m in args.models.split(",") if m.strip())
    if not args.models or set(args.models) - {"gru", "transformer"}:
        p.error(f"--models takes gru and/or transformer, got {args.models}")
    if args.rnn_clip < 0:
        p.error(f"--rnn-clip must be >= 0 (0 = no clipping), got {args.rnn_clip}")
    if args.budget_s <= 0 or args.points < 1:
        p.error(f"--budget-s must be > 0 and --points >= 1, got {args.budget_s} and {args.points}")
    has_preset = any(a == "--preset" or a.startswith("--preset=") for a in rest)
    recipe, _ = recipe_args(rest if has_preset else ["--preset", "cpu-30min", *rest])
    args.command_line = list(sys.argv[1:] if argv is None else argv)
    return args, recipe


def report(record: dict) -> None:
    "The record as a table."
    print(f"{record['device']}; torch {record['torch']}; commit {record['git_commit']}; "
          f"{record['budget_s']:g} s of training each, one after the other "
          f"({' then '.join(record['order'])}); {record['val_sentences']} validation sentences")
    print(f"{'model':12s} {'parameters':>10s} {'precision':>9s} {'updates':>7s} "
          f"{'tgt tok/s':>9s} {'val NLL':>7s} {'greedy':>6s} {'beam':>6s}")
    for x in record["runs"]:
        beam = next((v for k, v in x["bleu"].items() if k.startswith("beam")), None)
        print(f"{x['model']:12s} {x['parameters']:10,d} {x['precision']:>9s} {x['updates']:7d} "
              f"{x['target_tokens_per_s']:9,.0f} {x['val_nll']:7.3f} {x['bleu']['greedy']:6.1f} "
              + (f"{beam:6.1f}" if beam is not None else f"{'-':>6s}"))


def main(argv=None) -> dict:
    args, recipe = parse_args(argv)
    recipe = dataclasses.replace(recipe, progress=recipe.progress and sys.stderr.isatty())
    models = tuple(reversed(args.models)) if args.transformer_first else args.models
    record = compare(recipe, args.budget_s, models=models, points=args.points, beam=args.beam,
                     val_sentences=args.val_sentences, rnn_peak_lr=args.rnn_peak_lr,
                     rnn_sizes={"d_hidden": args.rnn_hidden, "d_attn": args.rnn_attn},
                     rnn_clip=args.rnn_clip)
    record["command_line"] = args.command_line
    report(record)
    if args.json:
        write_json(Path(args.json), record, indent=2)
    return record


if __name__ == "__main__":
    main()
