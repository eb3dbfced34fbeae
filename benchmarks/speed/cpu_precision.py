"""Float32 against bfloat16 autocast on a CPU, in the real run's training step, side by side: why
a throughput benchmark's bfloat16 speed-up need not show in two thirty-minute runs.

    python benchmarks/speed/cpu_precision.py --preset cpu-30min --steps 600 --json out.json

Two fresh models of the preset (the same seed), one trained in float32 and one under bfloat16
autocast, each with the preset's optimiser and loss, step through the same batches in the real
run's order (`training.train_step`, the update `train` makes; the batches of epoch 0 as the run's
loader builds them, so shapes arrive as the run meets them, none warmed up). They take turns in
blocks of `--block` batches, A B B A A B ..., so that a drift in the machine's speed, which on a
shared two-core machine reaches ±15% within a run, falls on both alike. It also counts the distinct
batch shapes (B, S, T) the run's loader makes over `--epochs` epochs. Reports target tokens/s of
each, the per-block ratio (median, min, max), and the median step of a shape met for the first
time against one met before. Nothing here is a timed test; the figures printed are the measurement.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from transformer_lib.data import load_multi30k
from transformer_lib.engineering import cpu_has_native_bf16, git_commit, provenance, write_json
from transformer_lib.optimization import LabelSmoothingLoss
from transformer_lib.recipe import preset
from transformer_lib.stages import build_model, make_optimizer
from transformer_lib.text import check_token_ids, encode_pairs, train_joint_tokenizer
from transformer_lib.training import BatchLoader, train_step


def real_loader(r, train_pairs: int = 0):
    "The training loader the real run builds (train.run's data stage), and the tokenizer."
    train = load_multi30k("train")[:train_pairs or None]
    tok = train_joint_tokenizer(train, vocab_size=r.vocab_size)
    pairs = encode_pairs(tok, train)
    check_token_ids(pairs, tok.vocab_size)                 # once: the per-step checks are off
    loader = BatchLoader.by_tokens(pairs, r.batch_tokens, bucket=r.bucket, pad_id=tok.pad_id,
                                   fixed_shapes=r.fixed_shapes, seed=r.seed)
    return loader, tok


def count_shapes(loader, epochs: int) -> list[int]:
    "Distinct (B, S, T) batch shapes met by the end of each epoch (cumulative)."
    seen, counts = set(), []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        seen.update((*b.src.shape, b.tgt_in.shape[1]) for b in loader)
        counts.append(len(seen))
    return counts


class Runner:
    "One model in one precision, with the preset's optimiser and loss, and its step times."

    def __init__(self, r, vocab: int, pad_id: int, amp_dtype):
        torch.manual_seed(r.seed)
        self.model = build_model(r, vocab, pad_id=pad_id).train()
        self.loss_fn = LabelSmoothingLoss(vocab, r.label_smoothing, pad_id=pad_id)
        self.model.check_inputs = self.loss_fn.check_inputs = False     # as train.run
        self.optimizer = make_optimizer(r, self.model.parameters())
        self.amp_dtype, self.seen, self.steps = amp_dtype, set(), []

    def block(self, batches) -> float:
        t_block = time.perf_counter()
        for b in batches:
            shape = (*b.src.shape, b.tgt_in.shape[1])
            t0 = time.perf_counter()
            train_step(self.model, b, self.loss_fn, self.optimizer, amp_dtype=self.amp_dtype)
            self.steps.append((time.perf_counter() - t0, b.n_tokens, shape not in self.seen))
            self.seen.add(shape)
        return time.perf_counter() - t_block

    def summary(self) -> dict:
        seconds = sum(s for s, _, _ in self.steps)
        new = [s for s, _, first in self.steps if first]
        old = [s for s, _, first in self.steps if not first]
        return {"steps": len(self.steps), "seconds": seconds,
                "target_tokens_per_s": sum(n for _, n, _ in self.steps) / seconds,
                "first_seen_shapes": len(new),
                "median_ms_first_seen_shape": 1e3 * statistics.median(new) if new else None,
                "median_ms_seen_shape": 1e3 * statistics.median(old) if old else None}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="cpu-30min")
    p.add_argument("--steps", type=int, default=600, help="batches each model trains on")
    p.add_argument("--block", type=int, default=25, help="batches per turn")
    p.add_argument("--epochs", type=int, default=11, help="epochs whose batch shapes are counted")
    p.add_argument("--train-pairs", type=int, default=0, help="first N pairs only (0 = all)")
    p.add_argument("--tiny", action="store_true", help="seconds: 2,000 pairs, 16 steps, 1 epoch")
    p.add_argument("--json", help="write the record to this file")
    args = p.parse_args(argv)
    if args.tiny:
        args.train_pairs, args.steps, args.block, args.epochs = 2000, 16, 4, 1
    if not cpu_has_native_bf16():
        p.error("this CPU has no bfloat16 instructions: the preset trains in float32 here anyway")
    r = preset(args.preset)
    loader, tok = real_loader(r, args.train_pairs)
    shapes = count_shapes(loader, args.epochs)
    batches = []
    for epoch in range(10**6):                     # epochs 0, 1, ... until there are enough
        loader.set_epoch(epoch)
        batches += list(loader)[:args.steps - len(batches)]
        if len(batches) == args.steps:
            break
    runners = {"float32": Runner(r, tok.vocab_size, tok.pad_id, None),
               "bfloat16": Runner(r, tok.vocab_size, tok.pad_id, torch.bfloat16)}
    order, ratios = list(runners), []
    for i in range(0, args.steps, args.block):
        part, seconds = batches[i:i + args.block], {}
        for name in (order if (i // args.block) % 2 == 0 else order[::-1]):   # A B, B A, ...
            seconds[name] = runners[name].block(part)
        ratios.append(seconds["float32"] / seconds["bfloat16"])           # bf16's speed-up
    rows = {name: run.summary() for name, run in runners.items()}
    speedup = rows["bfloat16"]["target_tokens_per_s"] / rows["float32"]["target_tokens_per_s"]
    record = {**provenance(torch.device("cpu"), 1, git_commit()), "preset": args.preset,
              "threads": torch.get_num_threads(), "batches_per_epoch": len(loader),
              "distinct_shapes_by_epoch": shapes, "steps": args.steps, "block": args.block,
              "rows": rows, "bf16_speedup": speedup,
              "bf16_speedup_per_block": {"median": statistics.median(ratios), "min": min(ratios),
                                         "max": max(ratios)},
              "command_line": sys.argv[1:] if argv is None else list(argv)}
    print(f"{record['cpu']}, {record['threads']} threads; {len(loader)} batches per epoch; "
          f"distinct batch shapes after each of {args.epochs} epochs: {shapes}")
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"
    for name, s in rows.items():
        print(f"{name:9s} {s['target_tokens_per_s']:,.0f} target tokens/s over {s['steps']} "
              f"steps; median step {ms(s['median_ms_seen_shape'])} ms at a shape seen before, "
              f"{ms(s['median_ms_first_seen_shape'])} ms at its first sight "
              f"({s['first_seen_shapes']} shapes)")
    b = record["bf16_speedup_per_block"]
    print(f"bfloat16 / float32: {speedup:.2f} (per block: median {b['median']:.2f}, "
          f"{b['min']:.2f} to {b['max']:.2f})")
    if args.json:
        write_json(args.json, record)
    return record


if __name__ == "__main__":
    main()
