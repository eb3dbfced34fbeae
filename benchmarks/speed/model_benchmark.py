"""Training-step throughput of transformer_lib.Transformer versus torch.nn.Transformer, side by
side.

One training step = forward + cross-entropy loss + backward + Adam step, on the same batch (padded
source and target), at the same sizes, with dropout in the same places (our
`attn_dropout` and `ffn_dropout` are set to `dropout`, because nn.Transformer always drops there).
The reference wraps nn.Transformer with the same embedding (shared, tied to the output layer,
scaled by sqrt(d_model)) and the same sinusoidal positions, so both models do the same work.
Ours runs with `check_inputs = False` (no per-call token-id range check, as in `train.run`).
Masks: each model as it is normally used. nn.Transformer gets the source and target key padding
masks and the causal mask (with tgt_is_causal=True); ours its defaults, the source padding mask and
the causal mask by name (the targets are right-padded, so target padding changes nothing at real
positions; chapter 11), which lets SDPA use FlashAttention in the decoder's self-attention.

The two models are timed in alternating rounds (ours, theirs, ours, ...) so that background load
hits both alike; the table reports the median over rounds of tokens per second, counting source and
target tokens (padding included) of the batch.

    python benchmarks/speed/model_benchmark.py                # CPU, float32, small model
    python benchmarks/speed/model_benchmark.py --device cuda  # GPU: base model, bf16 autocast,
                                                              # eager and torch.compile

Nothing here is a unit test; the numbers depend on the machine and are printed with its name.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lib.benchmarking import TorchReference
from transformer_lib.engineering import amp_settings, autocast
from transformer_lib.model import Transformer, TransformerConfig

SIZES = {  # name: (d_model, n_heads, n_layers, d_ff)
    "small": (256, 4, 3, 1024),
    "base": (512, 8, 6, 2048),
    "big": (1024, 16, 6, 4096),
}
PAD = 0


class Ours(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.model = Transformer(cfg)
        # The batch's ids are made in range here, so skip the per-call id range check, as train.run
        # does after checking its data once: on a GPU the check is a host sync that stalls the eager
        # queue.
        self.model.check_inputs = False

    def forward(self, src, tgt):
        return self.model(src, tgt)         # default masks: source padding, causal target (by name)


def make_batch(batch, src_len, tgt_len, vocab, device, seed=0):
    g = torch.Generator().manual_seed(seed)

    def tokens(length):
        ids = torch.randint(1, vocab, (batch, length + 1), generator=g)
        lengths = torch.randint(length // 2, length + 2, (batch,), generator=g)
        ids[torch.arange(length + 1)[None, :] >= lengths[:, None]] = PAD        # right padding
        return ids.to(device)

    src, tgt = tokens(src_len)[:, :src_len], tokens(tgt_len)
    return src, tgt[:, :-1], tgt[:, 1:]                                      # decoder input, labels


def train_step_fn(model, opt, batch, autocast_dtype, device_type):
    src, tgt_in, labels = batch
    # float16 (a GPU older than compute capability 8.0) needs a gradient scaler; bfloat16 does not
    scaler = torch.amp.GradScaler(device_type, enabled=autocast_dtype == torch.float16)

    def step():
        with autocast(device_type, autocast_dtype):
            logits = model(src, tgt_in)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=PAD)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def time_rounds(steps, rounds, iters, warmup, sync):
    """steps: {name: fn}. Alternate the models round by round; return {name: [seconds per step]}."""
    for fn in steps.values():
        for _ in range(warmup):
            fn()
        sync()
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, fn in steps.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            sync()
            times[name].append((time.perf_counter() - t0) / iters)
    return times


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--size", default=None, choices=list(SIZES),
                   help="default: small on CPU, base on CUDA")
    p.add_argument("--batch", type=int, default=None,
                   help="sentences per batch (default: 8 on CPU, 64 on CUDA)")
    p.add_argument("--src-len", type=int, default=None, help="default: 32 on CPU, 128 on CUDA")
    p.add_argument("--tgt-len", type=int, default=None, help="default: 32 on CPU, 128 on CUDA")
    p.add_argument("--vocab", type=int, default=None,
                   help="shared vocabulary (default: 8000 on CPU, 37000 on CUDA)")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--norm-first", action="store_true", help="pre-LN in both models")
    p.add_argument("--rounds", type=int, default=None,
                   help="alternating timing rounds (default 5 CPU, 10 CUDA)")
    p.add_argument("--iters", type=int, default=None,
                   help="steps per round (default 2 CPU, 10 CUDA)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed steps per model (default 2 CPU, 10 CUDA)")
    p.add_argument("--modes", default=None,
                   help="comma list of eager,compile (default: eager on CPU, both on CUDA)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads on CPU")
    a = p.parse_args(argv)
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("--device cuda asked for, but torch.cuda.is_available() is False")
    if a.threads:
        torch.set_num_threads(a.threads)
    size = a.size or ("base" if cuda else "small")
    batch = a.batch or (64 if cuda else 8)
    src_len, tgt_len = a.src_len or (128 if cuda else 32), a.tgt_len or (128 if cuda else 32)
    vocab = a.vocab or (37000 if cuda else 8000)
    rounds, iters, warmup = (a.rounds or (10 if cuda else 5), a.iters or (10 if cuda else 2),
                             a.warmup or (10 if cuda else 2))
    modes = (a.modes or ("eager,compile" if cuda else "eager")).split(",")
    autocast_dtype = amp_settings(a.device)[0] if cuda else None    # the book's rule (A4)
    device = torch.device(a.device)
    d_model, n_heads, n_layers, d_ff = SIZES[size]
    cfg = TransformerConfig.base(vocab, d_model=d_model, n_heads=n_heads, n_layers=n_layers,
                                 d_ff=d_ff,
                                 dropout=a.dropout, attn_dropout=a.dropout, ffn_dropout=a.dropout,
                                 norm_first=a.norm_first, max_len=max(src_len, tgt_len) + 1,
                                 pad_id=PAD)
    data = make_batch(batch, src_len, tgt_len, vocab, device)
    tokens_per_step = batch * (src_len + tgt_len)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    cpu = platform.processor() or platform.machine()
    name = (torch.cuda.get_device_name() if cuda
            else f"CPU ({cpu}, {torch.get_num_threads()} threads)")
    print(f"device: {name}; torch {torch.__version__}; precision: "
          f"{str(autocast_dtype).removeprefix('torch.') + ' autocast' if cuda else 'float32'}")
    print(f"model: {size} (d_model {d_model}, {n_heads} heads, {n_layers}+{n_layers} layers, d_ff "
          f"{d_ff}), vocab {vocab} shared and tied, dropout {a.dropout} in both models, "
          f"{'pre-LN' if a.norm_first else 'post-LN'}")
    print(f"batch: {batch} x ({src_len} source + {tgt_len} target) tokens, right-padded; "
          f"{rounds} rounds x {iters} steps after {warmup} warm-up steps per model\n")

    rows = []
    for mode in modes:
        torch.manual_seed(0)
        models = {"transformer_lib": Ours(cfg).to(device).train(),
                  "nn.Transformer": TorchReference.from_config(cfg).to(device).train()}
        n_params = {k: sum(q.numel() for q in m.parameters()) for k, m in models.items()}
        steps = {}
        for key, model in models.items():
            opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9,
                                   fused=True if cuda else None)
            runner = torch.compile(model) if mode == "compile" else model
            steps[key] = train_step_fn(runner, opt, data, autocast_dtype, device.type)
        times = time_rounds(steps, rounds, iters, warmup, sync)
        med = {k: statistics.median(v) for k, v in times.items()}
        for key in models:
            spread = (max(times[key]) - min(times[key])) / med[key]
            rows.append((mode, key, n_params[key], med[key] * 1e3, tokens_per_step / med[key],
                         spread, med["nn.Transformer"] / med[key]))
        del models, steps
        if cuda:
            torch.cuda.empty_cache()

    print("| mode | model | parameters | ms / step (median) | tokens / s | spread (max-min)/median "
          "| speed vs nn.Transformer |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for mode, key, n, ms, tps, spread, ratio in rows:
        print(f"| {mode} | {key} | {n:,} | {ms:.1f} | {tps:,.0f} | {spread:.0%} | {ratio:.2f}x |")
    if cuda:
        print(f"\npeak GPU memory: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
