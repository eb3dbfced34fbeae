"""Every live check against a record, measured under several CPU kernel sets and thread counts.

    python benchmarks/experiments/kernel_audit.py --json results/kernel-audit-cpu.json

A chapter that re-runs training or decoding and compares the result with a committed record holds
only as far as rounding lets it: another CPU, or the same CPU told to use other kernels
(`ATEN_CPU_CAPABILITY`: default, avx2, avx512), adds floating-point numbers in another order. This
script measures, in one child process per kernel set (the variable is read once, when torch
starts) and thread count, what each check compares:

* chapter 16: the first 100 updates of the toy task against `results/toy-task-cpu.json`'s log
  (largest relative difference of a logged loss; the chapter trains on one thread);
* chapter 18: the first 100 test sentences translated by the shipped translator, greedy and beam,
  against `results/multi30k-cpu-30min.samples.json` (how many are word for word the same);
* chapter 19: greedy BLEU of 300 validation sentences with every head and without the heads that
  cost the most and the least, against `results/heads-off-val.json` (on the record's thread count);
* tests/test_toy.py: exact match of the small reversal pipeline, seeds 0-4 (its bar: 0.8 at seed 0);
* tests/test_trajectories.py: whether the seeded loss trajectories match their fixture (pass/fail).

Chapter 19's lookup study has its own spread record (`benchmarks/experiments/ffn_lookup.py
--kernels`). The record keeps every measurement; the checks' tolerances are set from it and cite it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ("toy16", "translations18", "heads19", "reverse_test", "trajectories")
THREAD_FREE = {"toy16", "heads19", "trajectories"}       # the check sets its own thread count


def toy16() -> dict:
    """Chapter 16's live cell: 100 updates on one thread, each logged loss against the record."""
    from toy_task import LOOP, chapter_cells, chapter_namespace

    from transformer_lib.data import records_dir
    from transformer_lib.training import train
    record = json.loads((records_dir() / "toy-task-cpu.json").read_text())
    torch.set_num_threads(1)
    ns = chapter_namespace(chapter_cells())
    live = train(ns["model"], ns["loader"], ns["loss_fn"], ns["optimizer"], ns["schedule"],
                 max_steps=100, device=ns["device"], callback=ns["evaluate"], progress=False,
                 **LOOP)
    rel = [abs(m["loss"] / r["loss"] - 1) for m, r in zip(live, record["history"])]
    return {"updates": live[-1]["step"], "max_relative_loss_difference": max(rel)}


def translations18() -> dict:
    """Chapter 18's live cell: the first 100 test sentences, greedy and beam, against the record."""
    from transformer_lib.data import load_multi30k, load_translator, records_dir
    from transformer_lib.stages import translate
    model, tok, _ = load_translator()
    sample = json.loads((records_dir() / "multi30k-cpu-30min.samples.json").read_text())
    sources = [de for de, _ in load_multi30k("test_2016_flickr")[:100]]
    now = {"greedy": translate(model, tok, sources),
           "beam": translate(model, tok, sources, beam_size=sample["beam_size"],
                             alpha=sample["length_penalty"])}
    return {f"same_{k}": sum(a == b for a, b in zip(now[k], sample[k][:100])) for k in now}


def heads19() -> dict:
    """Chapter 19's live cell: BLEU with every head, and lost without the dearest and cheapest."""
    from transformer_lib.data import load_multi30k, load_translator, records_dir
    from transformer_lib.inside import attention_modules, bleu_without
    record = json.loads((records_dir() / "heads-off-val.json").read_text())
    torch.set_num_threads(record["threads"])
    model, tok, _ = load_translator()
    modules = attention_modules(model)
    val = load_multi30k("val")[:record["sentences"]]
    sentences, refs = [de for de, _ in val], [en for _, en in val]
    drop = record["per_head"]
    heads = [(name, i) for name in modules for i in range(len(drop[name]))]
    worst = max(heads, key=lambda m: drop[m[0]][m[1]])
    least = min(heads, key=lambda m: drop[m[0]][m[1]])
    now = bleu_without(model, tok, sentences, refs).score
    out = {"bleu_difference": now - record["bleu"]}
    for label, (name, i) in (("worst", worst), ("least", least)):
        lost = now - bleu_without(model, tok, sentences, refs, [(modules[name], i)]).score
        out[f"lost_{label}_difference"] = lost - drop[name][i]
    return out


