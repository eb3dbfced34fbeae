"""Forward + backward time and peak memory of four implementations of the same multi-head
self-attention.

    naive     NaiveMultiHeadAttention: the 3h separate matrices, a Python loop over heads (chapter
    05) explicit  MultiHeadAttention with need_weights = True: one fused projection, explicit
    softmax fast      MultiHeadAttention (default): F.scaled_dot_product_attention (fused kernels on
    a GPU) torch     nn.MultiheadAttention(batch_first=True), called with need_weights=False
    fast-mask (with --causal) the fast path given the causal mask as a boolean tensor instead of by
    name

With --causal every implementation computes causal self-attention (the decoder's case): naive and
explicit get make_causal_mask(L), fast gets is_causal=True, torch gets the mask and is_causal=True.

Usage:
    python benchmarks/speed/attention_benchmark.py                 # CPU, float32, small config
    python benchmarks/speed/attention_benchmark.py --device cuda   # GPU, bf16, B=32, L in
                                                                   # {128, 512, 2048}
    python benchmarks/speed/attention_benchmark.py --device cuda --causal \
        --impls fast fast-mask torch

Peak memory is the most tensor memory alive at any moment of one forward + backward step, beyond
what was alive before it: torch.cuda.max_memory_allocated on CUDA; on the CPU, tensors are counted
one by one as operators create them and as they are freed
(transformer_lib.benchmarking.LiveTensorMemory, appendix A3; allocator overhead is not included).
Time is the median over --repeats steps after --warmup steps. Ratios are against
nn.MultiheadAttention.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from transformer_lib.benchmarking import LiveTensorMemory
from transformer_lib.masking import make_causal_mask
from transformer_lib.multi_head_attention import MultiHeadAttention, naive_from_fused


def build(kind: str, d_model: int, h: int, device, dtype) -> nn.Module:   # kind: one of IMPLS
    if kind == "torch":
        module = nn.MultiheadAttention(d_model, h, batch_first=True)
    else:
        module = MultiHeadAttention(d_model, h)
        if kind == "naive":
            module = naive_from_fused(module)
        module.need_weights = kind == "explicit"
    return module.to(device=device, dtype=dtype).train()


def step(module: nn.Module, x: torch.Tensor, kind: str, causal: bool = False) -> None:
    mask = make_causal_mask(x.shape[1], x.device) if causal else None   # (L, L), True = may attend
    if kind == "torch":
        out = module(x, x, x, need_weights=False, attn_mask=None if mask is None else ~mask,
                     is_causal=causal)[0]
    elif kind == "fast" and causal:
        out = module(x, x, x, is_causal=True)
    else:
        out = module(x, x, x, mask)
    out.backward(torch.ones_like(out))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(kind, B, L, d_model, h, device, dtype, warmup, repeats, causal=False):
    torch.manual_seed(0)
    module = build(kind, d_model, h, device, dtype)
    x = torch.randn(B, L, d_model, device=device, dtype=dtype, requires_grad=True)
    for _ in range(warmup):
        step(module, x, kind, causal)
    times = []
    for _ in range(repeats):
        module.zero_grad(set_to_none=True)
        x.grad = None
        sync(device)
        t0 = time.perf_counter()
        step(module, x, kind, causal)
        sync(device)
        times.append(time.perf_counter() - t0)
    module.zero_grad(set_to_none=True)
    x.grad = None
    if device.type == "cuda":
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        step(module, x, kind, causal)
        sync(device)
        peak = torch.cuda.max_memory_allocated(device) - base
    else:
        with LiveTensorMemory() as tracker:
            step(module, x, kind, causal)
        peak = tracker.peak
    return statistics.median(times), peak


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                   help="default: float32 on cpu, bfloat16 on cuda")
    p.add_argument("--batch", type=int, default=None,
                   help="default: 4 on cpu (reduced from 32), 32 on cuda")
    p.add_argument("--lengths", type=int, nargs="+", default=None,
                   help="default: 128 512 on cpu, 128 512 2048 on cuda")
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--impls", nargs="+", default=["naive", "explicit", "fast", "torch"],
                   choices=["naive", "explicit", "fast", "fast-mask", "torch"])
    p.add_argument("--causal", action="store_true",
                   help="causal self-attention (the decoder's) instead of no mask")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads on cpu")
    args = p.parse_args(argv)

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        p.error("--device cuda requested but torch.cuda.is_available() is False")
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype or ("bfloat16" if cuda else "float32"))
    B = args.batch or (32 if cuda else 4)
    lengths = args.lengths or ([128, 512, 2048] if cuda else [128, 512])
    if args.threads and not cuda:
        torch.set_num_threads(args.threads)
    name = (torch.cuda.get_device_name(device) if cuda
            else f"CPU ({torch.get_num_threads()} threads)")
    print(f"device: {name} | torch {torch.__version__} | dtype "
          f"{str(dtype).replace('torch.', '')} | B={B} d_model={args.d_model} h={args.heads} | "
          f"self-attention, {'causal' if args.causal else 'no mask'} | forward+backward, median of "
          f"{args.repeats} after {args.warmup} warm-up")
    print(f"{'L':>6} {'impl':>9} {'time (ms)':>10} {'vs torch':>9} {'peak mem (MiB)':>15} "
          f"{'vs torch':>9}")
    for L in lengths:
        rows = {}
        for kind in args.impls:
            try:
                rows[kind] = measure(kind, B, L, args.d_model, args.heads, device, dtype,
                                     args.warmup, args.repeats, args.causal)
            except torch.cuda.OutOfMemoryError:
                rows[kind] = None
                if cuda:
                    torch.cuda.empty_cache()
        ref = rows.get("torch")
        for kind, r in rows.items():
            if r is None:
                print(f"{L:>6} {kind:>9} {'out of memory':>10}")
                continue
            t, m = r
            rt = f"{t / ref[0]:.2f}x" if ref else "-"
            rm = f"{m / ref[1]:.2f}x" if ref and ref[1] else "-"
            print(f"{L:>6} {kind:>9} {t * 1e3:>10.1f} {rt:>9} {m / 2**20:>15.1f} {rm:>9}")


if __name__ == "__main__":
    main()
