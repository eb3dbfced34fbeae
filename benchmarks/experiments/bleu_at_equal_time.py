"""BLEU at equal training time: transformer_lib's Transformer vs torch.nn.Transformer on Multi30k
de→en.

What it measures: both models train for the same number of wall-clock training seconds
(`--budget-s`, compilation included, evaluation excluded), then translate the validation split
(all 1,014 sentences, or the first `--val-sentences N`), greedy and with beam search (`--beam`,
default 4; 0 = greedy only), scored with sacreBLEU as the capstone scores them.

* The same recipe (`--preset`, default cpu-30min, changed by any flag of `python -m
  transformer_lib.train`, e.g. `--amp` or `--train-pairs`) and the same training stack: the
  capstone's `transformer_lib.train.prepare` and `fit`, so the tokenizer, the token-count batches
  (same seed: each model sees the batches in the same order, as many as it gets through), Adam, the
  learning-rate schedule (the budget schedule decays to zero at each model's own end of budget),
  label smoothing and the time budget are one code path. Both models use the recipe's three
  dropouts (nn.Transformer has one `dropout`; `TorchReference` sets the other two apart).
* Ours as the capstone runs it: the recipe's precision (bfloat16 autocast where
  `amp_settings(device, cpu_bf16=True)` says the CPU has bf16 instructions), in training and
  decoding.
* nn.Transformer as a user would write it: eager float32, as `TorchReference` of
  `transformer_lib.benchmarking` (the same embeddings, positions, tied output and initialisation).
  It has no KV cache, so its decoding re-reads the prefix at every step (slower, same translations).
* The two runs are made one after the other, never in parallel (ours first unless
  --reference-first); a float32 matmul ceiling measured before each run shows whether the machine's
  speed changed.

  python benchmarks/experiments/bleu_at_equal_time.py --preset cpu-30min --budget-s 600 \
      --json bleu-at-600s.json
  smoke test:  python benchmarks/experiments/bleu_at_equal_time.py --preset cpu-tiny --amp \
      --budget-s 20
  --val-sentences 50

Writes with --json: device, torch version, git commit, the recipe, and for each model its
precision, parameters, training seconds, updates, epochs, target tokens/s, validation loss and BLEU.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from functools import partial
from pathlib import Path

import torch

from transformer_lib.benchmarking import TorchReference, matmul_flops_per_s
from transformer_lib.engineering import TrainingClock, provenance
from transformer_lib.multi_head_attention import count_parameters
from transformer_lib.optimization import LabelSmoothingLoss
from transformer_lib.recipe import Recipe
from transformer_lib.recipe import parse_args as recipe_args
from transformer_lib.stages import (
    budget_progress,
    fit,
    make_optimizer,
    make_schedule,
    prepare,
    prepare_model,
    timed_bleu,
)
from transformer_lib.training import evaluate_loss


def install(s, kind: str, capstone_amp) -> None:
    """Put a fresh model, optimizer, schedule and training clock into the prepared run `s`."""
    s.step, s.history, s.evals, s.train_seconds = 0, [], [], 0.0
    if kind == "transformer_lib":                     # the capstone's own set-up, untouched
        s.amp_dtype = capstone_amp
        prepare_model(s, [], None)                   # (the ids were checked once by `prepare`)
        return
    r = s.recipe
    torch.manual_seed(r.seed)
    s.model = s.trained = TorchReference(s.tokenizer.vocab_size, r.d_model, r.n_heads, r.n_layers,
                                         r.d_ff, r.dropout, r.norm_first,
                                         pad_id=s.tokenizer.pad_id, attn_dropout=r.attn_dropout,
                                         ffn_dropout=r.ffn_dropout).to(s.device)
    s.amp_dtype = None                                # eager float32, as a user would write it
    s.optimizer = make_optimizer(s.recipe, s.model.parameters())    # as the capstone's
    s.scheduler = make_schedule(s.recipe, s.optimizer,
                                partial(budget_progress, s.recipe, s.seconds_trained))
    s.n_params = count_parameters(s.model)
    s.clock = TrainingClock(s.device)              # last, as in the capstone: the budget starts now


def train_and_score(s, kind: str, capstone_amp, beam: int) -> dict:
    "Train one model for the budget, then its validation loss and BLEU (greedy, beam)."
    ceiling = matmul_flops_per_s(s.device, rounds=3)
    install(s, kind, capstone_amp)
    print(f"{kind}: training for {s.recipe.time_budget_s:g} s ...", file=sys.stderr, flush=True)
    fit(s)
    loss_fn = LabelSmoothingLoss(s.tokenizer.vocab_size, 0.0, pad_id=s.tokenizer.pad_id,
                                 reduction="sum")
    loss_fn.check_inputs = False
    val_loss = evaluate_loss(s.model, s.val_loader, loss_fn, device=s.device, amp_dtype=s.amp_dtype)
    bleu = {f"beam_{k}" if k > 1 else "greedy":
            timed_bleu(s.model, s.tokenizer, s.val_pairs, beam_size=k,
                       alpha=s.recipe.length_penalty, device=s.device, amp_dtype=s.amp_dtype)
            for k in ((1, beam) if beam > 1 else (1,))}
    tokens = sum(h["tokens"] for h in s.history)
    precision = "float32" if s.amp_dtype is None else str(s.amp_dtype).removeprefix("torch.")
    return {"model": kind, "precision": precision,
            "parameters": s.n_params, "training_seconds": s.train_seconds, "steps": s.step,
            "epochs": s.step / s.steps_per_epoch, "target_tokens_per_s": tokens / s.train_seconds,
            "final_train_loss": s.history[-1]["loss"] if s.history else None, "val_loss": val_loss,
            "bleu": {name: b["bleu"] for name, b in bleu.items()},
            "decoding_sentences_per_s": {name: b["sentences_per_s"] for name, b in bleu.items()},
            "signature": bleu["greedy"]["signature"], "ceiling_before_flops_per_s": ceiling}


def parse_args(argv=None) -> tuple[argparse.Namespace, Recipe]:
    """This script's flags, and the recipe: --preset (default cpu-30min) and any other flag of
    `python -m transformer_lib.train` (e.g. --amp, --d-model, --train-pairs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                epilog="Every other flag is a recipe flag of python -m "
                                       "transformer_lib.train.")
    p.add_argument("--budget-s", type=float, default=600.0,
                   help="training seconds per model (default 600)")
    p.add_argument("--val-sentences", type=int, default=0,
                   help="validation sentences translated (0 = all 1,014)")
    p.add_argument("--beam", type=int, default=4, help="beam size (0 or 1 = greedy only)")
    p.add_argument("--reference-first", action="store_true", help="train nn.Transformer first")
    p.add_argument("--json", help="also write the record to this file")
    args, rest = p.parse_known_args(argv)
    has_preset = any(a == "--preset" or a.startswith("--preset=") for a in rest)
    recipe, _ = recipe_args(rest if has_preset else ["--preset", "cpu-30min", *rest])
    args.command_line = list(sys.argv[1:] if argv is None else argv)
    return args, recipe


