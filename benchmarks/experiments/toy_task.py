"""Chapter 16's training run: the reversal task trained for all its updates, and the record the
chapter reads.

    python benchmarks/experiments/toy_task.py --json results/toy-task-cpu.json

The chapter trains only its first 100 updates live; a whole run takes minutes of CPU time. This
script runs the chapter's own cells for the data and the recipe (notebooks/16_toy_task.ipynb, read
by cell id, so the recipe here cannot drift from the page), then `train` for all the updates with
the chapter's validation callback, on the CPU with one thread, as the chapter trains. It writes the
training log, the validation curve, the best checkpoint's weights (parameters in float16, base64 of
`torch.save`), the training time in wall-clock and CPU seconds, the load average of the machine
before and after (other jobs slow a run down), and where it ran. Chapter 16 prints and plots the
record, asserts what it says, and decodes and inspects the stored weights live.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import time
from pathlib import Path

import nbformat
import torch

from transformer_lib.engineering import git_commit, provenance, write_json
from transformer_lib.training import train

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = ROOT / "notebooks" / "16_toy_task.ipynb"
CELLS = ("25c24d02", "0ff8d745")           # the data; the model, recipe and validation callback
UPDATES, LOOP = 1200, {"log_every": 20, "clip_grad_norm": 1.0}    # as the chapter's live cell


def chapter_cells() -> dict[str, str]:
    """The sources of the chapter's data and recipe cells, by id."""
    cells = {c.id: c.source for c in nbformat.read(CHAPTER, 4).cells}
    missing = [cid for cid in CELLS if cid not in cells]
    if missing:
        raise SystemExit(f"{CHAPTER} has no cell {missing}: update CELLS in {__file__}")
    return {cid: cells[cid] for cid in CELLS}


def cells_sha256(cells: dict[str, str]) -> str:
    "One hash of the cells' sources: a record is stale when the chapter's cells no longer match it."
    return hashlib.sha256("\n".join(cells.values()).encode()).hexdigest()


def chapter_namespace(cells: dict[str, str]) -> dict:
    """The names the chapter's data and recipe cells define, executed as the chapter runs them."""
    ns: dict = {"__name__": "toy_task"}
    exec("from transformer_lib.toy import *", ns)     # what the chapter's exported cells define
    for cid, source in cells.items():
        exec(compile(source, f"{CHAPTER.name}#{cid}", "exec"), ns)
    return ns


def encode_weights(model: torch.nn.Module, state: dict) -> str:
    """`state` with the model's parameters in float16 (buffers as they are), as base64 text."""
    params = {name for name, _ in model.named_parameters()}
    small = {k: v.half() if k in params else v for k, v in state.items()}
    buf = io.BytesIO()
    torch.save(small, buf)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--updates", type=int, default=UPDATES)
    p.add_argument("--json", help="write the record to this file")
    args = p.parse_args(argv)
    torch.set_num_threads(1)                                   # as the chapter trains
    load_before = os.getloadavg()[0]
    cells = chapter_cells()
    ns = chapter_namespace(cells)
    wall, cpu = time.perf_counter(), time.process_time()
    history = train(ns["model"], ns["loader"], ns["loss_fn"], ns["optimizer"], ns["schedule"],
                    max_steps=args.updates, device=ns["device"], callback=ns["evaluate"],
                    progress=False, **LOOP)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    best = ns["best"]
    record = {**provenance(ns["device"], 1, git_commit()), "threads": torch.get_num_threads(),
              "chapter": CHAPTER.relative_to(ROOT).as_posix(), "cells": list(CELLS),
              "cells_sha256": cells_sha256(cells),
              "updates": args.updates, **LOOP,
              "parameters": sum(q.numel() for q in ns["model"].parameters()),
              "training_seconds": wall, "cpu_seconds": cpu,
              "load_average_before": load_before, "load_average_after": os.getloadavg()[0],
              "history": history, "validation": ns["validation"],
              "best_step": best["step"], "best_accuracy": best["accuracy"],
              "best_weights": encode_weights(ns["model"], best["state"])}
    print(f"{record['device']}; torch {record['torch']}; commit {record['git_commit']}; "
          f"{args.updates} updates in {wall:.0f} s ({cpu:.0f} s of CPU time); best validation "
          f"exact match {best['accuracy']:.1%} at update {best['step']}")
    if args.json:
        write_json(args.json, record)
    return record


if __name__ == "__main__":
    main()
