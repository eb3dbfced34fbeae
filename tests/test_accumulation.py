"""Gradient accumulation (appendix A4): one update from several micro-batches equals one update from
their union, in float64 to 1e-12, on one process and under DistributedDataParallel on two gloo
processes; padding is never counted (each micro-batch is padded to its own length)."""
import datetime

import pytest
import torch
import torch.multiprocessing as mp

from transformer_lib.engineering import Accumulate, MicroBatches, micro_batch_weights
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.optimization import LabelSmoothingLoss
from transformer_lib.recipe import RecipeError, parse_args, recipe_from_dict
from transformer_lib.training import BatchLoader, collate, train, train_step

PAD, BOS, EOS, VOCAB = 0, 1, 2, 12
TOL = 1e-12


def pairs(n: int, seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        src = torch.randint(3, VOCAB, (int(torch.randint(1, 9, (1,), generator=g)),), generator=g)
        out.append((src.tolist(), [BOS, *src.flip(0).tolist(), EOS]))
    return out


def model64() -> Transformer:
    torch.manual_seed(0)
    cfg = TransformerConfig(VOCAB, VOCAB, d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=0.0,
                            max_len=16, pad_id=PAD)
    return Transformer(cfg).double()


def update(model, batch) -> tuple[float, list[torch.Tensor]]:
    """The loss and the gradient of one update (SGD at rate 0: the weights stay as they are)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    loss, _ = train_step(model, batch, LabelSmoothingLoss(VOCAB, 0.1, pad_id=PAD), optimizer)
    return float(loss), [p.grad.clone() for p in model.parameters()]


def close(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def test_micro_batches_update_as_their_union_in_float64():
    data = pairs(24, seed=1)
    model = model64()
    whole_loss, whole = update(model, collate(data, PAD))
    for cuts in ([12], [5, 11, 19], [1, 2, 3, 20]):         # uneven parts, each padded on its own
        parts = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
        micro = MicroBatches(collate(p, PAD) for p in parts)
        assert micro.n_tokens == collate(data, PAD).n_tokens     # padding counted in none
        loss, grads = update(model, micro)
        assert abs(loss - whole_loss) < TOL and close(grads, whole) < TOL, cuts
    # the weights are each part's share of the target tokens, summing to 1
    weights = micro_batch_weights(micro)
    assert sum(weights) == pytest.approx(1.0, abs=1e-15)
    assert weights == [b.n_tokens / micro.n_tokens for b in micro]
    assert micro_batch_weights((collate(data, PAD),)) == [1.0]


def test_accumulate_groups_batches_into_updates_and_resumes_mid_epoch():
    loader = BatchLoader.by_tokens(pairs(60, seed=2), 40, pad_id=PAD, seed=0)
    grouped = Accumulate(loader, 3)
    assert len(grouped) == len(loader) // 3 > 2
    grouped.set_epoch(1)
    loader.set_epoch(1)
    flat = list(loader)
    updates = list(grouped)
    assert [len(u) for u in updates] == [3] * len(grouped)      # the remainder is left out
    for i, u in enumerate(updates):
        assert all(torch.equal(b.src, flat[3 * i + j].src) for j, b in enumerate(u))
    later = list(grouped.iter_from(2))                          # resume after two updates
    assert [torch.equal(a[0].src, b[0].src) for a, b in zip(later, updates[2:])] == [True] * len(
        later) and len(later) == len(updates) - 2
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="accum_steps must be an int >= 1"):
            Accumulate(loader, bad)


def test_train_counts_updates_not_batches():
    loader = BatchLoader.by_tokens(pairs(60, seed=3), 40, pad_id=PAD, seed=0)
    model = model64().float()
    history = train(model, Accumulate(loader, 2), LabelSmoothingLoss(VOCAB, 0.1, pad_id=PAD),
                    torch.optim.Adam(model.parameters(), lr=1e-3), max_steps=4, log_every=2,
                    device="cpu", progress=False)
    assert [h["step"] for h in history] == [2, 4]
    loader.set_epoch(0)
    assert history[0]["tokens"] == sum(b.n_tokens for b in list(loader)[:4])


def test_the_recipe_and_the_command_line_take_accum_steps():
    recipe, _ = parse_args(["--preset", "cpu-tiny", "--accum-steps", "4"])
    assert recipe.accum_steps == 4
    with pytest.raises(RecipeError, match="accum_steps must be >= 1"):
        recipe_from_dict({"accum_steps": 0})


def _ddp_worker(rank, world, store, parts, out):
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        model = model64()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        mine = MicroBatches(collate(p, PAD) for p in parts[rank])
        loss, grads = update(ddp, mine)
        torch.save({"loss": loss, "grads": grads}, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_micro_batches_on_two_processes_update_as_their_union(tmp_path):
    """Rank 0 accumulates two micro-batches and rank 1 three, of different sizes: after DDP's
    all-reduce both hold the gradient of the union of all five."""
    data = pairs(30, seed=4)
    parts = [[data[0:4], data[4:13]], [data[13:15], data[15:24], data[24:30]]]
    mp.spawn(_ddp_worker, args=(2, str(tmp_path / "store"), parts, str(tmp_path)), nprocs=2,
             join=True)
    whole_loss, whole = update(model64(), collate(data, PAD))
    for rank in (0, 1):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        assert close(got["grads"], whole) < TOL, rank
    # each process's loss is its part of the union's mean; their sum over processes, divided by
    # the number of processes (as the log does), is the union's loss
    losses = [torch.load(tmp_path / f"rank{r}.pt")["loss"] for r in (0, 1)]
    assert abs(sum(losses) / 2 - whole_loss) < TOL
