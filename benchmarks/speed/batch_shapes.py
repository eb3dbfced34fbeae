"""Batch shapes of the GPU presets on Multi30k, and what each costs a compiled model.

Every new (batch, source, target) shape costs a GPU a first-sight delay and a compiled model
(`torch.compile(dynamic=False)`, as `prepare` compiles) a recompile. For each GPU preset (`gpu`,
`gpu-30s`) this script builds the recipe's batches exactly as a run does (its tokenizer, its
`batch_tokens`, its `bucket` and `fixed_shapes`, its seed) and counts, per epoch and over
`--epochs` epochs, the distinct shapes and the share of target positions that hold real tokens
(the rest is padding and filler rows). It then asks what fewer shapes would cost: for k = 1 ... n
shapes, the k lengths (multiples of the recipe's bucket) that waste the fewest padded positions,
batched by the same loader, with their real-token share.

Recompiles are measured on the CPU: a tiny model (width 16, one layer each side, ids folded into
64) compiled as `prepare` compiles it, with a backend that only counts the graphs dynamo hands it
(tracing is what a recompile repeats; code generation adds time, not compiles), trains on one
epoch of the `gpu` preset's batches; dynamo's own counters are recorded too.

  python benchmarks/speed/batch_shapes.py --json results/batch-shapes-gpu-presets.json
"""
from __future__ import annotations

import argparse
import collections
import sys

import torch

from transformer_lib.data import load_multi30k
from transformer_lib.engineering import git_commit, provenance, write_json
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.optimization import LabelSmoothingLoss
from transformer_lib.recipe import preset
from transformer_lib.text import encode_pairs, train_joint_tokenizer
from transformer_lib.training import BatchLoader, TokenBatchSampler, round_up

PRESETS = ("gpu", "gpu-30s")
FOLD = 64                     # the tiny model's vocabulary: ids modulo FOLD (shapes unchanged)


def epoch_shapes(loader: BatchLoader, epoch: int) -> tuple[collections.Counter, int, int, int]:
    "(batches per shape, real target tokens, target positions, real source tokens) of an epoch."
    loader.set_epoch(epoch)
    shapes, real, positions, src_real = collections.Counter(), 0, 0, 0
    for b in loader:
        shapes[(*b.src.shape, b.tgt_in.shape[1])] += 1       # (batch, source, target)
        real, positions = real + b.n_tokens, positions + b.tgt_out.numel()
        src_real += b.n_src_tokens
    return shapes, real, positions, src_real


def best_lengths(lengths: list[int], k: int, step: int) -> list[int]:
    """At most k padded lengths (multiples of `step`, the longest included) that minimise the
    padded positions of `lengths`, each padded up to the next chosen length (dynamic programming
    over the multiples of `step`)."""
    marks = list(range(step, round_up(max(lengths), step) + 1, step))
    raw = collections.Counter(lengths)

    def waste(prev: int, j: int) -> int:        # lengths above marks[prev], up to marks[j]
        low = marks[prev] if prev >= 0 else 0
        return sum((marks[j] - n) * c for n, c in raw.items() if low < n <= marks[j])
    best = {(1, j): (waste(-1, j), [j]) for j in range(len(marks))}    # (used, last) -> plan
    for used in range(2, min(k, len(marks)) + 1):
        for j in range(len(marks)):
            options = [(best[(used - 1, i)][0] + waste(i, j), best[(used - 1, i)][1] + [j])
                       for i in range(j) if (used - 1, i) in best]
            if options:
                best[(used, j)] = min(options)
    last = len(marks) - 1
    plans = [best[(u, last)] for u in range(1, k + 1) if (u, last) in best]
    return [marks[j] for j in min(plans)[1]]


def with_lengths(ids, recipe, pad_id: int, lengths: list[int]) -> BatchLoader:
    "The recipe's fixed-shape loader with each pair's length padded up to the next of `lengths`."
    mapped = [next(L for L in lengths if L >= round_up(max(len(s), len(t) - 1), recipe.bucket))
              for s, t in ids]
    sampler = TokenBatchSampler(mapped, recipe.batch_tokens, True, recipe.seed)
    return BatchLoader(ids, sampler, pad_id, bucket=recipe.bucket, fixed_shapes=True)


class CountingBackend:
    "A torch.compile backend that counts the graphs it is given and runs them as they are."

    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


