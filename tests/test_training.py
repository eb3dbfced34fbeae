"""Chapter 13: padding, teacher forcing, token-count batches, the training loop, exact resumption."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.optimization import (
    LabelSmoothingLoss,
    WarmupSchedule,
    load_checkpoint,
    paper_adam,
    save_checkpoint,
)
from transformer_lib.training import (
    Batch,
    BatchLoader,
    TokenBatchSampler,
    autocast_dtype,
    collate,
    pad_sequences,
    pick_device,
    shift_targets,
    token_batches,
    train,
    train_step,
)

PAD, BOS, EOS = 0, 1, 2


# --- batching --------------------------------------------------------------------------------------
def test_pad_sequences_and_shift():
    t = pad_sequences([[1, 5, 6, 2], [1, 7, 2]], pad_id=0)
    assert t.tolist() == [[1, 5, 6, 2], [1, 7, 2, 0]]
    assert pad_sequences([[3]], pad_id=9, length=3).tolist() == [[3, 9, 9]]
    with pytest.raises(ValueError, match="shorter than the longest"):
        pad_sequences([[1, 2, 3]], length=2)
    tgt_in, tgt_out = shift_targets(t)
    assert tgt_in.tolist() == [[1, 5, 6], [1, 7, 2]] and tgt_out.tolist() == [[5, 6, 2], [7, 2, 0]]
    with pytest.raises(ValueError, match=r"tgt must have shape \(B, T\+1\)"):
        shift_targets(torch.ones(3, 1, dtype=torch.long))


def test_collate_counts_real_tokens():
    b = collate([([5, 6, 7], [BOS, 8, EOS]), ([5], [BOS, 8, 9, 10, EOS])], pad_id=PAD)
    assert b.src.tolist() == [[5, 6, 7], [5, 0, 0]]
    assert b.tgt_in.tolist() == [[1, 8, 2, 0], [1, 8, 9, 10]]
    assert b.tgt_out.tolist() == [[8, 2, 0, 0], [8, 9, 10, 2]]
    assert b.n_tokens == 6 and b.n_src_tokens == 4
    with pytest.raises(ValueError, match="at least one"):
        collate([])


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=300), max_tokens=st.integers(1, 400),
       seed=st.integers(0, 100), epoch=st.integers(0, 3))
def test_token_batches_contract(lengths, max_tokens, seed, epoch):
    batches = token_batches(lengths, max_tokens, seed=seed, epoch=epoch)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))   # each exactly once
    for b in batches:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= max_tokens   # eq. token-budget
    assert batches == token_batches(lengths, max_tokens, seed=seed, epoch=epoch)  # deterministic
    assert len(batches) == len(token_batches(lengths, max_tokens, seed=seed, epoch=epoch + 1))


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 30), min_size=1, max_size=200), max_tokens=st.integers(30, 200),
       replicas=st.integers(1, 4))
def test_token_batches_shards(lengths, max_tokens, replicas):
    all_batches = token_batches(lengths, max_tokens, seed=1)
    shards = [token_batches(lengths, max_tokens, seed=1, num_replicas=replicas, rank=r) for r in range(replicas)]
    assert len({len(s) for s in shards}) == 1                                    # equal step counts
    assert len(shards[0]) == len(all_batches) // replicas
    seen = [tuple(b) for s in shards for b in s]
    assert len(seen) == len(set(seen)) and set(seen) <= {tuple(b) for b in all_batches}


def test_bucketing_reduces_padding():
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 60, (2000,), generator=g).tolist()

    def efficiency(batches):
        return sum(lengths[i] for b in batches for i in b) / sum(len(b) * max(lengths[i] for i in b) for b in batches)

    bucketed = token_batches(lengths, 1000)
    perm = torch.randperm(2000, generator=g).tolist()
    n = 2000 // len(bucketed)
    random_batches = [perm[i:i + n] for i in range(0, 2000, n)]
    assert efficiency(bucketed) > 0.9 > 0.7 > efficiency(random_batches)


def test_token_batches_bad_arguments():
    with pytest.raises(ValueError, match="max_tokens must be >= 1"):
        token_batches([3, 4], 0)
    with pytest.raises(ValueError, match="rank must be in"):
        token_batches([3, 4], 10, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="positive ints"):
        token_batches([3, 0], 10)


def test_batch_loader_iter_from_and_no_global_rng():
    pairs = [([3] * n, [BOS] + [4] * n + [EOS]) for n in range(1, 30)]
    loader = BatchLoader(pairs, TokenBatchSampler([n + 2 for n in range(1, 30)], 40, seed=3), PAD)
    state = torch.get_rng_state()
    full = [b.tgt_out.tolist() for b in loader]
    assert [b.tgt_out.tolist() for b in loader.iter_from(2)] == full[2:]
    assert torch.equal(torch.get_rng_state(), state)
    loader.set_epoch(1)
    assert [b.tgt_out.tolist() for b in loader] != full and len(loader) == len(full)


# --- device and loop -------------------------------------------------------------------------------
def test_pick_device():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert pick_device().type == expected and pick_device("auto").type == expected
    assert pick_device("cpu") == torch.device("cpu")
    assert autocast_dtype(torch.device("cpu")) is None
    assert autocast_dtype(torch.device("cpu"), torch.bfloat16) is torch.bfloat16
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            pick_device("cuda")
    with pytest.raises(ValueError, match="amp must be"):
        autocast_dtype(torch.device("cpu"), "fp8")


def _copy_task(n=200, seed=0, vocab=10):
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        seq = torch.randint(3, vocab, (int(torch.randint(2, 8, (1,), generator=g)),), generator=g).tolist()
        pairs.append((seq, [BOS, *seq, EOS]))
    return pairs


def _setup(seed=0, vocab=10, dropout=0.1):
    torch.manual_seed(seed)
    cfg = TransformerConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=16, n_heads=2, n_layers=1,
                            d_ff=32, dropout=dropout, max_len=16, pad_id=PAD)
    model = Transformer(cfg)
    opt = paper_adam(model.parameters(), lr=0.1)
    sched = WarmupSchedule(opt, d_model=16, warmup_steps=10)
    return model, opt, sched


def test_train_step_and_loss_ignore_padding():
    model, opt, sched = _setup(dropout=0.0)
    batch = collate(_copy_task(8), PAD)
    loss_fn = LabelSmoothingLoss(10, 0.1, PAD)
    with torch.no_grad():
        expected = F.cross_entropy(model(batch.src, batch.tgt_in).transpose(1, 2), batch.tgt_out,
                                   ignore_index=PAD, label_smoothing=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    loss, grad_norm = train_step(model, batch, loss_fn, opt, sched, clip_grad_norm=1e-3)
    torch.testing.assert_close(loss, expected)
    assert grad_norm is not None and grad_norm > 1e-3
    assert sched.last_epoch == 1 and any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_train_reduces_loss_and_logs():
    pairs = _copy_task(256)
    loader = BatchLoader(pairs, TokenBatchSampler([len(t) for _, t in pairs], 200, seed=0), PAD)
    model, opt, sched = _setup()
    hist = train(model, loader, LabelSmoothingLoss(10, 0.0, PAD), opt, sched, max_steps=80, log_every=10,
                 device="cpu", progress=False, clip_grad_norm=5.0)
    assert [r["step"] for r in hist] == list(range(10, 81, 10))
    assert hist[-1]["loss"] < 0.8 * hist[0]["loss"]
    assert all(r["tokens_per_s"] > 0 and r["grad_norm"] is not None for r in hist)
    assert hist[-1]["lr"] == pytest.approx(0.1 * 16**-0.5 * 80**-0.5)


def test_resume_equals_uninterrupted(tmp_path):
    """Interrupt at step 13 (mid-epoch), resume from the checkpoint: the same losses, bit for bit."""
    pairs = _copy_task(120)
    sampler = TokenBatchSampler([len(t) for _, t in pairs], 150, seed=0)
    loader = BatchLoader(pairs, sampler, PAD)
    assert 13 % len(loader) != 0 and len(loader) < 30        # stops mid-epoch, crosses epochs
    loss_fn = LabelSmoothingLoss(10, 0.1, PAD)
    model, opt, sched = _setup()
    full = train(model, loader, loss_fn, opt, sched, max_steps=30, log_every=1, device="cpu", progress=False)

    model, opt, sched = _setup()

    def checkpoint(step):
        if step == 13:
            save_checkpoint(tmp_path / "c.pt", model, opt, sched, step=step)

    first = train(model, loader, loss_fn, opt, sched, max_steps=13, log_every=1, device="cpu", progress=False,
                  callback=checkpoint)
    torch.rand(100)                               # anything the interrupted process did afterwards
    model, opt, sched = _setup(seed=7)
    step = load_checkpoint(tmp_path / "c.pt", model, opt, sched)["step"]
    rest = train(model, loader, loss_fn, opt, sched, max_steps=30, start_step=step, log_every=1, device="cpu",
                 progress=False)
    assert [r["loss"] for r in first + rest] == [r["loss"] for r in full]
    assert [r["lr"] for r in first + rest] == [r["lr"] for r in full]


def test_train_stops_on_non_finite_loss():
    pairs = _copy_task(32)
    loader = BatchLoader(pairs, TokenBatchSampler([len(t) for _, t in pairs], 100), PAD)
    model, opt, _ = _setup()

    def nan_loss(logits, target):
        return logits.sum() * float("nan")

    with pytest.raises(FloatingPointError, match="loss became nan at step 1"):
        train(model, loader, nan_loss, opt, max_steps=3, log_every=1, device="cpu", progress=False)


def test_batch_to_keeps_counts():
    b = collate(_copy_task(3), PAD)
    moved = b.to("cpu")
    assert isinstance(moved, Batch) and moved.n_tokens == b.n_tokens and torch.equal(moved.src, b.src)
