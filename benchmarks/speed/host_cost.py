"""Host cost of one training update: what the training loop adds on top of the model.

At a shape where the arithmetic costs next to nothing (width 16, 3 + 3 layers, batches of 4 x 12
tokens, one thread) an update's time is the host's: Python, the dispatcher, the optimizer's loop
over the parameters, building batches. Three loops train on the same batches, in the same order,
with the same loss (label smoothing), optimiser (the paper's Adam) and schedule, from one seed:

* `fit`: chapter 13's `transformer_lib.training.train`, the loop of the capstone, driven as the
  capstone drives it (a `BatchLoader` that builds each batch from its sentence pairs, `prefetch`,
  a log record every 10 updates, the time budget read after every update), with our model.
* `bare ours`: the smallest loop with our model: forward, loss, backward, optimiser and schedule
  step, over batches built beforehand.
* `bare nn.Transformer`: the same bare loop with `nn.Transformer` of the same shape
  (`transformer_lib.benchmarking.TorchReference`: our embeddings, positions, tied output).

Reported per loop: aten operators per update (every operator call that reaches the dispatcher
below autograd, forward and backward, counted by a `TorchDispatchMode`), how many of them read a
number out of a tensor (`.item()`, `int()`: on a GPU each waits for the queue; Adam's step counts
are CPU tensors and read every update, without waiting), Python calls per update
(Python and C functions, counted by `sys.setprofile`): both exact and independent of the machine's
speed, so tests/test_host_cost.py checks them; and, with `--time`, milliseconds per update (the
median over the updates after the first `WARMUP`, rounds of the three loops interleaved).
Timing needs a quiet machine: it is refused while /work/runs/QUIET or $QUIET_FILE exists (other
runs are being timed there). Operator counts are always allowed.

  python benchmarks/speed/host_cost.py                   # operator counts only (seconds)
  python benchmarks/speed/host_cost.py --time --json results/host-cost-cpu.json
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from transformer_lib.benchmarking import TorchReference
from transformer_lib.engineering import git_commit, prefetch, provenance, write_json
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.optimization import LabelSmoothingLoss
from transformer_lib.recipe import Recipe
from transformer_lib.stages import make_optimizer, make_schedule
from transformer_lib.training import BatchLoader, train

SHAPE = dict(d_model=16, n_heads=2, n_layers=3, d_ff=64, dropout=0.1, attn_dropout=0.0,
             ffn_dropout=0.0, norm_first=True)        # the cpu-30min recipe's kind, tiny
VOCAB, ROWS, LENGTH, PAIRS, PAD = 100, 4, 12, 400, 0  # 400 pairs: 100 batches of 4 x 12 an epoch
WARMUP = 10                                           # updates not counted (first sight, caches)
LOG_EVERY = 10                                        # the capstone's log records
LOOPS = ("fit", "bare ours", "bare nn.Transformer")
RECIPE = Recipe(d_model=SHAPE["d_model"], warmup_steps=100)   # eq. (3)'s schedule, peak 1e-3
QUIET_FILE = os.environ.get("QUIET_FILE", "/work/runs/QUIET")


class OpCounter(TorchDispatchMode):
    "Counts every aten operator call that reaches the dispatcher while it is active."

    def __init__(self):
        super().__init__()
        self.n = self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        self.reads += func is torch.ops.aten._local_scalar_dense.default   # .item(), int(), ...
        return func(*args, **(kwargs or {}))


def sentence_pairs(seed: int = 0) -> list[tuple[list[int], list[int]]]:
    "PAIRS (source, target) id lists of LENGTH positions each: source ... eos; bos ... eos."
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (PAIRS, 2, LENGTH - 1), generator=g).tolist()
    return [(s + [2], [1] + t + [2]) for s, t in ids]


def loader(pairs) -> BatchLoader:
    "The capstone's token-count batches: ROWS x LENGTH positions each (all pairs are LENGTH long)."
    return BatchLoader.by_tokens(pairs, ROWS * LENGTH, bucket=1, pad_id=PAD, seed=0)


def build(kind: str, seed: int = 0):
    "(model, loss, optimiser, schedule) of `kind` ('ours' or 'nn.Transformer'), seeded."
    torch.manual_seed(seed)
    if kind == "ours":
        model = Transformer(TransformerConfig(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB,
                                              pad_id=PAD, share_embeddings=True, tie_output=True,
                                              **SHAPE))
        model.check_inputs = False            # as the capstone: its ids are checked once
    else:
        model = TorchReference(VOCAB, SHAPE["d_model"], SHAPE["n_heads"], SHAPE["n_layers"],
                               SHAPE["d_ff"], SHAPE["dropout"], SHAPE["norm_first"], pad_id=PAD,
                               attn_dropout=SHAPE["attn_dropout"],
                               ffn_dropout=SHAPE["ffn_dropout"])
    loss_fn = LabelSmoothingLoss(VOCAB, 0.1, pad_id=PAD)
    loss_fn.check_inputs = False
    optimizer = make_optimizer(RECIPE, model.parameters())       # the capstone's, for all three
    return model.train(), loss_fn, optimizer, make_schedule(RECIPE, optimizer, lambda n: 0.0)


def run_fit(n: int, after: Callable[[int], None], seed: int = 0) -> list[float]:
    "`fit`: n updates of chapter 13's `train` as the capstone calls it; `after(step)` after each."
    model, loss_fn, optimizer, scheduler = build("ours", seed)
    history = train(model, loader(sentence_pairs(seed)), loss_fn, optimizer, scheduler,
                    max_steps=n, time_budget_s=3600.0, device="cpu", amp=None,
                    log_every=LOG_EVERY, progress=False, prefetch=prefetch, callback=after)
    return [h["loss"] for h in history]


def bare_batches(n: int, seed: int = 0) -> Iterator:
    "The batches `fit` trains on, in its order, built beforehand (epoch after epoch)."
    batches = loader(sentence_pairs(seed))
    epoch_batches = []
    for epoch in range(-(-n // len(batches))):
        batches.set_epoch(epoch)
        epoch_batches += list(batches)
    return iter(epoch_batches[:n])


def run_bare(kind: str, n: int, after: Callable[[int], None], seed: int = 0) -> list[float]:
    "A bare loop: forward, loss, backward, step; the losses of every LOG_EVERY-th window's mean."
    model, loss_fn, optimizer, scheduler = build(kind, seed)
    losses, window = [], []
    for step, b in enumerate(bare_batches(n, seed), 1):
        loss = loss_fn(model(b.src, b.tgt_in), b.tgt_out)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        window.append(loss.detach())
        if step % LOG_EVERY == 0:
            losses.append(float(torch.stack(window).mean()))
            window = []
        after(step)
    return losses


def run(loop: str, n: int, after: Callable[[int], None], seed: int = 0) -> list[float]:
    if loop == "fit":
        return run_fit(n, after, seed)
    return run_bare("ours" if loop == "bare ours" else "nn.Transformer", n, after, seed)


def operators_per_update(loop: str, n: int = 30) -> tuple[float, float]:
    """Mean aten operators per update over updates WARMUP+1 ... n (whole log periods), and how
    many of them read a number out of a tensor (on a GPU, each waits for its queue)."""
    counter, marks = OpCounter(), {}
    with counter:
        run(loop, n, lambda step: marks.__setitem__(step, (counter.n, counter.reads)))
    return tuple((marks[n][k] - marks[WARMUP][k]) / (n - WARMUP) for k in (0, 1))


def python_calls_per_update(loop: str, n: int = 30) -> float:
    """Mean Python function calls (Python and C functions, as `sys.setprofile` sees them) per
    update over updates WARMUP+1 ... n: the interpreter's share of the host's work."""
    calls, marks = [0], {}

    def count(frame, event, arg):
        if event in ("call", "c_call"):
            calls[0] += 1
    sys.setprofile(count)
    try:
        run(loop, n, lambda step: marks.__setitem__(step, calls[0]))
    finally:
        sys.setprofile(None)
    return (marks[n] - marks[WARMUP]) / (n - WARMUP)


def seconds_per_update(loop: str, n: int) -> list[float]:
    "Wall-clock seconds of each update after the first WARMUP."
    stamps = {}
    run(loop, n, lambda step: stamps.__setitem__(step, time.perf_counter()))
    return [stamps[k] - stamps[k - 1] for k in range(WARMUP + 1, n + 1)]


def measure(time_it: bool, rounds: int, updates: int) -> dict:
    torch.set_num_threads(1)
    # nn.Transformer says, once, that pre-LN layers skip its nested-tensor path: known, not news
    warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
    rows = {}
    for loop in LOOPS:
        ops, reads = operators_per_update(loop)
        rows[loop] = {"operators_per_update": ops, "tensor_reads_per_update": reads,
                      "python_calls_per_update": python_calls_per_update(loop)}
    if time_it:
        seconds = {loop: [] for loop in LOOPS}
        for _ in range(rounds):                              # interleaved: drift hits all alike
            for loop in LOOPS:
                seconds[loop] += seconds_per_update(loop, updates)
        for loop in LOOPS:
            rows[loop]["ms_per_update_median"] = 1e3 * statistics.median(seconds[loop])
            rows[loop]["ms_per_update_mean"] = 1e3 * statistics.fmean(seconds[loop])
            rows[loop]["updates_timed"] = len(seconds[loop])
    return rows


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--time", action="store_true",
                   help="also time the updates (refused while the quiet file exists)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds of timing")
    p.add_argument("--updates", type=int, default=110, help="updates per loop per round")
    p.add_argument("--json", help="write the record to this file")
    args = p.parse_args(argv)
    if args.time and Path(QUIET_FILE).exists():
        raise SystemExit(f"{QUIET_FILE} exists: other runs are being timed on this machine; "
                         "operator counts only (drop --time), or wait")
    rows = measure(args.time, args.rounds, args.updates)
    record = {**provenance(torch.device("cpu"), 1, git_commit()),
              "threads": torch.get_num_threads(),
              "shape": {**SHAPE, "vocab": VOCAB, "batch": [ROWS, LENGTH]},
              "warmup_updates": WARMUP, "log_every": LOG_EVERY, "timed": args.time,
              "loops": rows}
    print(f"{record['device']}, {record['cpu']}; torch {record['torch']}; width "
          f"{SHAPE['d_model']}, {SHAPE['n_layers']}+{SHAPE['n_layers']} layers, batches of "
          f"{ROWS} x {LENGTH} tokens")
    print(f"{'loop':22s} {'aten ops/update':>15s} {'of them reads':>13s} "
          f"{'Python calls/update':>19s}" + (f" {'ms/update':>10s}" if args.time else ""))
    for loop, row in rows.items():
        print(f"{loop:22s} {row['operators_per_update']:15.1f} "
              f"{row['tensor_reads_per_update']:13.1f} {row['python_calls_per_update']:19.1f}"
              + (f" {row['ms_per_update_median']:10.2f}" if args.time else ""))
    if args.json:
        write_json(args.json, record)
    return record


if __name__ == "__main__":
    main()
