"""Parity: transformer_lib's Transformer and torch.nn.Transformer trained with one recipe for the
same number of updates, on Multi30k de→en.

The same function is tested in tests/ (same weights, same outputs); this script checks the same
*learning*: both models train one after the other with the capstone's own stack (`train.prepare`
and `fit`: one tokenizer, the same token-count batches in the same order, label smoothing, the
paper's Adam and the recipe's schedule) for exactly `--updates` updates, at the same precision (the
recipe's: bfloat16 autocast where the CPU or GPU has it, for both models), each from seed
`--seed`. The schedule depends on the update count only (no time budget), so two runs of one
model give the same numbers whatever the machine is doing; sharing a GPU changes time, not results.

Reported for each model: the training loss of every update (label-smoothed, dropout on), its
mean over windows of 100 updates, the validation NLL (per target token, no smoothing, dropout
off) and validation BLEU (greedy, and beam search with --beam, scored as the capstone scores),
target tokens/s; per decoding, the output's length against the references' and the brevity
penalty, and with --decode-float32 the same decodings in float32. Parity means: at equal updates
our validation NLL is within 1% of nn.Transformer's and our BLEU within 0.5 of its (or above
either).

The models (--models, in the order given):
* `ours`: the capstone's model as it ships (`train.build_model`).
* `nn.Transformer`: `transformer_lib.benchmarking.TorchReference`, nn.Transformer with the
  same embeddings, positions and tied output (its own `_reset_parameters` otherwise).
* `ours-per-block-qkv`: ours with W_Q, W_K, W_V each initialised as a d x d Xavier matrix (gain 1,
  `QKV_INIT_GAIN = 1`), the bound shipped before the parity fix (chapter 11).
* `ours-from-torch-init`: ours started from nn.Transformer's own initial weights (same seed), which
  separates how the models start from what they compute. (The record
  results/parity-cpu-30min-ffn-bias.json came from a kind of commit f815432 that drew the FFN
  biases as nn.Linear does; the model now always does, so the kind is gone.)
Both models use the recipe's three dropouts (sub-layer outputs, attention weights, FFN);
nn.Transformer has one `dropout`, so TorchReference sets the other two apart.

  python benchmarks/experiments/parity.py --preset cpu-30min --updates 1500 \
      --json results/parity-cpu-30min.json
  python benchmarks/experiments/parity.py --preset gpu --updates 960 --beam 4 \
      --json results/gpu-parity.json
  smoke test:  python benchmarks/experiments/parity.py --preset cpu-tiny --updates 20 \
      --val-sentences 20
  at equal time (the runbook's call 2): each model its own process, the recipe's time budget,
  then the ratios of updates and tokens/s from one record:
    python benchmarks/experiments/parity.py --preset gpu-30s --equal-time --models ours \
        --json a.json
    python benchmarks/experiments/parity.py --preset gpu-30s --equal-time \
        --models nn.Transformer --json b.json
    python benchmarks/experiments/parity.py --combine a.json b.json --json gpu-30s-pair.json
  one model per process (e.g. two at once on one GPU), then the verdict of their records:
    python benchmarks/experiments/parity.py --models ours --json a.json &
    python benchmarks/experiments/parity.py --models nn.Transformer --json b.json; wait
    python benchmarks/experiments/parity.py --combine a.json b.json --json c.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
from functools import partial
from pathlib import Path

import sacrebleu
import torch

from transformer_lib import model as model_module
from transformer_lib.benchmarking import TorchReference
from transformer_lib.engineering import TrainingClock, provenance, write_json
from transformer_lib.interop import from_torch
from transformer_lib.multi_head_attention import count_parameters
from transformer_lib.optimization import LabelSmoothingLoss
from transformer_lib.recipe import parse_args as recipe_args
from transformer_lib.records import startup_record
from transformer_lib.stages import (
    budget_progress,
    fit,
    make_optimizer,
    make_schedule,
    prepare,
    prepare_model,
    timed_bleu,
)
from transformer_lib.text import SACREBLEU_SETTINGS
from transformer_lib.training import evaluate_loss


def precision(dtype: torch.dtype | None) -> str:
    return "float32" if dtype is None else str(dtype).removeprefix("torch.")


MODELS = ("ours", "nn.Transformer", "ours-per-block-qkv", "ours-from-torch-init")
NLL_TOLERANCE, BLEU_TOLERANCE = 0.01, 0.5        # relative, absolute (the parity criterion)
WINDOW = 100                                      # updates per mean of the training loss


def install(s, kind: str, amp_dtype) -> None:
    """Put a fresh model (seeded), optimizer, schedule and clock into the prepared run `s`."""
    s.step, s.history, s.evals, s.train_seconds, s.first_updates = 0, [], [], 0.0, []
    s.amp_dtype = amp_dtype                                      # one precision for every model
    if kind != "nn.Transformer":
        gain = model_module.QKV_INIT_GAIN
        model_module.QKV_INIT_GAIN = 1.0 if kind == "ours-per-block-qkv" else gain
        try:
            prepare_model(s, [], None)    # the capstone's own set-up (ids checked by prepare)
        finally:
            model_module.QKV_INIT_GAIN = gain
        if kind == "ours-from-torch-init":      # nn.Transformer's initial weights, in our model
            torch.manual_seed(s.recipe.seed)
            ref = reference_model(s)
            with torch.no_grad():
                s.model.encoder.load_state_dict(from_torch(ref.core.encoder).state_dict())
                s.model.decoder.load_state_dict(from_torch(ref.core.decoder).state_dict())
                s.model.src_embed.weight.copy_(ref.embed.weight)
            torch.manual_seed(s.recipe.seed)                   # a seeded start for dropout
        return
    torch.manual_seed(s.recipe.seed)
    s.model = s.trained = reference_model(s).to(s.device)
    s.optimizer = make_optimizer(s.recipe, s.model.parameters())    # as the capstone's
    s.scheduler = make_schedule(s.recipe, s.optimizer,
                                partial(budget_progress, s.recipe, s.seconds_trained))
    s.n_params = count_parameters(s.model)
    s.clock = TrainingClock(s.device)


def reference_model(s) -> TorchReference:
    "nn.Transformer at the recipe's sizes, with our embeddings, positions and tied output."
    r = s.recipe
    return TorchReference(s.tokenizer.vocab_size, r.d_model, r.n_heads, r.n_layers, r.d_ff,
                          r.dropout, r.norm_first, pad_id=s.tokenizer.pad_id,
                          attn_dropout=r.attn_dropout, ffn_dropout=r.ffn_dropout)


def window_means(losses: list[float], width: int = WINDOW) -> list[float]:
    "Mean of each full window of `width` consecutive values (updates 1-100, 101-200, ...)."
    return [statistics.fmean(losses[i:i + width]) for i in range(0, len(losses) - width + 1, width)]


def decode(s, beam_size: int, amp_dtype) -> dict:
    """Validation BLEU of one decoding of `s.model` under `amp_dtype` (None = float32), with the
    length of its output against the references' (sacreBLEU's sys_len / ref_len) and the brevity
    penalty: where two models gain differently from beam search, this says whether one of them
    ends its hypotheses early."""
    out = timed_bleu(s.model, s.tokenizer, s.val_pairs, beam_size=beam_size,
                     alpha=s.recipe.length_penalty, device=s.device, amp_dtype=amp_dtype)
    stats = sacrebleu.BLEU(**SACREBLEU_SETTINGS).corpus_score(out["hypotheses"],
                                                              [[en for _, en in s.val_pairs]])
    return {"bleu": out["bleu"], "precision": precision(amp_dtype),
            "length_ratio": stats.sys_len / stats.ref_len, "brevity_penalty": stats.bp,
            "signature": out["signature"]}


def train_and_score(s, kind: str, amp_dtype, beam: int, decode_float32: bool = False) -> dict:
    """Train one model for the recipe's max_steps, then its validation NLL and BLEU; with
    `decode_float32`, each decoding once more in float32 (a diagnostic, not judged)."""
    install(s, kind, amp_dtype)
    limit = (f"{s.recipe.max_steps} updates" if s.recipe.max_steps
             else f"{s.recipe.time_budget_s:g} s")
    print(f"{kind}: training for {limit} ...", file=sys.stderr, flush=True)
    fit(s)
    nll = LabelSmoothingLoss(s.tokenizer.vocab_size, 0.0, pad_id=s.tokenizer.pad_id,
                             reduction="sum")
    nll.check_inputs = False
    val_nll = evaluate_loss(s.model, s.val_loader, nll, device=s.device, amp_dtype=s.amp_dtype)
    sizes = (1, beam) if beam > 1 else (1,)
    precisions = {"": s.amp_dtype, **({"_float32": None} if decode_float32 else {})}
    decoding = {(f"beam_{k}" if k > 1 else "greedy") + suffix: decode(s, k, amp)
                for suffix, amp in precisions.items() for k in sizes}
    bleu = {name: d["bleu"] for name, d in decoding.items() if not name.endswith("_float32")}
    losses = [h["loss"] for h in s.history]       # one per update (one per 10 with --equal-time)
    tokens = sum(h["tokens"] for h in s.history)
    return {"model": kind, "seed": s.recipe.seed, "parameters": s.n_params, "steps": s.step,
            "epochs": s.step / s.steps_per_epoch, "training_seconds": s.train_seconds,
            "target_tokens_per_s": tokens / s.train_seconds,
            "val_nll": val_nll, "bleu": bleu,
            "signature": decoding["greedy"]["signature"], "decoding": decoding,
            f"train_loss_mean_per_{WINDOW}": [round(x, 4) for x in window_means(losses)],
            "train_loss": [round(x, 4) for x in losses], "startup": startup_record(s)}


def verdict(runs: list[dict], equal_time: bool = False) -> dict | None:
    """Ours against nn.Transformer at equal updates: NLL within 1% (or lower), every BLEU within
    0.5 (or higher). None unless both ran for the same number of updates. Runs of several seeds
    (records joined by --combine) are judged seed by seed ("per_seed") and on the means over seeds
    of the NLL ratio and the BLEU gaps."""
    seeds = sorted({x.get("seed", 0) for x in runs})
    if len(seeds) > 1:
        per = {str(sd): verdict([x for x in runs if x.get("seed", 0) == sd], equal_time)
               for sd in seeds}
        if any(v is None for v in per.values()):
            return None
        ratio = statistics.fmean(v["val_nll_ratio"] for v in per.values())
        gaps = {k: statistics.fmean(v["bleu_gap"][k] for v in per.values())
                for k in next(iter(per.values()))["bleu_gap"]}
        return {"updates": next(iter(per.values()))["updates"], "seeds": seeds,
                "val_nll_ratio": ratio, "bleu_gap": gaps, "parity": _parity(ratio, gaps),
                "criterion": _CRITERION + " (means over the seeds)", "per_seed": per}
    by = {x["model"]: x for x in runs}
    ours, ref = by.get("ours"), by.get("nn.Transformer")
    if ours is None or ref is None or (not equal_time and ours["steps"] != ref["steps"]):
        return None
    if equal_time:                                  # the same seconds, not the same updates
        return {"equal_time_s": ours["training_seconds"], "updates": [ours["steps"], ref["steps"]],
                "updates_ratio": ours["steps"] / ref["steps"],
                "tokens_per_s_ratio": ours["target_tokens_per_s"] / ref["target_tokens_per_s"],
                "val_nll_ratio": ours["val_nll"] / ref["val_nll"],
                "bleu_gap": {k: ours["bleu"][k] - ref["bleu"][k] for k in ours["bleu"]
                             if k in ref["bleu"]},
                "parity": None, "criterion": "none at equal time: the ratios are the result"}
    nll_ratio = ours["val_nll"] / ref["val_nll"]
    bleu_gap = {k: ours["bleu"][k] - ref["bleu"][k] for k in ours["bleu"] if k in ref["bleu"]}
    return {"updates": ours["steps"], "val_nll_ratio": nll_ratio, "bleu_gap": bleu_gap,
            "parity": _parity(nll_ratio, bleu_gap), "criterion": _CRITERION}


_CRITERION = (f"val NLL <= {1 + NLL_TOLERANCE:g} x nn.Transformer's, BLEU >= nn.Transformer's - "
              f"{BLEU_TOLERANCE:g}")


def _parity(nll_ratio: float, bleu_gap: dict) -> bool:
    return nll_ratio <= 1 + NLL_TOLERANCE and all(g >= -BLEU_TOLERANCE for g in bleu_gap.values())


def parse_args(argv=None):
    """This script's flags, and the recipe: --preset (default cpu-30min) and any other flag of
    `python -m transformer_lib.train` (e.g. --amp, --d-model, --train-pairs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                epilog="Every other flag is a recipe flag of python -m "
                                       "transformer_lib.train.")
    p.add_argument("--updates", type=int, default=1000, help="updates per model (default 1000)")
    p.add_argument("--updates-in-epochs", type=int, default=0, metavar="E",
                   help="instead of --updates: E epochs' worth of updates (0 = use --updates)")
    p.add_argument("--equal-time", action="store_true",
                   help="instead of --updates: each model trains for the recipe's time budget "
                        "(--time-budget-s), logged every --log-every updates, the clock after "
                        "each of the first 100 updates kept")
    p.add_argument("--models", nargs="+", choices=MODELS, default=["ours", "nn.Transformer"],
                   help="models to train, in this order (default: ours nn.Transformer)")
    p.add_argument("--val-sentences", type=int, default=0,
                   help="validation sentences for NLL and BLEU (0 = all 1,014)")
    p.add_argument("--beam", type=int, default=0,
                   help="also beam search of this size (0 or 1 = greedy only; default 0)")
    p.add_argument("--decode-float32", action="store_true",
                   help="also decode in float32 (per run under 'decoding', with output lengths; "
                        "not judged): tells rounding in the recipe's precision from the model")
    p.add_argument("--combine", nargs="+", metavar="RECORD",
                   help="train nothing: join these records' runs and judge parity")
    p.add_argument("--json", help="also write the record to this file")
    args, rest = p.parse_known_args(argv)
    has_preset = any(a == "--preset" or a.startswith("--preset=") for a in rest)
    recipe, _ = recipe_args(rest if has_preset else ["--preset", "cpu-30min", *rest])
    if args.updates < 1 or args.updates_in_epochs < 0:
        p.error(f"--updates must be >= 1 and --updates-in-epochs >= 0, got {args.updates} and "
                f"{args.updates_in_epochs}")
    args.command_line = list(sys.argv[1:] if argv is None else argv)
    return args, recipe


