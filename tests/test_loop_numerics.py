"""The training loop's host cost was cut (batches gathered from tensor tables, Adam's step grouped
over all parameters, no walk over the modules to set training mode every update) without changing
a number: the first updates of two small capstone runs, the cpu-30min recipe's kind and the
gpu-30s recipe's (filler rows, bucketed lengths) on the CPU, give the losses and learning rates
recorded before the change (tests/fixtures/loop_numerics.json, written by
tests/fixtures/record_loop_numerics.py.txt). REL as in test_trajectories.py: another CPU's kernels
round the last bits differently; any change of the arithmetic exceeds it by orders of magnitude."""
import json
from pathlib import Path

import pytest
import torch

from transformer_lib.optimization import paper_adam
from transformer_lib.recipe import preset, recipe_from_dict
from transformer_lib.stages import fit, make_optimizer, prepare

REL = 1e-6
FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "loop_numerics.json").read_text())


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)                  # the fixture was recorded with one thread
    yield
    torch.set_num_threads(before)


@pytest.mark.needs_data
@pytest.mark.parametrize("name", sorted(FIXTURE["runs"]))
def test_the_first_updates_are_unchanged(tmp_path, one_thread, name):
    want = FIXTURE["runs"][name]
    s = fit(prepare(recipe_from_dict({**want["recipe"], "out_dir": str(tmp_path / "run")})))
    assert [h["loss"] for h in s.history] == pytest.approx(want["losses"], rel=REL, abs=0)
    assert [h["lr"] for h in s.history] == want["lrs"]


def test_grouped_adam_is_the_per_parameter_loop_bit_for_bit(one_thread):
    """The capstone's optimiser steps all parameters with grouped (foreach) operators on the CPU:
    the same arithmetic as Adam's loop over the parameters, bit for bit, in a few operators."""
    torch.manual_seed(0)
    shapes = [(16, 16), (16,), (100, 16), (64, 16), (64,)]
    start = [torch.randn(s) for s in shapes]
    grads = [[torch.randn(s) for s in shapes] for _ in range(5)]
    finals = []
    for make in (lambda ps: paper_adam(ps, lr=1e-3),
                 lambda ps: make_optimizer(preset("cpu-30min"), ps)):
        params = [torch.nn.Parameter(t.clone()) for t in start]
        opt = make(params)
        for g in opt.param_groups:
            g["lr"] = 1e-3
        for step in grads:
            for p, g in zip(params, step):
                p.grad = g.clone()
            opt.step()
        finals.append(params)
    assert all(torch.equal(a, b) for a, b in zip(*finals))
