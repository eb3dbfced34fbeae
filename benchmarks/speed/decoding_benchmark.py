"""Greedy decoding with and without the key/value cache, and beam 4 against greedy (chapter 15).

32 sentences, 128 generated tokens each (no early stop: the end-of-sentence id's logit is set
to -inf), on every device asked for, side by side in one run:

    python benchmarks/speed/decoding_benchmark.py                 # CPU (and CUDA when present)
    python benchmarks/speed/decoding_benchmark.py --device cpu --device cuda
    python benchmarks/speed/decoding_benchmark.py --preset base --device cuda

Prints a table; speed targets (issue 6): cache >= 2x faster on the CPU, >= 3x on a GPU.
"""
import argparse
import platform
import statistics
import sys
import time

import torch

from transformer_lib.decoding import beam_search, greedy_decode
from transformer_lib.model import Transformer, TransformerConfig

PRESETS = {  # the "small" model of the capstone, and the paper's base model
    "small": dict(d_model=256, n_heads=4, n_layers=2, d_ff=1024),   # the cpu-30min model
    "base": dict(d_model=512, n_heads=8, n_layers=6, d_ff=2048),
}


def timed(fn, device, repeats):
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def run(device, args):
    torch.manual_seed(0)
    cfg = TransformerConfig(src_vocab_size=args.vocab, tgt_vocab_size=args.vocab, dropout=0.0,
                            max_len=max(args.new_tokens + 8, args.src_len), pad_id=0,
                            **PRESETS[args.preset])
    model = Transformer(cfg).to(device).eval()
    src = torch.randint(3, args.vocab, (args.sentences, args.src_len), device=device)
    bos, never = 1, 2                  # an eos the model never emits: every sentence runs 128 steps
    decode, never_ids = model.decode, torch.tensor([never], device=device)
    # eos logit -inf
    model.decode = lambda *a, **kw: decode(*a, **kw).index_fill(-1, never_ids, float("-inf"))
    repeats = 1 if device.type == "cpu" else 3
    greedy_decode(model, src[:2], 4, bos, never)                                  # warm-up
    beam_search(model, src[:2], 4, 0.6, 4, bos, never)
    t_full, a = (timed(lambda: greedy_decode(model, src, args.new_tokens, bos, never,
                                             use_cache=False), device, repeats))
    t_cache, b = timed(lambda: greedy_decode(model, src, args.new_tokens, bos, never), device,
                       repeats)
    assert a.shape == b.shape == (args.sentences, args.new_tokens + 1)
    if not torch.equal(a, b):   # both paths compute the same logits up to rounding
                                # (different kernels on a
        # GPU); an untrained model has near-tied logits, so one flipped argmax must not end the run
        differ = int((a != b).any(dim=1).sum())
        print(f"note ({device.type}): cached and uncached greedy outputs differ in {differ} of "
              f"{args.sentences} sentences (rounding at near-tied logits)", file=sys.stderr)
    t_beam, c = timed(lambda: beam_search(model, src, 4, 0.6, args.new_tokens, bos, never), device,
                      repeats)
    assert c.shape == (args.sentences, args.new_tokens + 1)
    name = (torch.cuda.get_device_name(device) if device.type == "cuda"
            else f"CPU ({torch.get_num_threads()} threads)")
    return name, t_full, t_cache, t_beam


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", action="append", choices=["cpu", "cuda"],
                        help="repeat for several (default: cpu, and cuda when available)")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="small")
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--src-len", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=8000)
    args = parser.parse_args()
    devices = args.device or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    if "cuda" in devices and not torch.cuda.is_available():
        parser.error("--device cuda was given but CUDA is not available on this machine")
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}; model preset "
          f"{args.preset!r} {PRESETS[args.preset]}, vocabulary {args.vocab}; {args.sentences} "
          f"sentences of {args.src_len} source tokens, {args.new_tokens} generated tokens each\n")
    rows = [run(torch.device(d), args) for d in devices]
    n_tok = args.sentences * args.new_tokens
    print("| device | greedy, no cache | greedy, KV cache | cache speed-up | greedy tokens/s "
          "(cache) | beam 4, KV cache | beam 4 / greedy |")
    print("|---|---|---|---|---|---|---|")
    for name, t_full, t_cache, t_beam in rows:
        print(f"| {name} | {t_full:.2f} s | {t_cache:.2f} s | {t_full / t_cache:.1f}x | "
              f"{n_tok / t_cache:,.0f} | {t_beam:.2f} s | {t_beam / t_cache:.1f}x |")


if __name__ == "__main__":
    main()
