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


# --- what the capstone's run does with them (transformer_lib.train) -------------------------------
PAIRS = [(f"der {w} ist {'sehr ' * (k % 4)}{k}", f"the {e} is {'very ' * (k % 4)}{k}")
         for k in range(12) for w, e in (("Hund", "dog"), ("Baum", "tree"))]


def _translator():
    "A small model (untrained: what it says does not matter, only that it says it the same way)."
    from transformer_lib.recipe import Recipe
    from transformer_lib.stages import build_model
    from transformer_lib.text import train_joint_tokenizer
    tok = train_joint_tokenizer(PAIRS, vocab_size=300)
    torch.manual_seed(0)
    recipe = Recipe(d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0)
    return build_model(recipe, tok.vocab_size, pad_id=tok.pad_id).eval(), tok


def _shared_decoding(rank, world):
    from transformer_lib.stages import _translated, timed_bleu, translate
    model, tok = _translator()
    out = {}
    for beam in (1, 2):
        shared = timed_bleu(model, tok, PAIRS, beam_size=beam, alpha=0.6, device="cpu",
                            amp_dtype=None, batch_size=4, rank=rank, world_size=world)
        alone = translate(model, tok, [de for de, _ in PAIRS], beam_size=beam, batch_size=4)
        mine = _translated(model, tok, [de for de, _ in PAIRS], (rank, world), beam_size=beam,
                           alpha=0.6, batch_size=4, device="cpu", amp_dtype=None,
                           use_cache=True)
        out[beam] = (shared["hypotheses"], shared["bleu"], alone, sorted(mine))
    return out


def test_shared_decoding_gives_what_one_process_gives(tmp_path):
    """Each of two processes translates every other batch of the one-process order, and both get
    every translation: the hypotheses, and so the BLEU, of one process, greedy and beam."""
    from transformer_lib.text import corpus_bleu
    got = on_two_processes(tmp_path, _shared_decoding)
    for beam in (1, 2):
        (hyps0, bleu0, alone, mine0), (hyps1, bleu1, _, mine1) = got[0][beam], got[1][beam]
        assert hyps0 == hyps1 == alone and len(set(alone)) > 1
        assert bleu0 == bleu1 == corpus_bleu(alone, [en for _, en in PAIRS]).score
        assert mine0 and mine1 and not set(mine0) & set(mine1)           # each did its share
        assert sorted(mine0 + mine1) == list(range(len(PAIRS)))


def _probe(folders, rank, world):
    seen = engineering.same_folder_as_process_0(folders[rank], rank, world)
    return seen, sorted(p.name for p in (folders[0].parent).rglob(".probe-*"))


def test_a_folder_is_known_to_be_process_0s_or_this_machines_own(tmp_path):
    """The same folder on both processes (one machine, or a shared disk): True on both; a folder of
    its own on process 1 (a machine with its own disk): False there. No probe file is left."""
    from functools import partial
    one = tmp_path / "disk" / "run"
    assert on_two_processes(tmp_path, partial(_probe, [one, one])) == [(True, []), (True, [])]
    own = [tmp_path / "disk" / "run0", tmp_path / "disk" / "run1"]
    assert on_two_processes(tmp_path, partial(_probe, own)) == [(True, []), (False, [])]
    assert one.is_dir() and own[0].is_dir() and not own[1].exists()   # process 0 made its own


def _fetch(data_dirs, local_ranks, source, rank, world):
    import os

    from transformer_lib import data
    from transformer_lib.stages import _fetch_on_each_machine
    os.environ[data.ENV_VAR] = str(data_dirs[rank])
    data.MANIFEST["test/file.txt"] = data.DataFile("test/file.txt", data.sha256_of(source),
                                                   source.as_uri())
    downloads = []
    real = data._download
    data._download = lambda entry, target: (downloads.append(rank), real(entry, target))
    try:
        _fetch_on_each_machine(["test/file.txt"], local_ranks[rank], world)
    except data.DataError as e:
        return "DataError", str(e), downloads
    return "fetched", (data_dirs[rank] / "test" / "file.txt").is_file(), downloads


def test_each_machine_downloads_once_and_its_other_processes_check(tmp_path):
    """One machine of two processes (local ranks 0 and 1, one data folder): process 0 alone
    downloads, process 1 finds the file checked. Two machines of one process each (both local rank
    0, a folder each): each downloads its own. A process that is not its machine's local rank 0
    never downloads: a file missing there is a DataError, raised on every process."""
    from functools import partial
    source = tmp_path / "source.txt"
    source.write_text("Zwei Hunde.\n")
    one = [tmp_path / "machine"] * 2
    assert on_two_processes(tmp_path, partial(_fetch, one, [0, 1], source)) == [
        ("fetched", True, [0]), ("fetched", True, [])]
    two = [tmp_path / "a", tmp_path / "b"]
    assert on_two_processes(tmp_path, partial(_fetch, two, [0, 0], source)) == [
        ("fetched", True, [0]), ("fetched", True, [1])]
    apart = [tmp_path / "c", tmp_path / "d"]                 # local rank 1 given another folder
    got = on_two_processes(tmp_path, partial(_fetch, apart, [0, 1], source))
    assert [(g[0], g[2]) for g in got] == [("DataError", [0]), ("DataError", [])]
    assert got[0][1].startswith("process 1: ") and "not found" in got[1][1]


def _resume_auto(outs, rank, world):
    from transformer_lib.optimization import CheckpointError
    from transformer_lib.recipe import Recipe
    from transformer_lib.stages import read_inputs
    try:
        read_inputs(Recipe(out_dir=str(outs[rank])), outs[rank], "auto", world_size=world)
    except CheckpointError as e:
        return str(e)
    return "read"


def test_resume_auto_refuses_machines_that_disagree(tmp_path):
    """--resume auto where one machine's OUT_DIR holds a checkpoint and the other's does not: the
    same error on both, naming which processes have one."""
    from functools import partial
    outs = [tmp_path / "a", tmp_path / "b"]
    outs[0].mkdir()
    (outs[0] / "checkpoint.pt").write_bytes(b"")
    got = on_two_processes(tmp_path, partial(_resume_auto, outs))
    assert got[0] == got[1] and "processes [0] find a checkpoint" in got[0]
    assert "processes [1] do not" in got[0]


def test_a_wait_past_the_timeout_is_told_from_a_failed_connection():
    """The error that makes the run say "--dist-timeout": gloo's and the store's waits past the
    timeout, not a connection refused (a process that is not there) nor another RuntimeError."""
    waited = engineering.waited_too_long
    assert waited(RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
                               "8000ms for recv operation to complete"))
    assert waited(RuntimeError("wait timeout after 8000ms, keys: /default_pg/0//cpu//rank_1"))
    assert not waited(RuntimeError("Gloo connectFullMesh failed with [pair.cc:152] timed out "
                                   "connecting: SO_ERROR: Connection refused"))
    assert not waited(RuntimeError("Connection closed by peer [127.0.0.1]:26526"))
    assert not waited(ValueError("Timed out waiting 5 ms"))
