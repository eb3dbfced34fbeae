"""Training throughput: transformer_lib's Transformer vs torch.nn.Transformer, side by side in one run.

Both models have the same size (embeddings shared between source, target and output, sinusoidal
positions, post-LN unless --norm-first) and train on the *same* list of Multi30k batches: joint
BPE, token-count batches padded to bucketed shapes (`training.BatchLoader.by_tokens` with fixed shapes), so
`torch.compile` sees a handful of shapes and compiles each once before timing starts. bf16
autocast on CUDA. Prints target tokens/s for each model, the ratio, and model FLOPs utilisation
(MFU) against the device's peak dense bf16 throughput.

  GPU (what the capstone targets):  python benchmarks/train_throughput.py
  CPU smoke test:                   python benchmarks/train_throughput.py --tiny

Masks: each model as it is normally used. nn.Transformer gets source and target key padding masks
and the causal mask (tgt_is_causal=True, so it neither inspects the mask nor breaks the compiled
graph); ours its defaults, the source padding mask and the causal mask by name (targets are
right-padded, so target padding changes nothing at real positions; chapter 11). As in `train.run`,
the token ids are range-checked once up front and the per-call checks of our model and of the loss
(each a host sync on a GPU) are off.

Nothing here is a timed test; the figures printed are the measurement. MFU counts the matrix
products of the padded batch shapes (attention over the full L x L, causal or not), times 3 for
forward + backward; filler rows and padding are counted, so MFU is an upper bound on useful work.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import torch
from torch import nn

from transformer_lib.benchmarking import device_name, matmul_flops_per_s
from transformer_lib.data import load_multi30k
from transformer_lib.multi_head_attention import count_parameters
from transformer_lib.optimization import LabelSmoothingLoss, paper_adam
from transformer_lib.positional import PositionalEncoding
from transformer_lib.recipe import Recipe
from transformer_lib.text import train_joint_tokenizer
from transformer_lib.train import build_model, check_token_ids, encode_pairs
from transformer_lib.training import BatchLoader, autocast

# Dense bf16 peak (no sparsity) by device name. Add a device with --peak-tflops.
PEAK_TFLOPS = [("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("H200", 989.0), ("A100", 312.0)]


def peak_flops(device: torch.device, override: float | None) -> tuple[float | None, str]:
    if override:
        return override * 1e12, f"{override:g} TFLOP/s (--peak-tflops)"
    if device.type != "cuda":
        return None, "n/a on the CPU (give --peak-tflops to compute MFU)"
    name = torch.cuda.get_device_name(device)
    for key, tflops in PEAK_TFLOPS:
        if key in name:
            return tflops * 1e12, f"{tflops:g} TFLOP/s dense bf16 ({name})"
    return None, f"unknown for {name!r}: pass --peak-tflops"


class TorchReference(nn.Module):
    """nn.Transformer (batch_first) with the same embeddings, positions and tied output as ours."""

    def __init__(self, vocab: int, d_model: int, n_heads: int, n_layers: int, d_ff: int, dropout: float,
                 norm_first: bool, pad_id: int = 0, max_len: int = 256):
        super().__init__()
        self.d_model, self.pad_id = d_model, pad_id
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = PositionalEncoding(d_model, max_len, dropout)
        self.core = nn.Transformer(d_model, n_heads, n_layers, n_layers, d_ff, dropout, batch_first=True,
                                   norm_first=norm_first)
        self.out = nn.Linear(d_model, vocab, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, src, tgt):
        src_pad, tgt_pad = src == self.pad_id, tgt == self.pad_id          # True = padding (PyTorch's convention)
        causal = torch.ones(tgt.shape[1], tgt.shape[1], dtype=torch.bool, device=tgt.device).triu(1)
        h = self.core(self.pos(self.embed(src) * math.sqrt(self.d_model)),
                      self.pos(self.embed(tgt) * math.sqrt(self.d_model)),
                      tgt_mask=causal, src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                      memory_key_padding_mask=src_pad, tgt_is_causal=True)   # no mask inspection, no graph break
        return self.out(h)


def train_flops(B: int, S: int, T: int, d: int, d_ff: int, n_layers: int, vocab: int) -> float:
    """Matrix-product FLOPs of one training step (3 x forward) at padded shapes (B, S) -> (B, T)."""
    enc = 2 * B * S * 3 * d * d + 4 * B * S * S * d + 2 * B * S * d * d + 4 * B * S * d * d_ff
    dec = (2 * B * T * 3 * d * d + 4 * B * T * T * d + 2 * B * T * d * d            # self-attention
           + 2 * B * T * d * d + 2 * B * S * 2 * d * d + 4 * B * T * S * d + 2 * B * T * d * d  # cross
           + 4 * B * T * d * d_ff)
    return 3.0 * (n_layers * (enc + dec) + 2 * B * T * d * vocab)


class Runner:
    """One model with its optimizer: `warm_up` compiles every batch shape once, `timed` runs batches."""

    def __init__(self, name, model, args, device, amp_dtype, vocab):
        self.name, self.device, self.amp_dtype, self.args, self.vocab = name, device, amp_dtype, args, vocab
        self.model = model.to(device).train()
        self.step_fn = torch.compile(self.model, dynamic=False) if args.compile else self.model
        self.opt = paper_adam(self.model.parameters(), lr=1e-4)
        self.loss_fn = LabelSmoothingLoss(vocab, 0.1, pad_id=0)
        # The ids were range-checked once (main); as in train.run, skip the per-call checks of the loss
        # and of our model: each is a host sync that drains the GPU's queue before the backward pass.
        self.loss_fn.check_inputs = False
        if hasattr(self.model, "check_inputs"):
            self.model.check_inputs = False
        self.seconds, self.tokens, self.flops, self.steps = 0.0, 0, 0.0, 0

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def step(self, b):
        with autocast(self.device, self.amp_dtype):
            logits = self.step_fn(b.src, b.tgt_in)
        loss = self.loss_fn(logits.float(), b.tgt_out)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss

    def warm_up(self, batches, extra):
        shapes = {}
        for b in batches:                              # one batch of every shape: compilation happens here
            # strides too: the compiled graph guards on them (on the CPU a batch can be a strided view)
            shapes.setdefault((b.src.shape, b.src.stride(), b.tgt_in.shape, b.tgt_in.stride()), b)
        t0 = time.perf_counter()
        for b in list(shapes.values()) + batches[:extra]:
            self.step(b)
        self.sync()
        self.warmup_s, self.shapes = time.perf_counter() - t0, len({k[::2] for k in shapes})
        print(f"{self.name}: {self.shapes} shapes compiled/warmed up in {self.warmup_s:.1f} s", file=sys.stderr, flush=True)

    def timed(self, batches):
        a = self.args
        self.sync()
        t0 = time.perf_counter()
        for b in batches:
            loss = self.step(b)
        self.sync()
        self.seconds += time.perf_counter() - t0
        self.loss = loss.item()
        self.steps += len(batches)
        self.tokens += sum(b.n_tokens for b in batches)
        self.flops += sum(train_flops(b.src.shape[0], b.src.shape[1], b.tgt_in.shape[1], a.d_model, a.d_ff,
                                      a.n_layers, self.vocab) for b in batches)

    def summary(self, peak):
        return {"model": self.name, "parameters": count_parameters(self.model), "steps": self.steps,
                "seconds": self.seconds, "tokens_per_s": self.tokens / self.seconds,
                "ms_per_step": 1e3 * self.seconds / self.steps, "flops_per_s": self.flops / self.seconds,
                "mfu": self.flops / self.seconds / peak if peak else None,
                "compile_and_warmup_s": self.warmup_s, "distinct_shapes": self.shapes, "final_loss": self.loss}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--n-heads", type=int, default=8)
    p.add_argument("--n-layers", type=int, default=3)
    p.add_argument("--d-ff", type=int, default=2048)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--norm-first", action="store_true")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--batch-tokens", type=int, default=12288)
    p.add_argument("--bucket", type=int, default=8)
    p.add_argument("--train-pairs", type=int, default=0, help="use the first N pairs only (0 = all)")
    p.add_argument("--steps", type=int, default=100, help="timed steps per model")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps after the compile pass")
    p.add_argument("--rounds", type=int, default=5, help="alternating timed blocks per model")
    p.add_argument("--device", default="auto")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile both models (default: on for CUDA)")
    p.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True, help="bf16 autocast on CUDA")
    p.add_argument("--peak-tflops", type=float, default=None)
    p.add_argument("--tiny", action="store_true", help="a seconds-long CPU configuration (smoke test)")
    p.add_argument("--preset", help="take size, batches and padding from this recipe preset (e.g. cpu-30min); "
                                    "the other size flags are then ignored")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    args.fixed_shapes = True
    if args.preset:                          # the recipe as the capstone runs it
        from transformer_lib.recipe import preset
        r = preset(args.preset)
        args.d_model, args.n_heads, args.n_layers, args.d_ff, args.dropout = r.d_model, r.n_heads, r.n_layers, r.d_ff, r.dropout
        args.norm_first, args.vocab_size, args.batch_tokens, args.bucket = r.norm_first, r.vocab_size, r.batch_tokens, r.bucket
        args.fixed_shapes = r.fixed_shapes
    if args.tiny:
        args.d_model, args.n_heads, args.n_layers, args.d_ff, args.vocab_size = 64, 4, 2, 128, 1000
        args.batch_tokens, args.train_pairs, args.steps, args.warmup, args.rounds = 1024, 3000, 12, 2, 3
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda was requested, but CUDA is not available on this machine")
    if args.compile is None:
        args.compile = device.type == "cuda"
    amp_dtype = torch.bfloat16 if args.amp and device.type == "cuda" else None
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True

    train = load_multi30k("train")
    if args.train_pairs:
        train = train[:args.train_pairs]
    tok = train_joint_tokenizer(train, vocab_size=args.vocab_size)
    pairs = encode_pairs(tok, train)
    check_token_ids(pairs, tok.vocab_size)                  # once, so the per-step checks can be off
    loader = BatchLoader.by_tokens(pairs, args.batch_tokens, bucket=args.bucket, pad_id=tok.pad_id,
                                   fixed_shapes=args.fixed_shapes, seed=0)
    batches = [b.to(device) for b in take_batches(loader, args.warmup + args.steps)]
    vocab = tok.vocab_size
    recipe = Recipe(d_model=args.d_model, n_heads=args.n_heads, n_layers=args.n_layers, d_ff=args.d_ff,
                    dropout=args.dropout, attn_dropout=args.dropout, ffn_dropout=args.dropout,
                    norm_first=args.norm_first, vocab_size=vocab)
    peak, peak_text = peak_flops(device, args.peak_tflops)
    runners = []
    for name, make in (("transformer_lib", lambda: build_model(recipe, vocab)),
                       ("nn.Transformer", lambda: TorchReference(vocab, args.d_model, args.n_heads, args.n_layers,
                                                                 args.d_ff, args.dropout, args.norm_first))):
        torch.manual_seed(0)
        runners.append(Runner(name, make(), args, device, amp_dtype, vocab))
        runners[-1].warm_up(batches, args.warmup)
    # Timed steps in alternating blocks, so that drift in the machine's speed hits both models alike.
    timed = batches[args.warmup:]
    blocks = [timed[i::args.rounds] for i in range(args.rounds)]
    round_ratios = []
    for i, block in enumerate(blocks):
        seconds = {}
        for r in (runners if i % 2 == 0 else runners[::-1]):      # A B, B A, ...: neither always goes first
            before = r.seconds
            r.timed(block)
            seconds[r.name] = r.seconds - before
        round_ratios.append(seconds["nn.Transformer"] / seconds["transformer_lib"])
    ceiling = matmul_flops_per_s(device) if device.type == "cpu" else None     # the same run's ceiling
    results = [r.summary(peak) for r in runners]
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device: {dev_name}; torch {torch.__version__}; bf16 autocast: {amp_dtype is not None}; "
          f"torch.compile: {args.compile}; peak: {peak_text}")
    print(f"size: d_model {args.d_model}, {args.n_layers}+{args.n_layers} layers, d_ff {args.d_ff}, vocab {vocab}; "
          f"batches of <= {args.batch_tokens} padded positions, {results[0]['distinct_shapes']} distinct shapes; "
          f"{results[0]['steps']} timed steps per model in {args.rounds} alternating blocks")
    print(f"{'model':16s} {'params':>11s} {'ms/step':>8s} {'tgt tokens/s':>13s} {'MFU':>7s} {'compile+warm-up s':>18s}")
    for r in results:
        mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "n/a"
        print(f"{r['model']:16s} {r['parameters']:11,d} {r['ms_per_step']:8.1f} {r['tokens_per_s']:13,.0f} "
              f"{mfu:>7s} {r['compile_and_warmup_s']:18.1f}")
    ratio = results[0]["tokens_per_s"] / results[1]["tokens_per_s"]
    rs = sorted(round_ratios)
    print(f"throughput ratio transformer_lib / nn.Transformer: {ratio:.2f}x over all rounds; per round median "
          f"{statistics.median(rs):.2f}x, from {rs[0]:.2f}x to {rs[-1]:.2f}x")
    if ceiling:
        print(f"ceiling (float32 2048^3 matmul, same run): {ceiling / 1e9:.1f} GFLOP/s; "
              + ", ".join(f"{r['model']} {r['flops_per_s'] / ceiling:.0%}" for r in results))
    if args.json:
        record = {"device": device_name(device), "torch": torch.__version__, "args": vars(args), "results": results,
                  "ratio": ratio, "round_ratios": round_ratios, "ratio_median": statistics.median(rs),
                  "ratio_min": rs[0], "ratio_max": rs[-1], "ceiling_flops_per_s": ceiling}
        with open(args.json, "w") as f:
            json.dump(record, f, indent=2)


def take_batches(loader, n):
    "The first n batches of the loader's epochs 0, 1, ... (the same list for both models)."
    out = []
    epoch = 0
    while len(out) < n:
        loader.set_epoch(epoch)
        for b in loader:
            out.append(b)
            if len(out) == n:
                break
        epoch += 1
    return out


if __name__ == "__main__":
    main()
