"""Chapter 13: padding, teacher forcing, token-count batches, the training loop, exact
resumption."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib import engineering
from transformer_lib.engineering import autocast_dtype, pick_device
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
    TrainingClock,
    collate,
    pad_sequences,
    shift_targets,
    token_batches,
    train,
    train_step,
)

PAD, BOS, EOS = 0, 1, 2


# --- batching -------------------------------------------------------------------------------------
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
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=300),
       max_tokens=st.integers(1, 400), seed=st.integers(0, 100), epoch=st.integers(0, 3))
def test_token_batches_contract(lengths, max_tokens, seed, epoch):
    batches = token_batches(lengths, max_tokens, seed=seed, epoch=epoch)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))   # each exactly once
    for b in batches:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= max_tokens   # eq. token-budget
    assert batches == token_batches(lengths, max_tokens, seed=seed, epoch=epoch)  # deterministic
    assert len(batches) == len(token_batches(lengths, max_tokens, seed=seed, epoch=epoch + 1))


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 30), min_size=1, max_size=200),
       max_tokens=st.integers(30, 200), replicas=st.integers(1, 4))
def test_token_batches_shards(lengths, max_tokens, replicas):
    all_batches = token_batches(lengths, max_tokens, seed=1)
    shards = [token_batches(lengths, max_tokens, seed=1, num_replicas=replicas, rank=r)
              for r in range(replicas)]
    assert len({len(s) for s in shards}) == 1                                    # equal step counts
    assert len(shards[0]) == len(all_batches) // replicas
    seen = [tuple(b) for s in shards for b in s]
    assert len(seen) == len(set(seen)) and set(seen) <= {tuple(b) for b in all_batches}


def test_bucketing_reduces_padding():
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 60, (2000,), generator=g).tolist()

    def efficiency(batches):
        return sum(lengths[i] for b in batches for i in b) / sum(len(b) * max(lengths[i] for i in b)
                                                                 for b in batches)

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


def test_a_sentence_longer_than_max_tokens_is_the_stated_exception():
    """A sentence longer than max_tokens gets a batch of its own (n_b = 1): the one exception to
    eq. token-budget, stated where the bound is promised; every other batch keeps the bound, and
    the loader collates the long one (fixed shapes too) as one row."""
    lengths = [3, 50, 4, 5, 21]
    batches = token_batches(lengths, 20, shuffle=False)
    assert [1] in batches and [4] in batches
    assert all(len(b) * max(lengths[i] for i in b) <= 20 for b in batches if b not in ([1], [4]))
    for doc in (token_batches.__doc__, BatchLoader.by_tokens.__doc__):
        assert "a sentence longer than max_tokens gets a batch of its own" in " ".join(doc.split())
    pairs = [([3] * (n - 1) + [EOS], [BOS] + [4] * (n - 1) + [EOS]) for n in lengths]  # n each
    for fixed in (False, True):
        shapes = {tuple(b.src.shape) for b in BatchLoader.by_tokens(pairs, 20, fixed_shapes=fixed,
                                                                      shuffle=False)}
        assert (1, 50) in shapes and (1, 21) in shapes


def test_batch_loader_iter_from_and_no_global_rng():
    pairs = [([3] * n, [BOS] + [4] * n + [EOS]) for n in range(1, 30)]
    loader = BatchLoader(pairs, TokenBatchSampler([n + 2 for n in range(1, 30)], 40, seed=3), PAD)
    state = torch.get_rng_state()
    full = [b.tgt_out.tolist() for b in loader]
    assert [b.tgt_out.tolist() for b in loader.iter_from(2)] == full[2:]
    assert torch.equal(torch.get_rng_state(), state)
    loader.set_epoch(1)
    assert [b.tgt_out.tolist() for b in loader] != full and len(loader) == len(full)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 25), st.integers(1, 25)), min_size=1, max_size=40),
       st.integers(8, 120), st.integers(1, 8), st.booleans(), st.integers(0, 3))
def test_batch_loader_gathers_what_collate_pads(lengths, max_tokens, bucket, fixed, seed):
    """BatchLoader gathers its batches from tables of every pair padded once; each is what
    `collate` pads from the batch's pairs: the same tensors, counts and filler rows."""
    g = torch.Generator().manual_seed(seed)
    pairs = [(torch.randint(3, 9, (a,), generator=g).tolist() + [EOS],
              [BOS] + torch.randint(3, 9, (b,), generator=g).tolist() + [EOS])
             for a, b in lengths]
    loader = BatchLoader.by_tokens(pairs, max_tokens, bucket=bucket, fixed_shapes=fixed, seed=seed)
    for idx in loader.batches():
        got = loader.collate(idx)
        if fixed:
            length = max(loader.sampler.lengths[i] for i in idx)
            want = collate([pairs[i] for i in idx], PAD, src_len=length, tgt_len=length + 1,
                           rows=max(max_tokens // length, len(idx)))
        else:
            want = collate([pairs[i] for i in idx], PAD, bucket=bucket)
        for name in ("src", "tgt_in", "tgt_out"):
            assert torch.equal(getattr(got, name), getattr(want, name)), name
            assert getattr(got, name).dtype == torch.long
        assert (got.n_tokens, got.n_src_tokens) == (want.n_tokens, want.n_src_tokens)


def test_train_step_sets_training_mode_after_an_evaluation():
    """train_step puts a model that was left in eval mode back in training mode (dropout on); one
    already training is not walked again."""
    model, opt, sched = _setup(dropout=0.1)
    batch = collate(_copy_task(4), PAD)
    loss_fn = LabelSmoothingLoss(10, 0.0, pad_id=PAD)
    model.eval()
    train_step(model, batch, loss_fn, opt)
    assert model.training and all(m.training for m in model.modules())
    walked = []
    model.train = lambda mode=True: walked.append(mode)
    train_step(model, batch, loss_fn, opt)
    assert walked == []


# --- device and loop ------------------------------------------------------------------------------
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
        seq = torch.randint(3, vocab, (int(torch.randint(2, 8, (1,), generator=g)),),
                            generator=g).tolist()
        pairs.append((seq, [BOS, *seq, EOS]))
    return pairs


def _setup(seed=0, vocab=10, dropout=0.1):
    torch.manual_seed(seed)
    cfg = TransformerConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=16, n_heads=2,
                            n_layers=1, d_ff=32, dropout=dropout, max_len=16, pad_id=PAD)
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
    assert sched.last_epoch == 1 and any(not torch.equal(a, b)
                                         for a, b in zip(before, model.parameters()))


def test_train_reduces_loss_and_logs():
    pairs = _copy_task(256)
    loader = BatchLoader(pairs, TokenBatchSampler([len(t) for _, t in pairs], 200, seed=0), PAD)
    model, opt, sched = _setup()
    hist = train(model, loader, LabelSmoothingLoss(10, 0.0, PAD), opt, sched, max_steps=80,
                 log_every=10, device="cpu", progress=False, clip_grad_norm=5.0)
    assert [r["step"] for r in hist] == list(range(10, 81, 10))
    assert hist[-1]["loss"] < 0.8 * hist[0]["loss"]
    assert all(r["tokens_per_s"] > 0 and r["grad_norm"] is not None for r in hist)
    assert hist[-1]["lr"] == pytest.approx(0.1 * 16**-0.5 * 80**-0.5)


def test_resume_equals_uninterrupted(tmp_path):
    """Interrupt at step 13 (mid-epoch), resume from the checkpoint: the same losses, bit for
    bit."""
    pairs = _copy_task(120)
    sampler = TokenBatchSampler([len(t) for _, t in pairs], 150, seed=0)
    loader = BatchLoader(pairs, sampler, PAD)
    assert 13 % len(loader) != 0 and len(loader) < 30        # stops mid-epoch, crosses epochs
    loss_fn = LabelSmoothingLoss(10, 0.1, PAD)
    model, opt, sched = _setup()
    full = train(model, loader, loss_fn, opt, sched, max_steps=30, log_every=1, device="cpu",
                 progress=False)

    model, opt, sched = _setup()

    def checkpoint(step):
        if step == 13:
            save_checkpoint(tmp_path / "c.pt", model, opt, sched, step=step)

    first = train(model, loader, loss_fn, opt, sched, max_steps=13, log_every=1, device="cpu",
                  progress=False, callback=checkpoint)
    torch.rand(100)                               # anything the interrupted process did afterwards
    model, opt, sched = _setup(seed=7)
    step = load_checkpoint(tmp_path / "c.pt", model, opt, sched)["step"]
    rest = train(model, loader, loss_fn, opt, sched, max_steps=30, start_step=step, log_every=1,
                 device="cpu", progress=False)
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
    assert isinstance(moved, Batch) and moved.n_tokens == b.n_tokens and torch.equal(moved.src,
                                                                                     b.src)


def test_padding_does_not_change_the_loss():
    """Eq. batch-loss: extra padding columns change neither what the model computes nor the mean."""
    model, _, _ = _setup(dropout=0.0)
    model.eval()
    short = collate(_copy_task(5), PAD)
    loss_fn = LabelSmoothingLoss(10, 0.1, PAD)
    with torch.no_grad():
        a = loss_fn(model(short.src, short.tgt_in), short.tgt_out)
        b = loss_fn(model(F.pad(short.src, (0, 4)), F.pad(short.tgt_in, (0, 3))),
                    F.pad(short.tgt_out, (0, 3)))
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


class _FakeTime:
    """Stands in for time.perf_counter: advances only when told to."""

    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_training_clock_pauses_and_stops(monkeypatch):
    fake = _FakeTime()
    monkeypatch.setattr(engineering.time, "perf_counter", fake)
    clock = TrainingClock("cpu", start_s=2.0)
    fake.t += 3.0
    assert clock() == 5.0
    with clock.paused() as reading:
        fake.t += 50.0                                  # evaluation: not training time
        assert reading == clock() == 5.0
        with clock.paused():                            # nested pauses are harmless
            fake.t += 1.0
    fake.t += 1.0
    assert clock() == 6.0
    assert clock.stop() == 6.0
    fake.t += 10.0
    assert clock() == 6.0


def _one_second_updates(fake):
    """The copy task's loader, model/optimizer/schedule, and a loss that advances `fake` by 1 s."""
    pairs = _copy_task(64)
    loader = BatchLoader(pairs, TokenBatchSampler([len(t) for _, t in pairs], 100), PAD)
    base_loss = LabelSmoothingLoss(10, 0.0, PAD)

    def slow_loss(logits, target):
        fake.t += 1.0
        return base_loss(logits, target)
    return loader, _setup(), slow_loss


def test_time_budget_excludes_paused_callbacks(monkeypatch):
    """Each update 'takes' 1 s, each callback 100 s inside clock.paused(): a 5.5 s budget stops at
    step 6."""
    fake = _FakeTime()
    monkeypatch.setattr(engineering.time, "perf_counter", fake)
    loader, (model, opt, sched), slow_loss = _one_second_updates(fake)

    clock = TrainingClock("cpu")
    steps = []

    def evaluate(step):
        steps.append(step)
        with clock.paused():
            fake.t += 100.0

    hist = train(model, loader, slow_loss, opt, sched, max_steps=None, time_budget_s=5.5,
                 log_every=4, device="cpu", progress=False, callback=evaluate, clock=clock)
    assert steps == [1, 2, 3, 4, 5, 6]                  # stopped by the budget, not by a step limit
    assert [r["step"] for r in hist] == [4, 6]          # a record at every log step and at the last
    assert [r["elapsed_s"] for r in hist] == [4.0, 6.0]
    assert hist[1]["tokens_per_s"] == pytest.approx(hist[1]["tokens"] / 2.0)
    # without the pause, the first callback alone would exhaust the budget
    model, opt, sched = _setup()
    steps.clear()
    train(model, loader, slow_loss, opt, sched, max_steps=None, time_budget_s=5.5, log_every=4,
          device="cpu", progress=False,
          callback=lambda step: (steps.append(step), setattr(fake, "t", fake.t + 100.0)))
    assert steps == [1, 2]


def test_train_hooks_prefetch_and_history():
    pairs = _copy_task(64)
    loader = BatchLoader(pairs, TokenBatchSampler([len(t) for _, t in pairs], 100), PAD)
    model, opt, sched = _setup()
    seen = []

    def prefetch(batches, device):
        for b in batches:
            seen.append(b.n_tokens)
            yield b.to(device)

    earlier = [{"step": 0, "note": "from a checkpoint"}]
    hist = train(model, loader, LabelSmoothingLoss(10, 0.0, PAD), opt, sched,
                 max_steps=len(loader) + 2, log_every=3, device="cpu", progress=False,
                 prefetch=prefetch, history=earlier)
    assert hist is earlier and hist[0]["note"] == "from a checkpoint"
    assert len(seen) == len(loader) + 2         # every batch went through the hook, over two epochs
    assert sum(r["tokens"] for r in hist[1:]) == sum(seen)
    assert hist[-1]["step"] == len(loader) + 2 and hist[-1]["epoch"] == 1


def test_train_bad_arguments():
    pairs = _copy_task(8)
    loader = BatchLoader(pairs, TokenBatchSampler([len(t) for _, t in pairs], 100), PAD)
    model, opt, _ = _setup()
    with pytest.raises(ValueError, match="give max_steps or time_budget_s"):
        train(model, loader, LabelSmoothingLoss(10, 0.0, PAD), opt, max_steps=None, device="cpu",
              progress=False)
    with pytest.raises(ValueError, match="log_every must be >= 1, got 0"):
        train(model, loader, LabelSmoothingLoss(10, 0.0, PAD), opt, max_steps=2, log_every=0,
              device="cpu", progress=False)


def _budget_worker(rank, world_size, store, out):
    """One of two gloo processes: its clock runs 10x faster on rank 0, which alone runs out of
    time."""
    import datetime

    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size,
                            # a process left waiting fails, not hangs
                            timeout=datetime.timedelta(seconds=60))
    try:
        pairs = _copy_task(64)
        sampler = TokenBatchSampler([len(t) for _, t in pairs], 100, num_replicas=world_size,
                                    rank=rank)
        loader = BatchLoader(pairs, sampler, PAD)
        model, opt, sched = _setup()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        calls = [0]

        def clock():                      # read at the start and at every log record
            calls[0] += 1
            return calls[0] * (1.0 if rank == 0 else 0.1)

        hist = train(ddp, loader, LabelSmoothingLoss(10, 0.0, PAD), opt, sched, max_steps=50,
                     time_budget_s=1.5, log_every=2, device="cpu", progress=False, clock=clock)
        torch.save({"hist": hist, "weights": [p.detach() for p in model.parameters()]},
                   f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_data_parallel_processes_log_one_loss_and_stop_together(tmp_path):
    """Under torch.distributed, train sums the log over processes and stops all of them at one step,
    even when only one process's clock has passed the budget (otherwise the other would hang)."""
    import torch.multiprocessing as mp

    mp.spawn(_budget_worker, args=(2, str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    assert [h["step"] for h in r0["hist"]] == [h["step"] for h in r1["hist"]] == [2]
    assert (r0["hist"][0]["loss"] == r1["hist"][0]["loss"] and r0["hist"][0]["tokens"]
            == r1["hist"][0]["tokens"])
    assert all(torch.equal(a, b) for a, b in zip(r0["weights"], r1["weights"]))


class _PinnableBatch:
    """Stands in for a Batch on a machine without CUDA: pin_memory and to() return the batch
    itself."""

    def pin_memory(self):
        return self

    def to(self, device, non_blocking=False):
        return self


def _prefetch_threads():
    import threading
    return [t for t in threading.enumerate() if t.name == "transformer_lib-prefetch"]


def test_prefetch_thread_stops_when_the_consumer_stops_after_the_producer_finished():
    """The producer has put every batch (the queue is full) when the consumer stops early: the
    thread must not wait forever to hand over its end marker."""
    import time
    import types
    fake_cuda = types.SimpleNamespace(type="cuda")          # takes the background-thread path on
                                                            # any machine
    batches = engineering.prefetch(iter([_PinnableBatch(), _PinnableBatch()]), fake_cuda, depth=1)
    next(batches)
    time.sleep(0.5)     # room for the thread to queue the last batch and wait to add the end marker
    threads = _prefetch_threads()
    batches.close()                                         # the consumer stops early
    for t in threads:
        t.join(timeout=5.0)
    assert threads and not [t for t in threads
                            if t.is_alive()], "the prefetch thread is still blocked"


def test_background_reraises_the_producers_error_and_stops_early():
    def items():
        yield 1
        raise RuntimeError("bad batch")

    got = engineering.background(items(), depth=1)
    assert next(got) == 1
    with pytest.raises(RuntimeError, match="bad batch"):
        next(got)
    squares = engineering.background(range(100), depth=2, prepare=lambda x: x * x)
    assert [next(squares) for _ in range(3)] == [0, 1, 4]
    squares.close()
    for t in _prefetch_threads():
        t.join(timeout=5.0)
    assert not [t for t in _prefetch_threads() if t.is_alive()]


@pytest.mark.parametrize("kwargs, message", [
    ({"max_steps": None, "time_budget_s": float("nan")},
     "time_budget_s must be a finite number >= 0 or None, got nan"),
    ({"max_steps": 2, "time_budget_s": float("inf")},
     "time_budget_s must be a finite number >= 0 or None, got inf"),
    ({"max_steps": 2, "time_budget_s": -1.0}, "time_budget_s must be a finite number >= 0"),
    ({"max_steps": 2, "clip_grad_norm": float("nan")},
     "clip_grad_norm must be a finite number > 0 or None, got nan"),
    ({"max_steps": 2, "clip_grad_norm": 0.0}, "clip_grad_norm must be a finite number > 0"),
])
def test_train_numbers_that_are_not_numbers(kwargs, message):
    """A NaN budget compares false with every clock reading: without the check, training never
    stops."""
    pairs = _copy_task(8)
    loader = BatchLoader(pairs, TokenBatchSampler([len(t) for _, t in pairs], 100), PAD)
    model, opt, _ = _setup()
    with pytest.raises(ValueError, match=message):
        train(model, loader, LabelSmoothingLoss(10, 0.0, PAD), opt, device="cpu", progress=False,
              **kwargs)


class _RecordingBar:
    made = []

    def __init__(self, **kwargs):
        self.kwargs, self.n, self.desc, self.closed = kwargs, kwargs.get("initial", 0), "", False
        _RecordingBar.made.append(self)

    def update(self, k):
        self.n += k

    def set_description_str(self, desc, refresh=True):
        self.desc = desc

    def set_postfix(self, **kwargs):
        self.postfix = kwargs

    def close(self):
        self.closed = True


@pytest.mark.parametrize("budget", [None, 5.5])
def test_the_progress_bar_counts_seconds_against_a_time_budget(monkeypatch, budget):
    """With a budget the bar's total is the budget in seconds (no step total with a meaningless
    ETA)."""
    import transformer_lib.training as training_module
    fake = _FakeTime()
    monkeypatch.setattr(engineering.time, "perf_counter", fake)
    monkeypatch.setattr(training_module, "tqdm", _RecordingBar)
    _RecordingBar.made.clear()
    loader, (model, opt, sched), slow_loss = _one_second_updates(fake)

    train(model, loader, slow_loss, opt, sched, max_steps=500, time_budget_s=budget, log_every=4,
          device="cpu", progress=True)
    bar = _RecordingBar.made[-1]
    assert bar.closed
    if budget is None:
        assert bar.kwargs["total"] == 500 and bar.kwargs["unit"] == "step" and bar.n == 500
    else:
        assert (bar.kwargs["total"] == 5.5 and bar.kwargs["unit"] == "s"
                and "s of training" in bar.kwargs["bar_format"])
        assert bar.n == 5.5 and bar.desc == "step 6"       # 6 updates of 1 s: stopped by the budget


def test_write_json_that_fails_leaves_no_temporary_file(tmp_path, monkeypatch):
    from pathlib import Path
    engineering.write_json(tmp_path / "r.json", {"a": 1})

    def disk_full(self, text, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", disk_full)
    with pytest.raises(OSError, match="No space left"):
        engineering.write_json(tmp_path / "r.json", {"a": 2})
    monkeypatch.undo()
    assert ([p.name for p in tmp_path.iterdir()] == ["r.json"] and (tmp_path / "r.json").read_text()
            == '{\n  "a": 1\n}\n')


def test_undo_on_error_removes_only_what_the_block_created(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "keep.json").write_text("{}")
    for run_dir in (tmp_path / "a" / "b", tmp_path / "old"):
        with pytest.raises(KeyError):
            with engineering.undo_on_error(run_dir, ["keep.json", "tokenizer.json"]):
                run_dir.mkdir(parents=True, exist_ok=True)
                (run_dir / "tokenizer.json").write_text("{}")
                (run_dir / "keep.json").write_text("{}")
                raise KeyError("late failure")
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["old",
                                                                                 "old/keep.json"]
    with engineering.undo_on_error(tmp_path / "fine", ["x"]):          # no error: nothing is undone
        (tmp_path / "fine").mkdir()
    assert (tmp_path / "fine").is_dir()


def test_nonfinite_weights_names_them():
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2))
    assert engineering.nonfinite_weights(net) == []
    with torch.no_grad():
        net[0].bias[1] = float("nan")
        net[1].weight[0] = float("inf")
    assert engineering.nonfinite_weights(net) == ["0.bias", "1.weight"]
