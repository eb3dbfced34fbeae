"""Faults and delays for the processes that torchrun starts in a test, set by environment
variables and installed before `transformer_lib.train` runs by a sitecustomize.py that the test
puts first on PYTHONPATH (`site_with_hooks`, or `wmt14_fixture.site_dir(..., hooks=True)`).
Nothing in transformer_lib knows of them; each wraps a function the run calls:

- HOOK_EXIT_AT_STEP=N (and HOOK_EXIT_RANK=R, default 1): process R leaves at once (`os._exit(1)`,
  as a process that dies) after update N, on the first start only (TORCHELASTIC_RESTART_COUNT 0),
  so that a restarted run goes on;
- HOOK_STALL_AT_STEP=N: every process stands still after update N (first start only) until the
  test kills it, so that the test knows which checkpoint it kills the run after;
- HOOK_SLOW_DECODE_S=x: every call of greedy decoding or beam search waits x seconds first;
- HOOK_SLOW_LOSS_S=x: process 0's validation loss waits x seconds first (work of process 0 alone).
"""
import os
import time
from pathlib import Path

HOOKS = ("HOOK_EXIT_AT_STEP", "HOOK_STALL_AT_STEP", "HOOK_SLOW_DECODE_S", "HOOK_SLOW_LOSS_S")


def _first_start() -> bool:
    return os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"


def _slowed(function, seconds: float):
    def slow(*args, **kwargs):
        time.sleep(seconds)
        return function(*args, **kwargs)
    return slow


def install() -> None:
    "Wrap what the environment asks for (in a process torchrun started; nothing in torchrun's)."
    if "RANK" not in os.environ or not any(name in os.environ for name in HOOKS):
        return
    rank = int(os.environ["RANK"])
    if "HOOK_EXIT_AT_STEP" in os.environ or "HOOK_STALL_AT_STEP" in os.environ:
        from transformer_lib import training
        exit_at, stall_at = (int(os.environ.get(k, -1)) for k in ("HOOK_EXIT_AT_STEP",
                                                                  "HOOK_STALL_AT_STEP"))
        exit_rank, loop = int(os.environ.get("HOOK_EXIT_RANK", 1)), training.train

        def train(*args, callback=None, **kwargs):
            def after(step: int) -> None:
                callback(step)
                if _first_start() and step == exit_at and rank == exit_rank:
                    os._exit(1)
                if _first_start() and step == stall_at:
                    time.sleep(600)
            return loop(*args, callback=after, **kwargs)
        training.train = train
    if "HOOK_SLOW_DECODE_S" in os.environ:
        from transformer_lib import decoding
        seconds = float(os.environ["HOOK_SLOW_DECODE_S"])
        decoding.greedy_decode = _slowed(decoding.greedy_decode, seconds)
        decoding.beam_search = _slowed(decoding.beam_search, seconds)
    if "HOOK_SLOW_LOSS_S" in os.environ and rank == 0:
        from transformer_lib import training
        training.evaluate_loss = _slowed(training.evaluate_loss,
                                         float(os.environ["HOOK_SLOW_LOSS_S"]))


SITE_LINES = (f"import sys\nsys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
              "import run_hooks\nsys.path.pop(0)\nrun_hooks.install()\n")


def site_with_hooks(where: Path) -> Path:
    "A directory whose sitecustomize.py installs the hooks: put it first on PYTHONPATH."
    where.mkdir(parents=True, exist_ok=True)
    (where / "sitecustomize.py").write_text(SITE_LINES)
    return where