def reverse_test(seeds=range(5)) -> dict:
    """tests/test_toy.py's pipeline (400 updates of a 2+2-layer model of width 32) per seed."""
    from transformer_lib.decoding import greedy_decode
    from transformer_lib.model import Transformer, TransformerConfig
    from transformer_lib.optimization import LabelSmoothingLoss, WarmupSchedule, paper_adam
    from transformer_lib.toy import BOS, EOS, PAD, exact_match, make_toy_pairs, toy_vocab_size
    from transformer_lib.training import BatchLoader, TokenBatchSampler, pad_sequences, train
    scores = []
    for seed in seeds:
        torch.manual_seed(seed)
        test = make_toy_pairs("reverse", 100, n_symbols=5, min_len=3, max_len=5, seed=1,
                              unique=True)
        pairs = make_toy_pairs("reverse", 4000, n_symbols=5, min_len=1, max_len=5, seed=0,
                               exclude={tuple(s[:-1]) for s, _ in test})
        V = toy_vocab_size(5)
        model = Transformer(TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=32,
                                              n_heads=2, n_layers=2, d_ff=64, dropout=0.0,
                                              max_len=8, pad_id=PAD))
        optimizer = paper_adam(model.parameters(), lr=0.08)
        loader = BatchLoader(pairs, TokenBatchSampler([len(t) for _, t in pairs], max_tokens=500,
                                                      seed=seed), PAD)
        train(model, loader, LabelSmoothingLoss(V, smoothing=0.0, pad_id=PAD), optimizer,
              WarmupSchedule(optimizer, d_model=32, warmup_steps=50), max_steps=400,
              clip_grad_norm=1.0, device="cpu", progress=False)
        pred = greedy_decode(model, pad_sequences([s for s, _ in test], PAD), 7, BOS, EOS)
        scores.append(exact_match(pred, [t for _, t in test]))
    return {"seeds": list(seeds), "exact_match": scores}


def trajectories() -> dict:
    """tests/test_trajectories.py as it is: does every seeded trajectory match its fixture?"""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(ROOT / "tests" / "test_trajectories.py")], capture_output=True,
                          text=True, cwd=ROOT)
    return {"passed": done.returncode == 0, "summary": done.stdout.strip().splitlines()[-1]}


def child(checks: list[str], threads: int) -> dict:
    from transformer_lib.benchmarking import cpu_model
    torch.set_num_threads(threads)
    out = {"cpu": cpu_model(), "threads": threads}
    for name in checks:
        t0 = time.perf_counter()
        out[name] = globals()[name]()
        torch.set_num_threads(threads)                      # a check may have set its own
        print(f"  {out['cpu']}, {threads} thread(s): {name} {out[name]} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kernels", nargs="+", default=["default", "avx2", "native"],
                   help="ATEN_CPU_CAPABILITY values (native = PyTorch's own choice)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--checks", nargs="+", default=list(CHECKS), choices=CHECKS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", help="write the record to this file")
    args = p.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(args.checks, args.threads[0])))
        return {}
    from transformer_lib.engineering import git_commit, provenance, write_json
    runs = []
    for kernels in args.kernels:
        env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
        if kernels != "native":
            env["ATEN_CPU_CAPABILITY"] = kernels
        for n, threads in enumerate(args.threads):
            checks = [c for c in args.checks if n == 0 or c not in THREAD_FREE]
            if not checks:
                continue
            done = subprocess.run([sys.executable, __file__, "--child", "--threads", str(threads),
                                   "--checks", *checks], env=env, capture_output=True, text=True,
                                  cwd=tempfile.gettempdir())
            sys.stdout.write(done.stdout.replace("RESULT ", "  result: ", 1)[:4000])
            if done.returncode:
                raise SystemExit(f"{kernels}, {threads} threads failed:\n{done.stderr[-3000:]}")
            line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
            runs.append({"requested": kernels, **json.loads(line[len("RESULT "):])})
    record = {**provenance(torch.device("cpu"), 1, git_commit()), "runs": runs}
    if args.json:
        write_json(args.json, record)
    return record


if __name__ == "__main__":
    main()
