"""The `gpu-30s` recipe's sweep: up to five variants, thirty seconds of training each, one after the
other, the winner chosen on the validation split and only the winner scored on the test split.

    python benchmarks/experiments/gpu30s_sweep.py --json gpu-30s-sweep.json [--variants NAME ...]
                                      [--deadline-s S] [-- TRAIN_FLAGS ...]
    python benchmarks/experiments/gpu30s_sweep.py --variants preset --beam-table \
        --json gpu-30s-beam.json

Each variant is `python -m transformer_lib.train --preset gpu-30s FLAGS` (the `command` of its row
reruns it alone), trained by `transformer_lib.train.prepare` and `fit` in a fresh process of its
own, so that each pays the start-up a fresh run of the preset pays (in the first H200 run its first
10 updates took 4.6 s of the 30), and none shares the GPU with another (a time-budgeted run that
shares a GPU makes fewer updates). At the end of its training the worker keeps the better of the
last weights and the average of the last epoch snapshots on validation BLEU (`choose_weights`, the
CLI's own rule) and writes its validation loss and greedy BLEU (all 1,014 sentences) and its
weights; it never translates the test split. The winner is the variant with the highest validation
greedy BLEU (ties: the lower validation loss); then, in this process, the winner's weights alone
translate test_2016_flickr, greedily and with beam search as the CLI does. Skipping the test
translations of the four others saves about 5 s each. `--beam-table` also decodes the validation
split with the winner's weights at beam sizes `--beams` and length penalties `--alphas`, in the
run's precision and in float32, with the output lengths: whether beam search gains nothing for ours
because it ends early (the brevity penalty) or because of bfloat16 rounding.

The variants, in priority order (a deadline drops them from the end), chosen before any GPU run:

* `preset`: the `gpu-30s` preset as it is, the baseline on the same machine and commit (920 updates,
  validation greedy 33.7, test 32.7 greedy and 32.7 beam on an H200: results/gpu-30s.json).
* `budget`: the budget schedule with the `cpu-30min` preset's decay from half the budget: eq. (3),
  with the preset's 300 warm-up updates, still runs at sqrt(300/920) = 0.57 of its peak when the
  30 s end; the CPU recipe took the budget schedule for that reason (chapters 14 and 18).
* `budget-batch-6k`: the budget schedule and batches of 6,144 tokens: d 256 at 272k target tokens/s
  uses a few percent of an H200's bfloat16 rate, so an update costs mostly fixed overhead and half
  the batch should buy nearly twice the updates; on the CPU, at equal tokens, the row with half the
  updates (2,048-token batches) ended at 4.3 and 3.1 validation BLEU against 11.8 and 11.1
  (results/ablations/batch_2048*.json vs base*.json).
* `budget-pre-ln`: the budget schedule, pre-LN and a peak of 3e-3 instead of 2e-3: on the CPU,
  post-LN ended at 4.2 and 2.9 validation BLEU against pre-LN's 11.8 and 11.1 after the same 458
  updates (results/ablations/post_ln*.json); a 3e-3 peak lost there (6.7 and 5.1) with 1,024-token
  batches, but the GPU's batches are 12 times larger, which tolerates a larger step.
* `budget-d512`: the budget schedule at the `gpu` preset's width and peak (d 512, 8 heads,
  d_ff 2048, 1e-3): on the H200 the width cost little speed (d 512 compiled, 358k median target
  tokens/s in the first H200 run of the `gpu` preset, 2026-11-26, not committed; d 256 eager, 330k
  in results/gpu-30s.json), and 1,000 updates of d 512 reached 30.4-32.4 validation greedy BLEU in
  results/gpu-parity.json, with dropout 0.3 and eq. (3).

A variant that fails (e.g. diverges) or runs past its time is recorded as such and the others go on.
Trailing flags after `--` go to every variant (the runbook's `--tiny` passes CPU stand-ins there).
The record: provenance (device, torch, commit from GIT_COMMIT, date), every variant's flags,
updates, target tokens/s, validation loss and BLEU, the rule, and the winner's test scores together
with its CLI-shaped record (`winner_record`, the fields of results/gpu-30s.json).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sacrebleu
import torch

from transformer_lib.data import load_multi30k
from transformer_lib.engineering import (
    amp_settings,
    device_label,
    git_commit,
    pick_device,
    provenance,
    write_json,
)
from transformer_lib.model import Transformer
from transformer_lib.optimization import save_checkpoint
from transformer_lib.recipe import parse_args as recipe_args
from transformer_lib.text import SubwordTokenizer

BASE = ["--preset", "gpu-30s"]
BUDGET = ["--schedule", "budget", "--decay-start", "0.5"]
VARIANTS: dict[str, tuple[list[str], str]] = {
    "preset": ([], "the gpu-30s preset as it is: the baseline on the same machine and commit"),
    "budget": (BUDGET, "budget schedule (decay from half the budget): eq. 3 ends at 0.57 of its "
                       "peak after 920 updates"),
    "budget-batch-6k": (BUDGET + ["--batch-tokens", "6144"],
                        "budget schedule, half the batch: more updates in the same 30 s"),
    "budget-pre-ln": (BUDGET + ["--norm-first", "--peak-lr", "3e-3"],
                      "budget schedule, pre-LN at a higher peak (3e-3)"),
    "budget-d512": (BUDGET + ["--d-model", "512", "--n-heads", "8", "--d-ff", "2048",
                              "--peak-lr", "1e-3"],
                    "budget schedule at the gpu preset's width and peak (d 512, 1e-3)"),
}
RULE = ("highest validation greedy BLEU (all validation sentences), ties broken by the lower "
        "validation loss; the test split is translated for the winner only")
FIRST_OVERHEAD_S = 30.0    # a variant's seconds beyond its training budget, before one has run
TEST_RESERVE_S = 20.0      # the winner's test translations (greedy and beam 4: ~5 s on the H200)
BEAM_TABLE_RESERVE_S = 60.0


# --- the worker: one variant in its own process -----------------------------------------------
def worker(flags: list[str]) -> int:
    """Train the recipe of `flags` (its --out-dir holds the run), choose its weights on validation,
    write OUT_DIR/model.pt, history.json and row.json. The test split is never translated."""
    from transformer_lib.records import startup_record
    from transformer_lib.stages import choose_weights, fit, prepare
    recipe, _ = recipe_args(flags)
    out = Path(recipe.out_dir)
    try:
        s = fit(prepare(recipe))
        chosen = choose_weights(s)                     # last vs averaged, on validation BLEU only
    except Exception as e:              # diverged, out of memory, ...: a row, and the sweep goes on
        write_json(out / "row.json", {"error": " ".join(str(e).split())[:500]})
        print(f"error: {e}", file=sys.stderr)
        return 1
    save_checkpoint(out / "model.pt", s.model, extra={"weights": chosen,
                                                      "tokenizer": s.tok_path.name})
    val = next(e for e in reversed(s.evals) if e.get("weights") == chosen)
    tokens = sum(h["tokens"] for h in s.history)
    row = {"precision": str(s.amp_dtype or torch.float32).removeprefix("torch."),
           "device": device_label(s.device), "parameters": s.n_params,
           "updates": s.step, "epochs": round(s.step / s.steps_per_epoch, 2),
           "training_seconds": round(s.train_seconds, 2),
           "target_tokens_per_s": tokens / max(s.train_seconds, 1e-9),
           "weights": chosen,
           "val": {"loss": val["val_loss"], "bleu_greedy": val["bleu_greedy"],
                   "sentences": len(s.val_pairs)},
           "val_evals": [{"weights": e["weights"], "loss": e["val_loss"],
                          "bleu_greedy": e["bleu_greedy"]} for e in s.evals if "weights" in e],
           "startup": startup_record(s)}
    write_json(out / "history.json", s.history, indent=None)
    write_json(out / "row.json", row)
    print(f"val loss {row['val']['loss']:.3f}, greedy BLEU {row['val']['bleu_greedy']:.2f}; "
          f"{row['updates']} updates, {row['target_tokens_per_s']:,.0f} target tokens/s",
          flush=True)
    return 0


# --- the parent: variants one at a time, the winner, its test scores -----------------------------
def train_variant(flags: list[str], run_dir: Path, timeout_s: float | None) -> dict:
    """Run one variant in a fresh process (`worker`); its row.json, or {"error": ...}."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--", *flags]
    try:
        proc = subprocess.run(cmd, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"stopped after {timeout_s:.0f} s (the sweep's deadline)"}
    row_file = run_dir / "row.json"
    if not row_file.is_file():
        return {"error": f"the worker exited with {proc.returncode} and wrote no row"}
    return json.loads(row_file.read_text())