def report(record: dict) -> None:
    print(f"{record['device']}; torch {record['torch']}; commit {record['git_commit']}; "
          f"{record['precision']}; {record['val_sentences']} validation sentences")
    print(f"{'model':20s} {'seed':>4s} {'updates':>7s} {'epochs':>6s} {'tgt tok/s':>9s} "
          f"{'last 100':>8s} {'val NLL':>7s} {'greedy':>6s} {'beam':>6s}")
    for x in record["runs"]:
        beam = next((v for k, v in x["bleu"].items() if k.startswith("beam")), None)
        print(f"{x['model']:20s} {x.get('seed', 0):4d} {x['steps']:7d} {x['epochs']:6.2f} "
              f"{x['target_tokens_per_s']:9,.0f} "
              f"{statistics.fmean(x['train_loss'][-WINDOW:]):8.3f} "
              f"{x['val_nll']:7.3f} {x['bleu']['greedy']:6.1f} "
              + (f"{beam:6.1f}" if beam is not None else f"{'-':>6s}"))
    for x in record["runs"]:
        if "decoding" in x:        # records from before the decoding diagnostics have none
            print(f"{x['model']:20s} {x.get('seed', 0):4d} output length / references': "
                  + ", ".join(f"{k} {d['length_ratio']:.3f} (BLEU {d['bleu']:.1f})"
                              for k, d in x["decoding"].items()))
    v = record.get("verdict")
    if v and "updates_ratio" in v:
        print(f"in {v['equal_time_s']:.0f} s each: ours / nn.Transformer updates "
              f"{v['updates_ratio']:.3f} ({v['updates'][0]} / {v['updates'][1]}), tokens/s "
              f"{v['tokens_per_s_ratio']:.3f}, val NLL {v['val_nll_ratio']:.4f}, BLEU gap "
              + ", ".join(f"{k} {g:+.2f}" for k, g in v["bleu_gap"].items()))
        return
    for seed, w in (v or {}).get("per_seed", {}).items():
        print(f"seed {seed}: val NLL ratio {w['val_nll_ratio']:.4f}")
    if v:
        print(f"ours / nn.Transformer val NLL {v['val_nll_ratio']:.4f}, BLEU gap "
              + ", ".join(f"{k} {g:+.2f}" for k, g in v["bleu_gap"].items())
              + f": {'PARITY' if v['parity'] else 'NO PARITY'} ({v['criterion']})")


