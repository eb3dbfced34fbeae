"""Training throughput: transformer_lib's Transformer vs torch.nn.Transformer, side by side in one
run.

Both models have the same size (embeddings shared between source, target and output and initialised
alike, sinusoidal positions, post-LN unless --norm-first; with --preset, its three dropout rates:
cpu-30min drops sub-layer outputs only, where an earlier version of this script dropped
attention weights and FFN activations too) and train on the *same* list of Multi30k
batches: joint BPE, token-count batches (`training.BatchLoader.by_tokens`, padded to bucketed shapes
unless the preset says otherwise), so that `torch.compile` sees a handful of shapes and compiles
each once before timing starts. Timed steps run in alternating rounds (A B C D, D C B A, ...), so
drift in the machine's speed hits every model alike.

What runs, each model with its own optimizer (the "runners"):

* GPU: ours and nn.Transformer, both with bf16 autocast and torch.compile (as before).
* CPU: (i) ours as the capstone runs it (the recipe's precision: float32 for cpu-30min; with
  --amp, bfloat16 autocast where `amp_settings(device, cpu_bf16=True)` says the CPU has bf16
  instructions), (ii) nn.Transformer as a user would write it (eager float32); where (i) is
  bfloat16 also (iii) ours in eager float32 and (iv) nn.Transformer under the same bf16
  autocast, so that the precision and the implementation can be told apart. Ratios per round:
  (i)/(ii) "as_run", (iii)/(ii) "same_precision" (eager vs eager) and (i)/(iv) "both_bf16".

Prints target tokens/s for each runner, the ratios with their per-round median, min and max, and
the fraction of the ceiling each reaches: on the CPU a plain 2048^3 matmul in the runner's
precision (`matmul_flops_per_s`, measured in every round of the same run, median); on a GPU the
device's peak dense bf16 throughput (MFU).

  CPU recipe of chapter 18:  python benchmarks/speed/train_throughput.py --preset cpu-30min \
      --device cpu
  --json out.json GPU (compiled, bf16):      python benchmarks/speed/train_throughput.py
  smoke test (seconds):      python benchmarks/speed/train_throughput.py --preset cpu-30min --tiny

Masks: each model as it is normally used. nn.Transformer gets source and target key padding masks
and the causal mask (tgt_is_causal=True, so it neither inspects the mask nor breaks the compiled
graph); ours its defaults, the source padding mask and the causal mask by name (targets are
right-padded, so target padding changes nothing at real positions; chapter 11). As in `train.run`,
the token ids are range-checked once up front and the per-call checks of our model and of the loss
(each a host sync on a GPU) are off.

Nothing here is a timed test; the figures printed are the measurement. FLOPs count the matrix
products of the padded batch shapes (attention over the full L x L, causal or not), times 3 for
forward + backward; filler rows and padding are counted, so the fractions are upper bounds on
useful work.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from transformer_lib.benchmarking import TorchReference, device_name, matmul_flops_per_s
from transformer_lib.data import load_multi30k
from transformer_lib.engineering import amp_settings, autocast, git_commit, provenance
from transformer_lib.multi_head_attention import count_parameters
from transformer_lib.optimization import LabelSmoothingLoss, paper_adam
from transformer_lib.recipe import Recipe, preset
from transformer_lib.stages import build_model
from transformer_lib.text import check_token_ids, encode_pairs, train_joint_tokenizer
from transformer_lib.training import BatchLoader

# Dense bf16 peak (no sparsity) by device name. Add a device with --peak-tflops.
PEAK_TFLOPS = [("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("H200", 989.0),
               ("A100", 312.0)]


def peak_flops(device: torch.device, override: float | None) -> tuple[float | None, str]:
    if override:
        return override * 1e12, f"{override:g} TFLOP/s (--peak-tflops)"
    if device.type != "cuda":
        return None, "n/a on the CPU (the ceiling is the measured matmul below)"
    name = torch.cuda.get_device_name(device)
    for key, tflops in PEAK_TFLOPS:
        if key in name:
            return tflops * 1e12, f"{tflops:g} TFLOP/s dense bf16 ({name})"
    return None, f"unknown for {name!r}: pass --peak-tflops"


def train_flops(B: int, S: int, T: int, d: int, d_ff: int, n_layers: int, vocab: int) -> float:
    """Matrix-product FLOPs of one training step (3 x forward) at padded shapes (B, S) -> (B, T)."""
    enc = 2 * B * S * 3 * d * d + 4 * B * S * S * d + 2 * B * S * d * d + 4 * B * S * d * d_ff
    dec = (2 * B * T * 3 * d * d + 4 * B * T * T * d + 2 * B * T * d * d            # self-attention
           # cross
           + 2 * B * T * d * d + 2 * B * S * 2 * d * d + 4 * B * T * S * d + 2 * B * T * d * d
           + 4 * B * T * d * d_ff)
    return 3.0 * (n_layers * (enc + dec) + 2 * B * T * d * vocab)


def precision(dtype: torch.dtype | None) -> str:
    return "float32" if dtype is None else str(dtype).removeprefix("torch.")


class Runner:
    """One model with its optimizer and autocast dtype: `warm_up` compiles every batch shape once,
    `timed` runs a block of batches and adds to the totals."""

    def __init__(self, name, model, args, device, amp_dtype, vocab):
        self.name, self.device, self.amp_dtype, self.args, self.vocab = (name, device, amp_dtype,
                                                                         args, vocab)
        self.model = model.to(device).train()
        self.step_fn = torch.compile(self.model, dynamic=False) if args.compile else self.model
        self.opt = paper_adam(self.model.parameters(), lr=1e-4)
        self.loss_fn = LabelSmoothingLoss(vocab, 0.1, pad_id=0)
        # The ids were range-checked once (main); as in train.run, skip the per-call checks of the
        # loss and of our model: each is a host sync that drains the GPU's queue before the backward
        # pass.
        self.loss_fn.check_inputs = False
        if hasattr(self.model, "check_inputs"):
            self.model.check_inputs = False
        self.seconds, self.tokens, self.flops, self.steps, self.round_seconds = 0.0, 0, 0.0, 0, []

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
        for b in batches:                       # one batch of every shape: compilation happens here
            # strides too: the compiled graph guards on them (on the CPU a batch can be a strided
            # view)
            shapes.setdefault((b.src.shape, b.src.stride(), b.tgt_in.shape, b.tgt_in.stride()), b)
        t0 = time.perf_counter()
        for b in list(shapes.values()) + batches[:extra]:
            self.step(b)
        self.sync()
        self.warmup_s, self.shapes = time.perf_counter() - t0, len({k[::2] for k in shapes})
        print(f"{self.name}: {self.shapes} shapes compiled/warmed up in {self.warmup_s:.1f} s",
              file=sys.stderr, flush=True)

    def timed(self, batches):
        a = self.args
        self.sync()
        t0 = time.perf_counter()
        for b in batches:
            loss = self.step(b)
        self.sync()
        self.round_seconds.append(time.perf_counter() - t0)
        self.seconds += self.round_seconds[-1]
        self.loss = loss.item()
        self.steps += len(batches)
        self.tokens += sum(b.n_tokens for b in batches)
        self.flops += sum(train_flops(b.src.shape[0], b.src.shape[1], b.tgt_in.shape[1], a.d_model,
                                      a.d_ff, a.n_layers, self.vocab) for b in batches)

    def summary(self, peak, ceilings):
        flops_per_s = self.flops / self.seconds
        ceiling = ceilings.get(precision(self.amp_dtype))
        return {"model": self.name, "precision": precision(self.amp_dtype),
                "compiled": bool(self.args.compile),
                "parameters": count_parameters(self.model), "steps": self.steps,
                "seconds": self.seconds,
                "tokens_per_s": self.tokens / self.seconds, "ms_per_step": 1e3 * self.seconds
                / self.steps,
                "flops_per_s": flops_per_s, "mfu": flops_per_s / peak if peak else None,
                "ceiling_fraction": flops_per_s / ceiling if ceiling else None,
                "round_seconds": self.round_seconds,
                "compile_and_warmup_s": self.warmup_s, "distinct_shapes": self.shapes,
                "final_loss": self.loss}


def parse_args(argv=None) -> argparse.Namespace:
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
    p.add_argument("--train-pairs", type=int, default=0,
                   help="use the first N pairs only (0 = all)")
    p.add_argument("--steps", type=int, default=100, help="timed steps per model")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps after the compile pass")
    p.add_argument("--rounds", type=int, default=5, help="alternating timed blocks per model")
    p.add_argument("--device", default="auto")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile every model (default: on for CUDA)")
    p.add_argument("--amp", action=argparse.BooleanOptionalAction, default=None,
                   help="mixed precision for ours as the capstone uses it (default: the recipe's "
                        "`amp`): bf16 on CUDA (both models), on the CPU bf16 for ours where the "
                        "CPU has bf16 instructions")
    p.add_argument("--peak-tflops", type=float, default=None)
    p.add_argument("--tiny", action="store_true",
                   help="a seconds-long CPU configuration (smoke test)")
    p.add_argument("--preset",
                   help="take size, batches, padding and precision from this recipe preset (e.g. "
                                    "cpu-30min); the other size flags are then ignored")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    args.fixed_shapes = True
    args.attn_dropout = args.ffn_dropout = args.dropout     # one rate for all three unless a preset
    r = preset(args.preset) if args.preset else Recipe()
    if args.preset:                          # the recipe as the capstone runs it
        args.d_model, args.n_heads, args.n_layers, args.d_ff, args.dropout = (r.d_model, r.n_heads,
                                                                              r.n_layers, r.d_ff,
                                                                              r.dropout)
        args.norm_first, args.vocab_size, args.batch_tokens, args.bucket = (r.norm_first,
                                                                            r.vocab_size,
                                                                            r.batch_tokens,
                                                                            r.bucket)
        args.fixed_shapes = r.fixed_shapes
        # the preset's own rates on attention weights and FFN activations (cpu-30min: none)
        args.attn_dropout, args.ffn_dropout = r.attn_dropout, r.ffn_dropout
    if args.amp is None:
        args.amp = r.amp
    if args.tiny:
        args.d_model, args.n_heads, args.n_layers, args.d_ff, args.vocab_size = 64, 4, 2, 128, 1000
        args.batch_tokens, args.train_pairs, args.steps, args.warmup, args.rounds = (1024, 3000, 12,
                                                                                     2, 3)
    return args


def runner_specs(args, device) -> list[tuple[str, str, torch.dtype | None]]:
    """(name, model, autocast dtype) of each runner; the first is ours as the capstone runs it, the
    second nn.Transformer as a user would write it."""
    if device.type == "cuda":                      # as before: both bf16 (and compiled, by default)
        amp = torch.bfloat16 if args.amp else None
        return [("transformer_lib", "ours", amp), ("nn.Transformer", "torch", amp)]
    ours = amp_settings(device, cpu_bf16=True)[0] if args.amp else None     # the capstone's choice
    specs = [("transformer_lib", "ours", ours), ("nn.Transformer", "torch", None)]
    if ours is not None:                                # tell precision and implementation apart
        specs += [("transformer_lib float32", "ours", None),
                  (f"nn.Transformer {precision(ours)}", "torch", ours)]
    return specs


def comparisons(specs) -> dict[str, tuple[str, str]]:
    """Named pairs (numerator, denominator) of runner names; see the module docstring."""
    ours_at = {dt: name for name, kind, dt in specs if kind == "ours"}
    torch_at = {dt: name for name, kind, dt in specs if kind == "torch"}
    (ours_name, _, ours_dt), (ref_name, _, ref_dt) = specs[:2]
    out = {"as_run": (ours_name, ref_name), "same_precision": (ours_at[ref_dt], ref_name)}
    if ours_dt != ref_dt:
        out[f"both_{precision(ours_dt)}"] = (ours_name, torch_at[ours_dt])
    return out


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "rounds": values}


def prepare_batches(args, device):
    train = load_multi30k("train")
    if args.train_pairs:
        train = train[:args.train_pairs]
    tok = train_joint_tokenizer(train, vocab_size=args.vocab_size)
    pairs = encode_pairs(tok, train)
    check_token_ids(pairs, tok.vocab_size)                 # once, so the per-step checks can be off
    loader = BatchLoader.by_tokens(pairs, args.batch_tokens, bucket=args.bucket, pad_id=tok.pad_id,
                                   fixed_shapes=args.fixed_shapes, seed=0)
    return [b.to(device) for b in take_batches(loader, args.warmup + args.steps)], tok.vocab_size


def measure(args, device, specs, batches, vocab):
    """Warm every runner up, then time them in alternating rounds, with the matmul ceiling of each
    precision measured in every round (CPU). Returns the runners and the per-round ceilings."""
    recipe = Recipe(d_model=args.d_model, n_heads=args.n_heads, n_layers=args.n_layers,
                    d_ff=args.d_ff,
                    dropout=args.dropout, attn_dropout=args.attn_dropout,
                    ffn_dropout=args.ffn_dropout,
                    norm_first=args.norm_first, vocab_size=vocab)
    runners = []
    for name, kind, amp_dtype in specs:
        torch.manual_seed(0)
        model = build_model(recipe, vocab) if kind == "ours" else TorchReference(
            vocab, args.d_model, args.n_heads, args.n_layers, args.d_ff, args.dropout,
            args.norm_first, attn_dropout=args.attn_dropout, ffn_dropout=args.ffn_dropout)
        runners.append(Runner(name, model, args, device, amp_dtype, vocab))
        runners[-1].warm_up(batches, args.warmup)
    timed = batches[args.warmup:]
    dtypes = {precision(dt): dt or torch.float32
              for _, _, dt in specs} if device.type == "cpu" else {}
    round_ceilings = {p: [] for p in dtypes}
    for i in range(args.rounds):
        for r in (runners if i % 2 == 0 else runners[::-1]):
            # A B C, C B A, ...: none always goes first
            r.timed(timed[i::args.rounds])
        for p, dt in dtypes.items():                    # the ceiling, as busy as the machine is now
            round_ceilings[p].append(matmul_flops_per_s(device, dtype=dt, rounds=3))
    return runners, round_ceilings


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto"
                          else args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda was requested, but CUDA is not available on this "
                         "machine")
    if args.compile is None:
        args.compile = device.type == "cuda"
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    batches, vocab = prepare_batches(args, device)
    specs = runner_specs(args, device)
    runners, round_ceilings = measure(args, device, specs, batches, vocab)
    peak, peak_text = peak_flops(device, args.peak_tflops)
    ceilings = {p: statistics.median(v) for p, v in round_ceilings.items()}
    results = [r.summary(peak, ceilings) for r in runners]
    by_name = {r.name: r for r in runners}
    ratios = {}
    for key, (a, b) in comparisons(specs).items():
        ra, rb = by_name[a], by_name[b]
        # same batches: time ratio
        ratios[key] = {"numerator": a, "denominator": b, "ratio": rb.seconds / ra.seconds,
                       **spread([sb / sa for sa, sb in zip(ra.round_seconds, rb.round_seconds)])}
    report(args, device, vocab, results, ratios, ceilings, peak_text)
    if args.json:
        as_run = ratios["as_run"]
        record = {**provenance(device, 1, git_commit()), "args": vars(args), "results": results,
                  "ratios": ratios,
                  "ceilings_flops_per_s": ceilings, "round_ceilings_flops_per_s": round_ceilings,
                  # the earlier record's keys: ours as run / nn.Transformer as written, float32
                  # ceiling
                  "ratio": as_run["ratio"], "round_ratios": as_run["rounds"],
                  "ratio_median": as_run["median"],
                  "ratio_min": as_run["min"], "ratio_max": as_run["max"],
                  "ceiling_flops_per_s": ceilings.get("float32")}
        with open(args.json, "w") as f:
            json.dump(record, f, indent=2)


def report(args, device, vocab, results, ratios, ceilings, peak_text):
    print(f"device: {device_name(device)}; torch {torch.__version__}; "
          f"torch.compile: {args.compile}; peak: {peak_text}")
    print(f"size: d_model {args.d_model}, {args.n_layers}+{args.n_layers} layers, d_ff "
          f"{args.d_ff}, vocab {vocab}; batches of <= {args.batch_tokens} padded positions, "
          f"{results[0]['distinct_shapes']} distinct shapes; {results[0]['steps']} timed steps per "
          f"model in {args.rounds} alternating rounds")
    print(f"{'model':24s} {'precision':>9s} {'params':>11s} {'ms/step':>8s} {'tgt tokens/s':>13s} "
          f"{'GFLOP/s':>8s} {'of ceiling':>10s} {'MFU':>6s}")
    for r in results:
        frac = f"{r['ceiling_fraction']:.0%}" if r["ceiling_fraction"] is not None else "n/a"
        mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "n/a"
        print(f"{r['model']:24s} {r['precision']:>9s} {r['parameters']:11,d} "
              f"{r['ms_per_step']:8.1f} {r['tokens_per_s']:13,.0f} {r['flops_per_s'] / 1e9:8.1f} "
              f"{frac:>10s} {mfu:>6s}")
    for key, c in ratios.items():
        print(f"{key:16s} {c['numerator']} / {c['denominator']}: {c['ratio']:.2f}x over all "
              f"rounds; per round median {c['median']:.2f}x, from {c['min']:.2f}x to "
              f"{c['max']:.2f}x")
    if ceilings:
        print("ceiling (2048^3 matmul, median of the rounds of this run): "
              + ", ".join(f"{p} {v / 1e9:.1f} GFLOP/s" for p, v in ceilings.items()))


def take_batches(loader, n):
    "The first n batches of the loader's epochs 0, 1, ... (the same list for every model)."
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
