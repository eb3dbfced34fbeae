"""Chapter 16: the synthetic copy / reverse / sort data and the exact-match metric."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.toy import (
    BOS,
    EOS,
    FIRST_SYMBOL,
    PAD,
    exact_match,
    make_toy_pairs,
    toy_split,
    toy_vocab_size,
)


@settings(max_examples=25, deadline=None)
@given(task=st.sampled_from(["copy", "reverse", "sort"]), n=st.integers(1, 50),
       n_symbols=st.integers(1, 20),
       lengths=st.tuples(st.integers(1, 8), st.integers(0, 8)), seed=st.integers(0, 1000))
def test_pairs_follow_the_task(task, n, n_symbols, lengths, seed):
    lo, hi = lengths[0], lengths[0] + lengths[1]
    pairs = make_toy_pairs(task, n, n_symbols=n_symbols, min_len=lo, max_len=hi, seed=seed)
    assert len(pairs) == n and pairs == make_toy_pairs(task, n, n_symbols=n_symbols, min_len=lo,
                                                       max_len=hi, seed=seed)
    expected = {"copy": lambda x: x, "reverse": lambda x: x[::-1], "sort": sorted}[task]
    for src, tgt in pairs:
        xs = src[:-1]
        assert src[-1] == EOS and lo <= len(xs) <= hi
        assert all(FIRST_SYMBOL <= s < toy_vocab_size(n_symbols) for s in xs)
        assert tgt == [BOS, *expected(xs), EOS]


def test_split_is_disjoint():
    train, test = toy_split("reverse", 3000, 300, n_symbols=3, min_len=1, max_len=6)
    assert len(train) == 3000 and len(test) == 300
    assert not {tuple(s) for s, _ in train} & {tuple(s) for s, _ in test}


def test_exclude_impossible_raises():
    every = {(a,) for a in range(FIRST_SYMBOL, FIRST_SYMBOL + 2)}
    with pytest.raises(ValueError, match="could not draw 5 sequences outside `exclude`"):
        make_toy_pairs("copy", 5, n_symbols=2, min_len=1, max_len=1, exclude=every)
    with pytest.raises(ValueError, match=r"could not draw 3 sequences .*unique=True"):
        make_toy_pairs("copy", 3, n_symbols=2, min_len=1, max_len=1, unique=True)   # only 2 exist


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 60), seed=st.integers(0, 1000))
def test_unique_draws_distinct_sequences_and_leaves_exclude_alone(n, seed):
    exclude = {(FIRST_SYMBOL,), (FIRST_SYMBOL + 1, FIRST_SYMBOL)}
    pairs = make_toy_pairs("reverse", n, n_symbols=3, min_len=1, max_len=4, seed=seed,
                           exclude=exclude, unique=True)
    drawn = [tuple(src[:-1]) for src, _ in pairs]
    assert len(set(drawn)) == n and not set(drawn) & exclude
    # the caller's set is not modified
    assert exclude == {(FIRST_SYMBOL,), (FIRST_SYMBOL + 1, FIRST_SYMBOL)}
    # unique=False may repeat: with 3 symbols and length 1, 10 draws must repeat
    assert (len({tuple(s)
                 for s, _ in make_toy_pairs("copy", 10, n_symbols=3, min_len=1, max_len=1)}) <= 3)


def test_bad_arguments():
    with pytest.raises(ValueError, match="task must be one of"):
        make_toy_pairs("rotate", 3)
    with pytest.raises(ValueError, match="min_len <= max_len"):
        make_toy_pairs("copy", 3, min_len=5, max_len=2)


def test_exact_match():
    pred = torch.tensor([[BOS, 5, 4, EOS, PAD], [BOS, 4, 4, EOS, PAD], [BOS, 5, 4, 3, EOS]])
    target = [[BOS, 5, 4, EOS], [BOS, 4, 5, EOS], [BOS, 5, 4, 3, EOS]]
    assert exact_match(pred, target) == pytest.approx(2 / 3)
    assert exact_match(pred[:1], [[BOS, 5, 4, 3, EOS]]) == 0.0          # a prefix is not a match
    with pytest.raises(ValueError, match="pred has 3 rows but there are 1 targets"):
        exact_match(pred, target[:1])
    with pytest.raises(ValueError, match=r"pred must be a \(B, T\) tensor"):
        exact_match(pred[0], target[:1])


def test_exact_match_drops_only_trailing_padding():
    """A pad written in the middle of a row is a wrong answer, not something to skip."""
    target = [[BOS, 5, 4, EOS]]
    assert exact_match(torch.tensor([[BOS, 5, 4, EOS, PAD, PAD]]), target) == 1.0
    assert exact_match(torch.tensor([[BOS, 5, PAD, 4, EOS]]), target) == 0.0
    assert exact_match(torch.tensor([[BOS, 5, 4]]), target) == 0.0            # no eos: not finished


def test_the_pipeline_learns_to_reverse():
    """Chapter 16's claim at small scale: model + loss + schedule + loop + greedy decoding learn the
    task end to end, on held-out sequences (a bug in masks, shifting or decoding keeps accuracy near
    0)."""
    from transformer_lib.decoding import greedy_decode
    from transformer_lib.model import Transformer, TransformerConfig
    from transformer_lib.optimization import LabelSmoothingLoss, WarmupSchedule, paper_adam
    from transformer_lib.training import BatchLoader, TokenBatchSampler, pad_sequences, train

    torch.manual_seed(0)
    test = make_toy_pairs("reverse", 100, n_symbols=5, min_len=3, max_len=5, seed=1, unique=True)
    pairs = make_toy_pairs("reverse", 4000, n_symbols=5, min_len=1, max_len=5, seed=0,
                           exclude={tuple(s[:-1]) for s, _ in test})
    V = toy_vocab_size(5)
    model = Transformer(TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=32, n_heads=2,
                                          n_layers=2, d_ff=64, dropout=0.0, max_len=8, pad_id=PAD))
    optimizer = paper_adam(model.parameters(), lr=0.08)           # peak 0.08 / sqrt(32 * 50) = 2e-3
    loader = BatchLoader(pairs,
                         TokenBatchSampler([len(t) for _, t in pairs], max_tokens=500, seed=0), PAD)
    train(model, loader, LabelSmoothingLoss(V, smoothing=0.0, pad_id=PAD), optimizer,
          WarmupSchedule(optimizer, d_model=32, warmup_steps=50), max_steps=400, clip_grad_norm=1.0,
          device="cpu", progress=False)
    pred = greedy_decode(model, pad_sequences([s for s, _ in test], PAD), 7, BOS, EOS)
    # The claim, not one trajectory: a working pipeline learns the task, a broken one (masks,
    # shifting, decoding) stays near 0. Seeds 0-4 x kernel sets DEFAULT/AVX2/AVX512 x 1 and 2
    # threads scored 0.73 to 1.0 (results/kernel-audit-cpu.json; seed 0 with AVX2 kernels on one
    # thread: 0.73), so the bar sits well below the lowest of those 30 runs.
    assert exact_match(pred, [t for _, t in test]) >= 0.5