def recompiles(loader: BatchLoader, epoch: int = 0) -> dict:
    """Compile a tiny model as `prepare` does (dynamic=False) and train it on one epoch of
    `loader`'s batches (ids folded into FOLD): graphs compiled, and dynamo's counters."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(src_vocab_size=FOLD, tgt_vocab_size=FOLD, d_model=16,
                                          n_heads=2, n_layers=1, d_ff=32, max_len=256,
                                          share_embeddings=True, tie_output=True))
    model.check_inputs = False
    backend = CountingBackend()
    compiled = torch.compile(model, dynamic=False, backend=backend)
    loss_fn = LabelSmoothingLoss(FOLD, 0.1, pad_id=0)
    loss_fn.check_inputs = False
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader.set_epoch(epoch)
    seen, first_sight = set(), []
    for step, b in enumerate(loader, 1):
        shape = (*b.src.shape, b.tgt_in.shape[1])
        if shape not in seen:
            seen.add(shape)
            first_sight.append(step)
        logits = compiled(b.src % FOLD, b.tgt_in % FOLD)
        loss_fn(logits, b.tgt_out % FOLD).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    counters = torch._dynamo.utils.counters
    return {"batches": len(loader), "distinct_shapes": len(seen),
            "updates_where_a_shape_is_first_seen": first_sight,
            "graphs_compiled": backend.graphs,
            "dynamo_frames": dict(counters["frames"]),
            "dynamo_unique_graphs": counters["stats"].get("unique_graphs", 0),
            "recompile_limit": torch._dynamo.config.recompile_limit}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=3, help="epochs whose shapes are counted")
    p.add_argument("--json", help="write the record to this file")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    text = load_multi30k("train")
    record = {**provenance(torch.device("cpu"), 1, git_commit()),
              "task": "Multi30k task 1 training split, the GPU presets' batches",
              "epochs_counted": args.epochs, "presets": {}}
    tokenizers = {}
    for name in PRESETS:
        r = preset(name)
        if r.vocab_size not in tokenizers:
            tok = train_joint_tokenizer(text, vocab_size=r.vocab_size)
            tokenizers[r.vocab_size] = (tok, encode_pairs(tok, text))
        tok, ids = tokenizers[r.vocab_size]
        loader = BatchLoader.by_tokens(ids, r.batch_tokens, bucket=r.bucket, pad_id=tok.pad_id,
                                       fixed_shapes=r.fixed_shapes, seed=r.seed)
        epochs, union = [], collections.Counter()
        for e in range(args.epochs):
            shapes, real, positions, src_real = epoch_shapes(loader, e)
            union.update(shapes)
            epochs.append({"epoch": e, "batches": sum(shapes.values()),
                           "distinct_shapes": len(shapes),
                           "real_target_share": real / positions})
        lengths = [max(len(s), len(t) - 1) for s, t in ids]
        fewer = []
        for k in range(1, len({round_up(n, r.bucket) for n in lengths}) + 1):
            chosen = best_lengths(lengths, k, r.bucket)
            shapes, real, positions, _ = epoch_shapes(with_lengths(ids, r, tok.pad_id, chosen), 0)
            fewer.append({"at_most": k, "lengths": chosen, "distinct_shapes": len(shapes),
                          "batches": sum(shapes.values()), "real_target_share": real / positions})
        record["presets"][name] = {
            "recipe": {k: getattr(r, k) for k in ("vocab_size", "batch_tokens", "bucket",
                                                  "fixed_shapes", "seed")},
            "per_epoch": epochs,
            "distinct_shapes_all_epochs": len(union),
            "shapes": [{"batch": b, "source": s, "target": t, "batches_in_all_epochs": c}
                       for (b, s, t), c in sorted(union.items(), key=lambda x: x[0][1])],
            "fewer_shapes": fewer,
        }
    gpu = preset("gpu")
    tok, ids = tokenizers[gpu.vocab_size]
    record["recompiles_cpu_tiny_model"] = recompiles(
        BatchLoader.by_tokens(ids, gpu.batch_tokens, bucket=gpu.bucket, pad_id=tok.pad_id,
                              fixed_shapes=gpu.fixed_shapes, seed=gpu.seed))
    for name, rec in record["presets"].items():
        print(f"{name}: {rec['per_epoch'][0]['batches']} batches an epoch, "
              f"{rec['distinct_shapes_all_epochs']} distinct shapes in {args.epochs} epochs "
              f"({', '.join(str(e['distinct_shapes']) for e in rec['per_epoch'])} per epoch), "
              f"{rec['per_epoch'][0]['real_target_share']:.1%} of target positions real")
        for f in rec["fewer_shapes"]:
            print(f"  at most {f['at_most']} length(s) {f['lengths']}: {f['distinct_shapes']} "
                  f"shapes, {f['real_target_share']:.2%} real, {f['batches']} batches")
    rc = record["recompiles_cpu_tiny_model"]
    print(f"compiled tiny model, one epoch of the gpu preset: {rc['graphs_compiled']} graphs "
          f"compiled for {rc['distinct_shapes']} shapes (first seen at updates "
          f"{rc['updates_where_a_shape_is_first_seen']}); dynamo frames {rc['dynamo_frames']}")
    if args.json:
        write_json(args.json, record)
    return record


if __name__ == "__main__":
    sys.exit(main() and 0)