def val_key(row: dict) -> tuple[float, float]:
    "What the winner maximises: validation greedy BLEU, then minus validation loss."
    return (row["val"]["bleu_greedy"], -row["val"]["loss"])


def pick_winner(rows: list[dict]) -> dict | None:
    "The row with the best `val_key` among those that trained; None if none did."
    done = [r for r in rows if "val" in r]
    return max(done, key=val_key) if done else None


def trained_run(run_dir: Path) -> tuple[Transformer, SubwordTokenizer]:
    "`train.load_run`, without the per-call id checks (our own tokenizer's ids, as the CLI's)."
    from transformer_lib.records import load_run
    model, tok, _ = load_run(run_dir)
    model.check_inputs = False
    return model, tok


def _setting(recipe):
    device = pick_device(recipe.device)
    return device, (amp_settings(device, cpu_bf16=True)[0] if recipe.amp else None)


def score_test(flags: list[str], run_dir: Path, row: dict) -> dict:
    """The winner's test_2016_flickr BLEU (greedy and beam, the recipe's beam size and length
    penalty) and its record in the CLI's shape (`results_record`)."""
    from transformer_lib.records import results_record
    from transformer_lib.stages import timed_bleu
    recipe, _ = recipe_args(flags)
    device, amp_dtype = _setting(recipe)
    model, tok = trained_run(run_dir)
    model.to(device)
    pairs = load_multi30k("test_2016_flickr")[:recipe.test_sentences or None]
    greedy, beam = (timed_bleu(model, tok, pairs, beam_size=k, alpha=recipe.length_penalty,
                               device=device, amp_dtype=amp_dtype) for k in (1, recipe.beam_size))
    record = results_record(
        recipe, {"precision": row["precision"], **provenance(device, 1, git_commit())},
        parameters=row["parameters"], training_seconds=row["training_seconds"],
        steps=row["updates"], epochs=row["epochs"], weights=row["weights"],
        history=json.loads((run_dir / "history.json").read_text()), val=row["val"],
        test_greedy=greedy, test_beam=beam, startup=row.get("startup"))
    return {"test_2016_flickr": record["test_2016_flickr"], "record": record}


