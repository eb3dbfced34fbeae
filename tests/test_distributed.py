"""The torchrun helpers of appendix A4 on two gloo processes (torch.multiprocessing, a file store):
errors shared so that no process waits for one that stopped, the same-weights check by all-reduced
checksums (no copy of the model gathered), the token weights of an update made on the device, and
one GPU per process (CUDA mocked)."""
import datetime
import pickle
from unittest import mock

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils._python_dispatch import TorchDispatchMode

from transformer_lib import engineering
from transformer_lib.engineering import (
    MicroBatches,
    device_for,
    fail_together,
    gather_objects,
    max_weight_diff,
    micro_batch_weights,
)
from transformer_lib.recipe import RecipeError
from transformer_lib.training import collate


def _worker(rank: int, world: int, store: str, out: str, task) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        result = task(rank, world)
    except Exception as e:                       # handed to the test, which asserts on it
        result = ("raised", type(e).__name__, str(e))
    finally:
        dist.destroy_process_group()
    with open(f"{out}/rank{rank}.pkl", "wb") as f:
        pickle.dump(result, f)


def on_two_processes(tmp_path, task) -> list:
    "What `task(rank, world)` returned (or raised) on each of two gloo processes."
    mp.spawn(_worker, args=(2, str(tmp_path / "store"), str(tmp_path), task), nprocs=2,
             join=True)
    return [pickle.loads((tmp_path / f"rank{r}.pkl").read_bytes()) for r in (0, 1)]


def _one_fails(rank, world):
    with fail_together(world):
        if rank == 1:
            raise RecipeError("out_dir /x cannot be written")
    return "went on"


def _none_fails(rank, world):
    with fail_together(world):
        pass
    return gather_objects(rank * 10, world)


def test_an_error_on_one_process_is_raised_on_every_one(tmp_path):
    assert on_two_processes(tmp_path, _one_fails) == [
        ("raised", "RecipeError", "process 1: out_dir /x cannot be written"),
        ("raised", "RecipeError", "out_dir /x cannot be written")]
    assert on_two_processes(tmp_path, _none_fails) == [[0, 10], [0, 10]]


def test_on_one_process_fail_together_is_the_body_alone():
    with pytest.raises(RecipeError, match="^bad$"):
        with fail_together(1):
            raise RecipeError("bad")


def _weights(rank, world, nudge: float, where: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Linear(7, 3))
    if rank == 1 and nudge:
        with torch.no_grad():
            list(model.parameters())[where].view(-1)[2] += nudge
    with mock.patch.object(dist, "all_gather", side_effect=AssertionError("all_gather")):
        return max_weight_diff(model, world)


def _equal(rank, world):
    return _weights(rank, world, 0.0, 0)


def _one_differs(rank, world):
    return _weights(rank, world, 0.25, 2)


def _one_bit_differs(rank, world):
    return _weights(rank, world, 1e-7, 1)


def test_the_same_weights_check_needs_no_copy_of_the_model(tmp_path):
    """Equal weights: 0 on both processes; one weight nudged on process 1: the exact difference,
    found from the checksums of the tensors and one broadcast tensor; never an all_gather."""
    assert on_two_processes(tmp_path, _equal) == [0.0, 0.0]
    assert on_two_processes(tmp_path, _one_differs) == [pytest.approx(0.25, abs=1e-6)] * 2
    got = on_two_processes(tmp_path, _one_bit_differs)
    assert got[0] == got[1] and 0 < got[0] < 1e-6


def test_the_bit_checksum_sees_one_bit_and_where_it_is():
    t = torch.randn(1000)
    base = engineering._bit_checksum(t)
    assert torch.equal(base, engineering._bit_checksum(t.clone()))
    for i in (0, 500, 999):
        u = t.clone()
        u.view(torch.int32)[i] ^= 1                        # the lowest bit of one weight
        assert not torch.equal(base, engineering._bit_checksum(u)), i
    swapped = t.clone()
    swapped[[3, 4]] = swapped[[4, 3]]
    assert not torch.equal(base, engineering._bit_checksum(swapped))


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_the_token_weights_of_an_update_are_made_on_the_device(monkeypatch):
    """Under DDP (two processes, mocked: the other holds as many tokens) each micro-batch's weight
    is R·n_j/N with N summed by all_reduce, and N is filled in on the device (aten.full), never made
    from host data (aten.lift_fresh: on a GPU, a copy the host waits for)."""
    g = torch.Generator().manual_seed(0)
    micro = MicroBatches(collate([(torch.randint(3, 9, (n,), generator=g).tolist(), [1, 4, 2])
                                  for n in (3, 5, 2)][a:b], 0) for a, b in ((0, 1), (1, 3)))
    monkeypatch.setattr(engineering, "world_size", lambda: 2)
    monkeypatch.setattr(engineering.dist, "all_reduce", lambda t: t.mul_(2))
    with _Ops() as seen:
        weights = micro_batch_weights(micro)
    assert "aten.full.default" in seen.ops and "aten.lift_fresh.default" not in seen.ops
    n = [b.n_tokens for b in micro]
    assert [float(w) for w in weights] == [2 * k / (2 * sum(n)) for k in n]


def test_one_gpu_per_process_from_local_rank():
    cuda, named = torch.device("cuda"), torch.device("cuda", 1)
    assert device_for(cuda, 3, 4) == torch.device("cuda", 3)
    assert device_for(named, 0, 1) == named                  # one process: the GPU it names
    assert device_for(torch.device("cpu"), 1, 2) == torch.device("cpu")
    with pytest.raises(ValueError, match="cuda:1 names one GPU, but this run has 2 processes"):
        device_for(named, 0, 2)
