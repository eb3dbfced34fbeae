"""Checkpoint averaging after the fact: the validation BLEU of the average of a run's last k
weights, for several k, from a run directory that kept its epoch snapshots.

    python benchmarks/experiments/snapshot_averages.py --run-dir runs/tuning/TRIAL --last 1 2 3 4 \
        --alpha 1.5 --json results/tuning-2x2/TRIAL.averages.json

The weights, in order: every epoch snapshot the run kept (RUN_DIR/snapshots/epoch_*.pt, written
with `--average-last N`), then the run's final weights (RUN_DIR/model.pt); the average of the last
k of them (k = 1: the final weights alone) is scored on the validation split, greedy and with beam
search (`--beam`, `--alpha`), scored as every run is. The test split is not looked at: this is how
a trial's averaging is chosen (the paper averaged its last 5 or 20 checkpoints, section 6.1).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from transformer_lib.data import load_multi30k
from transformer_lib.engineering import git_commit, provenance, write_json
from transformer_lib.optimization import average_checkpoints
from transformer_lib.records import load_run
from transformer_lib.stages import timed_bleu


def weights_in_order(run_dir: Path) -> list[Path]:
    "The run's epoch snapshots, oldest first, then its final weights."
    snaps = sorted((run_dir / "snapshots").glob("epoch_*.pt"))
    return [*snaps, run_dir / "model.pt"]


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run-dir", required=True, help="a training run's directory")
    p.add_argument("--last", type=int, nargs="+", default=[1, 2, 3],
                   help="average the last k weights, for each k given (default 1 2 3)")
    p.add_argument("--beam", type=int, default=4, help="beam size (default 4)")
    p.add_argument("--alpha", type=float, default=1.2, help="length penalty (default 1.2)")
    p.add_argument("--sentences", type=int, default=0, help="first N validation sentences")
    p.add_argument("--json", help="write the record to this file")
    args = p.parse_args(argv)
    run_dir = Path(args.run_dir)
    paths = weights_in_order(run_dir)
    if not (run_dir / "model.pt").is_file():
        p.error(f"--run-dir {run_dir} holds no model.pt: it is not a finished training run")
    if any(k < 1 or k > len(paths) for k in args.last):
        p.error(f"--last takes 1 to {len(paths)} (the run kept {len(paths) - 1} snapshots), "
                f"got {args.last}")
    model, tok, info = load_run(run_dir)
    pairs = load_multi30k("val")[:args.sentences or None]
    device = torch.device("cpu")
    record = {**provenance(device, 1, git_commit()), "translator": info, "split": "val",
              "sentences": len(pairs), "beam_size": args.beam, "alpha": args.alpha,
              "weights": [p.name for p in paths], "rows": []}
    for k in args.last:
        model.load_state_dict(average_checkpoints(paths[-k:]))
        model.eval()
        row = {"last": k, "averaged": [p.name for p in paths[-k:]]}
        for name, beam in (("bleu_greedy", 1), ("bleu_beam", args.beam)):
            row[name] = timed_bleu(model, tok, pairs, beam_size=beam, alpha=args.alpha,
                                   device=device, amp_dtype=None)["bleu"]
        record["rows"].append(row)
        print(f"last {k}: greedy {row['bleu_greedy']:.2f}, beam {args.beam} (alpha "
              f"{args.alpha:g}) {row['bleu_beam']:.2f}", flush=True)
    record["command_line"] = list(sys.argv[1:] if argv is None else argv)
    if args.json:
        write_json(Path(args.json), record, indent=2)
    return record


if __name__ == "__main__":
    main()
