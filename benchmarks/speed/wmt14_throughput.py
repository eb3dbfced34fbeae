"""Training throughput of the paper's two models at their own shapes: `--preset wmt14-base` and
`wmt14-big` (Table 3), with the 37,000-token shared vocabulary, as `train.run` builds and steps
them (`train.build_model`, `make_optimizer`, `LabelSmoothingLoss`, `training.train_step`).

The batches are synthetic, of one shape: `--rows` sentences of `--length` positions a side (token
ids drawn uniformly; the ids do not change the arithmetic). The paper's update is about 25,000
tokens a side; here each timed step is one micro-batch of rows × length positions a side, and
`--accum-steps` of them would make the paper's update (the projection below counts that way).
Printed and recorded: target positions per second (median over the timed steps), matrix-product
FLOPs per step (counted by torch.utils.flop_counter, forward + backward), the fraction of the
device's ceiling they reach (on the CPU: a plain 2048^3 matmul in float32 measured in the same
run; on a GPU: `--peak-tflops`, the device's dense peak), and the hours that the measured speed
gives for the preset's updates on 1 and 8 such devices (perfect scaling assumed, and said so).

  CPU, a few steps:  python benchmarks/speed/wmt14_throughput.py --device cpu \
      --json results/wmt14-throughput-cpu.json
  GPU runbook step:  python benchmarks/speed/wmt14_throughput.py --device cuda --amp \
      --rows 800 --steps 20 --peak-tflops 989 --json results/wmt14-throughput-gpu.json
  smoke test:        python benchmarks/speed/wmt14_throughput.py --tiny
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from transformer_lib.benchmarking import count_flops, matmul_flops_per_s, synchronize
from transformer_lib.engineering import amp_settings, git_commit, provenance, write_json
from transformer_lib.multi_head_attention import count_parameters
from transformer_lib.optimization import LabelSmoothingLoss
from transformer_lib.recipe import preset
from transformer_lib.stages import build_model, make_optimizer, make_schedule
from transformer_lib.training import Batch, train_step


def batch(rows: int, length: int, vocab: int, device, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (rows, length), generator=g)
    tgt = torch.randint(4, vocab, (rows, length + 1), generator=g)
    return Batch(src, tgt[:, :-1], tgt[:, 1:], n_tokens=rows * length,
                 n_src_tokens=rows * length).to(device)


def measure(name: str, args, device, amp_dtype) -> dict:
    r = preset(name)
    if args.tiny:
        r = dataclasses.replace(r, d_model=32, n_heads=2, n_layers=1, d_ff=64, vocab_size=300)
    torch.manual_seed(0)
    model = build_model(r, r.vocab_size).to(device)
    model.check_inputs = False
    loss_fn = LabelSmoothingLoss(r.vocab_size, r.label_smoothing, pad_id=0)
    loss_fn.check_inputs = False
    optimizer = make_optimizer(r, model.parameters())
    scheduler = make_schedule(r, optimizer, lambda updates: 0.0)
    b = batch(args.rows, args.length, r.vocab_size, device)

    def step():
        train_step(model, b, loss_fn, optimizer, scheduler, amp_dtype=amp_dtype)

    def forward_backward():
        model.zero_grad(set_to_none=True)
        logits = model(b.src, b.tgt_in)
        loss_fn(logits.float(), b.tgt_out).backward()

    flops = count_flops(forward_backward)
    for _ in range(args.warmup):
        step()
    seconds = []
    for _ in range(args.steps):
        synchronize(device)
        t0 = time.perf_counter()
        step()
        synchronize(device)
        seconds.append(time.perf_counter() - t0)
    s = statistics.median(seconds)
    tokens = args.rows * args.length
    per_update = r.update_tokens / tokens                # micro-batches of this size an update
    hours = r.max_steps * per_update * s / 3600
    return {"preset": name, "parameters": count_parameters(model), "rows": args.rows,
            "length": args.length, "step_seconds": seconds, "step_seconds_median": s,
            "target_positions_per_s": tokens / s, "flops_per_step": flops,
            "achieved_flops_per_s": flops / s, "updates": r.max_steps,
            "micro_batches_per_update": per_update,
            "projected_hours": {"1 device": hours, "8 devices": hours / 8}}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--presets", nargs="+", default=["wmt14-base", "wmt14-big"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--amp", action="store_true", help="autocast (bf16 where the device has it)")
    p.add_argument("--rows", type=int, default=64, help="sentences a step")
    p.add_argument("--length", type=int, default=32, help="positions a sentence, each side")
    p.add_argument("--steps", type=int, default=3, help="timed steps per model")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="the GPU's dense peak (TFLOP/s) in the precision used")
    p.add_argument("--tiny", action="store_true", help="smoke test: tiny models, 2 steps")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    if args.tiny:
        args.rows, args.length, args.steps, args.warmup = 4, 8, 2, 1
    device = torch.device(args.device)
    amp_dtype = amp_settings(device, cpu_bf16=True)[0] if args.amp else None
    if device.type == "cpu":
        ceiling, what = matmul_flops_per_s(device), "a plain 2048^3 float32 matmul, this run"
    else:
        if not args.peak_tflops:
            p.error("on a GPU give --peak-tflops, the device's dense peak in the precision used")
        ceiling, what = args.peak_tflops * 1e12, "--peak-tflops"
    out = {"measured": True, "benchmark": "benchmarks/speed/wmt14_throughput.py",
           **provenance(device, 1, git_commit()), "threads": torch.get_num_threads(),
           "precision": str(amp_dtype or torch.float32).removeprefix("torch."),
           "ceiling_flops_per_s": ceiling, "ceiling": what, "tiny": args.tiny,
           "scaling": "projected hours assume perfect scaling over devices", "models": []}
    for name in args.presets:
        m = measure(name, args, device, amp_dtype)
        m["fraction_of_ceiling"] = m["achieved_flops_per_s"] / ceiling
        out["models"].append(m)
        print(f"{name}: {m['parameters']:,} parameters; {m['target_positions_per_s']:,.0f} target "
              f"positions/s ({m['rows']} x {m['length']} a step, median of {args.steps}); "
              f"{m['fraction_of_ceiling']:.0%} of {what}; {m['updates']:,} updates of "
              f"{m['micro_batches_per_update']:.1f} such steps: "
              f"{m['projected_hours']['1 device']:,.0f} h on 1, "
              f"{m['projected_hours']['8 devices']:,.0f} h on 8", flush=True)
    if args.json:
        write_json(args.json, out, indent=1)
    return out


if __name__ == "__main__":
    main()