def main(argv=None) -> dict:
    args, r = parse_args(argv)
    with tempfile.TemporaryDirectory() as out_dir:      # the tokenizer file; nothing is kept
        r = dataclasses.replace(r, time_budget_s=args.budget_s,
                                epochs=0, max_steps=0, average_last=1, keep_snapshots=0,
                                checkpoint_every=10**9, eval_every=0,
                                eval_sentences=args.val_sentences, progress=sys.stderr.isatty(),
                                out_dir=out_dir)
        s = prepare(r)                      # tokenizer, batches, ours with the capstone's precision
        capstone_amp = s.amp_dtype
        order = ["transformer_lib", "nn.Transformer"][::-1 if args.reference_first else 1]
        runs = [train_and_score(s, kind, capstone_amp, args.beam) for kind in order]
    record = {**provenance(s.device, 1, s.commit),
              "task": "Multi30k task 1, German→English, validation split",
              "command_line": args.command_line, "recipe": dataclasses.asdict(r),
              "budget_s": args.budget_s,
              "val_sentences": len(s.val_pairs), "beam_size": args.beam if args.beam > 1 else None,
              "sequential": True, "order": order, "runs": runs}
    print(f"{record['device']}; torch {record['torch']}; commit {record['git_commit']}; "
          f"{args.budget_s:g} s of training each, one after the other ({' then '.join(order)}); "
          f"{len(s.val_pairs)} validation sentences")
    print(f"{'model':16s} {'precision':>9s} {'updates':>8s} {'epochs':>6s} {'tgt tokens/s':>12s} "
          f"{'val loss':>8s} {'greedy':>6s} {'beam':>6s}")
    for x in runs:
        beam = x["bleu"].get(f"beam_{args.beam}")
        print(f"{x['model']:16s} {x['precision']:>9s} {x['steps']:8d} {x['epochs']:6.2f} "
              f"{x['target_tokens_per_s']:12,.0f} {x['val_loss']:8.3f} {x['bleu']['greedy']:6.1f} "
              + (f"{beam:6.1f}" if beam is not None else f"{'-':>6s}"))
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=2))
    return record


if __name__ == "__main__":
    main()
