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
@given(task=st.sampled_from(["copy", "reverse", "sort"]), n=st.integers(1, 50), n_symbols=st.integers(1, 20),
       lengths=st.tuples(st.integers(1, 8), st.integers(0, 8)), seed=st.integers(0, 1000))
def test_pairs_follow_the_task(task, n, n_symbols, lengths, seed):
    lo, hi = lengths[0], lengths[0] + lengths[1]
    pairs = make_toy_pairs(task, n, n_symbols=n_symbols, min_len=lo, max_len=hi, seed=seed)
    assert len(pairs) == n and pairs == make_toy_pairs(task, n, n_symbols=n_symbols, min_len=lo, max_len=hi, seed=seed)
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
    with pytest.raises(ValueError, match="could not draw enough"):
        make_toy_pairs("copy", 5, n_symbols=2, min_len=1, max_len=1, exclude=every)


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
