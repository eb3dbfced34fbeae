"""Matrix-product FLOPs of one update of chapter 20's two models, on the recipe's own batches.

The Transformer of the recipe (`--preset`, default cpu-30min, changed by any flag of `python -m
transformer_lib.train`) and the GRU translator at each `--rnn-hidden` width (d_attn = d_hidden),
each counted by `transformer_lib.equal_time.update_flops` on the same first `--batches` batches of
epoch 0: the forward pass with the loss, and the backward pass (not the optimiser's elementwise
step). Nothing is trained: the count depends on the shapes of the batches, not on the weights.

  python benchmarks/experiments/update_flops.py --rnn-hidden 344 448 \
      --json results/rematch/update-flops.json
  smoke test:  python benchmarks/experiments/update_flops.py --preset cpu-tiny --train-pairs 300 \
      --vocab-size 450 --rnn-hidden 16 --batches 2
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile

from transformer_lib.engineering import provenance, write_json
from transformer_lib.equal_time import install, update_flops
from transformer_lib.recipe import parse_args as recipe_args
from transformer_lib.stages import prepare


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                epilog="Every other flag is a recipe flag of python -m "
                                       "transformer_lib.train.")
    p.add_argument("--rnn-hidden", type=int, nargs="+", default=[344, 448],
                   help="GRU widths d_hidden = d_attn to count (default 344 448)")
    p.add_argument("--batches", type=int, default=20, help="batches to count (default 20)")
    p.add_argument("--json", help="also write the record to this file")
    args, rest = p.parse_known_args(argv)
    has_preset = any(a == "--preset" or a.startswith("--preset=") for a in rest)
    recipe, _ = recipe_args(rest if has_preset else ["--preset", "cpu-30min", *rest])
    models = {}
    with tempfile.TemporaryDirectory() as out_dir:             # the tokenizer file; not kept
        s = prepare(dataclasses.replace(recipe, out_dir=out_dir, progress=False))
        kinds = [("transformer", "transformer", {})] + [
            (f"gru-{w}", "gru", {"d_hidden": w, "d_attn": w}) for w in args.rnn_hidden]
        for name, kind, sizes in kinds:
            install(s, kind, s.amp_dtype, {"sizes": sizes, "peak_lr": recipe.peak_lr, "clip": 0.0})
            models[name] = {"parameters": s.n_params, **update_flops(s, args.batches)}
            m = models[name]
            print(f"{name:12s} {m['parameters']:>10,d} parameters: {m['per_update'] / 1e9:7.2f} "
                  f"GFLOP per update ({m['forward_per_update'] / 1e9:.2f} forward), "
                  f"{m['per_target_token'] / 1e6:6.2f} MFLOP per target token")
    record = {**provenance(s.device, 1, s.commit), "recipe": dataclasses.asdict(recipe),
              "what": "matrix-product FLOPs of one update (forward with the loss, and backward), "
                      "torch.utils.flop_counter, the same first batches of epoch 0 for each model",
              "models": models, "command_line": list(sys.argv[1:] if argv is None else argv)}
    if args.json:
        write_json(args.json, record)
    return record


if __name__ == "__main__":
    main()