def beam_table(flags: list[str], run_dir: Path, beams: list[int], alphas: list[float]) -> list:
    """Validation BLEU, length ratio and brevity penalty of greedy decoding and of every (beam,
    alpha), in the run's precision and in float32."""
    from transformer_lib.stages import timed_bleu
    recipe, _ = recipe_args(flags)
    device, amp_dtype = _setting(recipe)
    model, tok = trained_run(run_dir)
    model.to(device)
    pairs = load_multi30k("val")[:recipe.eval_sentences or None]
    refs = [[en for _, en in pairs]]
    rows = []
    for amp in [amp_dtype] + [None] * (amp_dtype is not None):      # the run's, then float32
        for beam, alpha in [(1, 0.0)] + [(b, a) for b in beams for a in alphas]:
            r = timed_bleu(model, tok, pairs, beam_size=beam, alpha=alpha, device=device,
                           amp_dtype=amp)
            stats = sacrebleu.corpus_bleu(r["hypotheses"], refs)
            rows.append({"precision": str(amp or torch.float32).removeprefix("torch."),
                         "beam_size": beam, "alpha": alpha, "bleu": r["bleu"],
                         "length_ratio": stats.sys_len / stats.ref_len, "brevity_penalty": stats.bp,
                         "sentences_per_s": r["sentences_per_s"]})
            print(f"{rows[-1]['precision']:>8} beam {beam} alpha {alpha:.1f}: BLEU {r['bleu']:.2f}"
                  f", length ratio {rows[-1]['length_ratio']:.3f}", flush=True)
    return rows


