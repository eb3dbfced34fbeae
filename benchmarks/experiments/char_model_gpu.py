"""Exercise 3's reference character model on Tiny Shakespeare: validation loss within a
training-time budget.

The model is exercise 3's reference answer, CharModel (6 layers, 6 heads, d_model 384, context 256,
dropout 0.2: nanoGPT's shakespeare_char, 10.8 M parameters), trained with bf16 autocast on batches
of 64 windows (float16 with loss scaling, and no --compile, on a GPU below compute capability 8.0
such as Colab's T4).
The package does not hold the exercise's answer: the model is read from the cells tagged
"solution" of notebooks/exercises/solutions/ex3_char_model_solution.ipynb, so the script runs
from a checkout of the repository. The training loop is the exercise's given
transformer_lib.exercises.char_model.train_char_model.
Each run's cosine learning-rate schedule decays over its time budget (seconds of training;
evaluation is not counted), so the rate reaches its floor exactly when the time is up. Validation
loss is measured as nanoGPT does: the mean over 200 batches of 64 random windows of the validation
10%.

Targets (issue 8), on one H100: validation loss <= 1.47 within 30 s, and a best <= 1.44 within 180
s.

Usage:
    python benchmarks/experiments/char_model_gpu.py          # both budgets (30 s, 180 s), GPU
    python benchmarks/experiments/char_model_gpu.py --budgets 30 --compile
    python benchmarks/experiments/char_model_gpu.py --device cpu --config cpu --budgets 5 \
        --eval-batches 4                                           # smoke test

Prints the device and one JSON line per run: budget, steps, final and best validation loss, the
training time at which the loss first reached 1.47 and 1.44 (null if it did not), and the evaluation
history.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from transformer_lib.data import load_tiny_shakespeare
from transformer_lib.engineering import amp_settings, autocast
from transformer_lib.exercises.char_model import CharModelConfig, CharTokenizer, train_char_model
from transformer_lib.training import get_batch

SOLUTION = (Path(__file__).resolve().parents[2] / "notebooks" / "exercises" / "solutions"
            / "ex3_char_model_solution.ipynb")


def reference_solution() -> dict:
    """What the cells tagged "solution" of exercise 3's solution notebook define (CharModel,
    split_text, generate), run in order in a fresh namespace."""
    namespace: dict = {"__name__": "ex3_char_model_solution"}
    for cell in json.loads(SOLUTION.read_text())["cells"]:
        if cell["cell_type"] == "code" and "solution" in cell["metadata"].get("tags", []):
            exec(compile("".join(cell["source"]), str(SOLUTION), "exec"), namespace)
    return namespace


def first_time_below(history: list[dict], threshold: float) -> float | None:
    return next((h["train_s"] for h in history if h["val_loss"] <= threshold), None)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--config", choices=["gpu", "cpu"], default="gpu")
    parser.add_argument("--budgets", type=float, nargs="+", default=[30.0, 180.0],
                        help="seconds of training per run")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--min-lr", type=float, default=1e-4)
    parser.add_argument("--warmup-steps", type=int, default=100)
    parser.add_argument("--eval-every-s", type=float, default=None, help="default: budget / 6")
    parser.add_argument("--eval-batches", type=int, default=200)
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the model (compilation is not timed)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available: run with --device cpu --config cpu for a smoke test",
              file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    # bf16; float16 + GradScaler (in train_char_model) below 8.0
    amp, _, compile_ok = amp_settings(device)
    if args.compile and not compile_ok:
        print(f"not compiling: torch.compile is not used on {name} (compute capability < 8.0)",
              flush=True)
        args.compile = False
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    answer = reference_solution()
    CharModel, split_text = answer["CharModel"], answer["split_text"]
    text = load_tiny_shakespeare()
    tokenizer = CharTokenizer(text)
    train_ids, val_ids = (tokenizer.encode(part).to(device) for part in split_text(text))
    config = (CharModelConfig(vocab_size=tokenizer.vocab_size) if args.config == "gpu"
              else CharModelConfig.cpu(tokenizer.vocab_size))
    print(f"device: {name}; torch {torch.__version__}; config: {config}; compile: {args.compile}",
          flush=True)

    for budget in args.budgets:
        torch.manual_seed(args.seed)
        model = CharModel.from_config(config).to(device)
        n_params = sum(p.numel() for p in model.parameters())
        trained = model
        if args.compile:
            # Compile outside the timed training, on inputs like the loop's: get_batch returns
            # strided views, and a warm-up on a fresh contiguous tensor would leave a recompile
            # (guards on strides) inside the timed steps. Evaluation (eval mode, no grad) is a graph
            # of its own.
            trained = torch.compile(model)
            warm, _ = get_batch(train_ids, config.block_size, args.batch_size,
                                torch.Generator(device=device).manual_seed(args.seed + 1))
            with autocast(device, amp):
                trained(warm).float().mean().backward()
                trained.eval()
                with torch.no_grad():
                    trained(warm)
                trained.train()
            model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        history = train_char_model(trained, train_ids, val_ids, batch_size=args.batch_size,
                                   lr=args.lr, min_lr=args.min_lr, warmup_steps=args.warmup_steps,
                                   time_budget_s=budget,
                                   eval_every_s=args.eval_every_s or budget / 6,
                                   eval_batches=args.eval_batches, amp_dtype=amp, seed=args.seed,
                                   log=lambda line: print("  " + line, flush=True))
        record = {"device": name, "budget_s": budget, "parameters": n_params,
                  "compile": args.compile, "lr": args.lr, "steps": history[-1]["step"],
                  "train_s": round(history[-1]["train_s"], 2),
                  "wall_s_incl_eval": round(time.perf_counter() - start, 2),
                  "final_val_loss": round(history[-1]["val_loss"], 4),
                  "best_val_loss": round(min(h["val_loss"] for h in history), 4),
                  "first_s_at_or_below_1.47": first_time_below(history, 1.47),
                  "first_s_at_or_below_1.44": first_time_below(history, 1.44),
                  "history": [{k: (float(f"{v:.4g}") if k == "lr" else round(v, 4))
                               if isinstance(v, float) else v
                               # lr ~1e-4: 4 significant digits
                               for k, v in h.items()} for h in history]}
        print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