def combine(paths: list[str]) -> dict:
    """One record from several (e.g. two processes that shared a GPU, or runs of other seeds): their
    runs, and the verdict."""
    records = [json.loads(Path(p).read_text()) for p in paths]
    first = records[0]

    def setting(r):     # the recipe, less where each process kept its files and the seed it drew
        return ({k: v for k, v in r["recipe"].items() if k not in ("out_dir", "progress", "seed")},
                r["precision"])
    for p, r in zip(paths[1:], records[1:]):
        if setting(r) != setting(first):
            raise SystemExit(f"{p} was run with another recipe or precision than {paths[0]}")
    runs = [x for r in records for x in r["runs"]]
    # runs at equal time ran one after the other (a time-budgeted run sharing a GPU makes fewer
    # updates); runs of a fixed number of updates may have shared the GPU
    return {**first, "combined_from": paths, "sequential": first.get("equal_time", False),
            "runs": runs,
            "verdict": verdict(runs, first.get("equal_time", False))}


def main(argv=None) -> dict:
    args, r = parse_args(argv)
    if args.combine:
        record = combine(args.combine)
    else:
        with tempfile.TemporaryDirectory() as out_dir:     # the tokenizer file; nothing is kept
            limits = (dict(max_steps=0) if args.equal_time       # the recipe's time budget
                      else dict(time_budget_s=0.0, max_steps=args.updates, log_every=1))
            r = dataclasses.replace(r, epochs=0, **limits, compile=False, average_last=1,
                                    keep_snapshots=0, checkpoint_every=10**9, eval_every=0,
                                    eval_sentences=args.val_sentences,
                                    progress=sys.stderr.isatty(), out_dir=out_dir)
            s = prepare(r)                        # tokenizer, batches, the recipe's precision
            if args.updates_in_epochs:
                r = s.recipe = dataclasses.replace(r, max_steps=args.updates_in_epochs
                                                   * s.steps_per_epoch)
            amp_dtype = s.amp_dtype
            runs = [train_and_score(s, kind, amp_dtype, args.beam, args.decode_float32)
                    for kind in args.models]
        record = {**provenance(s.device, 1, s.commit),
                  "task": "Multi30k task 1, German→English, validation split",
                  "command_line": args.command_line, "recipe": dataclasses.asdict(r),
                  "precision": "float32" if amp_dtype is None
                  else str(amp_dtype).removeprefix("torch."),
                  "val_sentences": len(s.val_pairs), "sequential": True,
                  "equal_time": args.equal_time, "runs": runs,
                  "verdict": verdict(runs, args.equal_time)}
    report(record)
    if args.json:
        write_json(args.json, record)
    return record


if __name__ == "__main__":
    main()