def parse_args(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS),
                   help="which variants, in this order (default: all five)")
    p.add_argument("--deadline-s", type=float, default=0.0,
                   help="seconds from the start within which the sweep ends: a variant that would "
                        "not end in time (with the winner's test) is skipped (0 = no deadline)")
    p.add_argument("--runs", help="directory of the variants' runs (default: a temporary one)")
    p.add_argument("--beam-table", action="store_true",
                   help="also decode the validation split with the winner's weights at --beams x "
                        "--alphas, in the run's precision and in float32")
    p.add_argument("--beams", type=int, nargs="+", default=[4])
    p.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.6, 1.0, 1.4])
    p.add_argument("--json", help="write the record to this file (after every variant)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(own)
    return args, extra


def main(argv=None) -> dict | int:
    args, extra = parse_args(argv)
    if args.worker:
        return worker(extra)
    if args.runs:
        return sweep(args, extra, Path(args.runs), argv)
    with tempfile.TemporaryDirectory() as runs:        # the variants' runs; nothing is kept
        return sweep(args, extra, Path(runs), argv)


def sweep(args, extra: list[str], runs: Path, argv) -> dict:
    t0 = time.perf_counter()
    plan = {}
    for name in args.variants:                 # every variant's flags checked before any training
        flags = [*BASE, *VARIANTS[name][0], *extra, "--out-dir", str(runs / name), "--no-progress"]
        plan[name] = (flags, recipe_args(flags)[0])
    first = next(iter(plan.values()))[1]
    # provenance with the device's name once the variants are done: this process touches no GPU
    # while they train (each variant's row names its device)
    record = {"task": "Multi30k task 1, German→English", "measured": True,
              "what": "gpu-30s recipe sweep, one variant at a time, each in a process of its own",
              **provenance(torch.device("cpu"), 1, git_commit()), "device": None,
              "command_line": shlex.join(["benchmarks/experiments/gpu30s_sweep.py",
                                          *(sys.argv[1:] if argv is None else argv)]),
              "base": BASE[1], "base_recipe": dataclasses.asdict(recipe_args(BASE)[0]),
              "extra_flags": extra, "rule": RULE, "sequential": True,
              "deadline_s": args.deadline_s, "variants": [], "winner": None}
    reserve = TEST_RESERVE_S + BEAM_TABLE_RESERVE_S * args.beam_table
    walls: list[float] = []
    for name, (flags, recipe) in plan.items():
        row = {"name": name, "why": VARIANTS[name][1], "flags": VARIANTS[name][0],
               "command": "python -m transformer_lib.train " + " ".join([*BASE,
                                                                         *VARIANTS[name][0]]),
               "recipe": {k: v for k, v in dataclasses.asdict(recipe).items()
                          if v != record["base_recipe"][k]
                          and k not in ("out_dir", "progress")}}
        left = args.deadline_s - (time.perf_counter() - t0) if args.deadline_s else None
        need = (max(walls) if walls else recipe.time_budget_s + FIRST_OVERHEAD_S) + reserve
        if left is not None and need > left:
            row["skipped"] = f"{left:.0f} s left before the deadline, {need:.0f} s needed"
            print(f"=== {name}: SKIPPED ({row['skipped']})", flush=True)
        else:
            print(f"=== {name}: {row['command']}", flush=True)
            start = time.perf_counter()
            row.update(train_variant(flags, runs / name,
                                     None if left is None else max(left - TEST_RESERVE_S, 1.0)))
            row["wall_seconds"] = round(time.perf_counter() - start, 1)
            walls.append(row["wall_seconds"])
        record["variants"].append(row)
        if args.json:
            write_json(args.json, record)
    record.update(provenance(pick_device(first.device), 1, record["git_commit"]))
    best = pick_winner(record["variants"])
    if best is not None:
        flags, run_dir = plan[best["name"]][0], runs / best["name"]
        print(f"=== winner on validation: {best['name']} (greedy BLEU "
              f"{best['val']['bleu_greedy']:.2f}); translating the test split", flush=True)
        test = score_test(flags, run_dir, best)
        record["winner"] = {"name": best["name"], "flags": best["flags"],
                            "command": best["command"], "val": best["val"],
                            "test_2016_flickr": test["test_2016_flickr"]}
        record["winner_record"] = test["record"]
        t = test["test_2016_flickr"]
        print(f"{best['name']}: test_2016_flickr greedy {t['bleu_greedy']:.2f}, beam "
              f"{t['bleu_beam']:.2f}", flush=True)
        if args.beam_table:
            record["beam_table"] = {"split": "val", "variant": best["name"],
                                    "rows": beam_table(flags, run_dir, args.beams, args.alphas)}
    record["seconds"] = round(time.perf_counter() - t0, 1)
    if args.json:
        write_json(args.json, record)
    for row in record["variants"]:
        state = (f"val greedy {row['val']['bleu_greedy']:6.2f}, loss {row['val']['loss']:.3f}, "
                 f"{row['updates']:5d} updates, {row['target_tokens_per_s']:9,.0f} tok/s"
                 if "val" in row else row.get("skipped") or row.get("error"))
        print(f"{row['name']:>16}: {state}")
    return record


if __name__ == "__main__":
    result = main()
    sys.exit(result if isinstance(result, int) else 0 if result["winner"] else 1)
