"""The lookup-table task of chapter 19: does a 4x wider FFN store more facts than twice the depth?

    python benchmarks/experiments/ffn_lookup.py --threads 1 --json results/ffn-lookup-cpu.json
    python benchmarks/experiments/ffn_lookup.py --threads 1 --seeds 0 1 2 3 4 5 6 7 8 9 \
        --kernels default avx2 native --jobs 2 --json results/ffn-lookup-spread-cpu.json

Trains the three designs of chapter 19 (`transformer_lib.inside.DESIGNS`: one layer with
d_ff = d_model, one with d_ff = 4 d_model, two with d_ff = d_model, all at d_model = 32) on the
lookup-table task (`lookup_task`: 12 symbols, a random table of the 144 pairs, 5,000 training and
1,000 disjoint test sequences), each from every seed given, with `train_toy` (Adam, 500 updates of
64 sequences by default), and records the share of test table entries each model writes correctly.
Chapter 19 prints the record, draws its figure from it, and retrains one design from one seed live.

With `--kernels`, each kernel set runs in a process of its own (`ATEN_CPU_CAPABILITY`, read once
when torch starts; `native` leaves PyTorch's own choice), `--jobs` at a time, and the record keeps
every set's scores: the same seed on two kernel sets adds its floating-point sums in another order,
and on this task that alone can move a run by several points, so the spread over seeds and kernel
sets is what a claim about the designs must survive.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from transformer_lib.engineering import git_commit, provenance, write_json
from transformer_lib.inside import DESIGNS, N_SYMBOLS, lookup_task, toy_config, train_toy
from transformer_lib.multi_head_attention import count_parameters


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--steps", type=int, default=500, help="Adam updates per run")
    p.add_argument("--batch-size", type=int, default=64, help="sequences per update")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads (default: torch's own choice)")
    p.add_argument("--kernels", nargs="+", metavar="SET",
                   help="run every seed under each ATEN_CPU_CAPABILITY (default, avx2, avx512, "
                        "native = PyTorch's choice), one process per set")
    p.add_argument("--jobs", type=int, default=1, help="kernel-set processes at a time")
    p.add_argument("--json", help="write the record to this file")
    args = p.parse_args(argv)
    if args.kernels:
        return across_kernels(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    train, test = lookup_task()
    record = {**provenance(torch.device("cpu"), 1, git_commit()),
              "threads": torch.get_num_threads(), "n_symbols": N_SYMBOLS, "table_seed": 0,
              "train_pairs": len(train), "test_pairs": len(test), "steps": args.steps,
              "batch_size": args.batch_size, "seeds": args.seeds, "designs": {}}
    t0 = time.perf_counter()
    for name, (n_layers, d_ff) in DESIGNS.items():
        config = toy_config(n_layers, d_ff)
        scores = [train_toy(config, train, test, seed, steps=args.steps,
                            batch_size=args.batch_size) for seed in args.seeds]
        record["designs"][name] = {"n_layers": n_layers, "d_ff": d_ff,
                                   "parameters": count_parameters(config), "scores": scores}
        print(f"{name:20} {count_parameters(config):7,} parameters   test entries right: "
              + ", ".join(f"{s:.1%}" for s in scores), flush=True)
    record["seconds"] = time.perf_counter() - t0
    print(f"{record['seconds']:.0f} s for {len(DESIGNS) * len(args.seeds)} training runs")
    if args.json:
        write_json(args.json, record)
    return record


def across_kernels(args) -> dict:
    """Every seed under each kernel set, one child process per set; one record with all of them
    ("kernels": {set the child reported: its record}). A set the CPU lacks falls back to PyTorch's
    best (the child's `cpu` field names what ran); two requests that ran one set are refused."""
    tmp = Path(tempfile.mkdtemp(prefix="ffn-lookup-"))

    def child(kernels: str) -> dict:
        env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
        if kernels != "native":
            env["ATEN_CPU_CAPABILITY"] = kernels
        out = tmp / f"{kernels}.json"
        cmd = [sys.executable, __file__, "--steps", str(args.steps), "--batch-size",
               str(args.batch_size), "--threads", str(args.threads or 1), "--json", str(out),
               "--seeds", *map(str, args.seeds)]
        subprocess.run(cmd, env=env, check=True)
        return json.loads(out.read_text())

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        children = list(pool.map(child, args.kernels))
    record = {**provenance(torch.device("cpu"), args.jobs, git_commit()),
              "threads": args.threads or 1, "n_symbols": N_SYMBOLS, "table_seed": 0,
              "train_pairs": children[0]["train_pairs"], "test_pairs": children[0]["test_pairs"],
              "steps": args.steps, "batch_size": args.batch_size, "seeds": args.seeds,
              "requested": args.kernels, "kernels": {}}
    for asked, rec in zip(args.kernels, children):
        ran = rec["cpu"].rsplit("kernels ", 1)[-1]
        if ran in record["kernels"]:
            raise SystemExit(f"--kernels {asked} ran {ran}, which an earlier set already ran")
        record["kernels"][ran] = {k: rec[k] for k in ("cpu", "date", "designs", "seconds")}
    record["seconds"] = time.perf_counter() - t0
    if args.json:
        write_json(args.json, record)
    return record


if __name__ == "__main__":
    main()
