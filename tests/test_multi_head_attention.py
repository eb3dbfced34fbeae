"""Chapter 05: multi-head attention. Variants that must agree (LLMs-from-scratch pattern): the 3h
separate matrices, the fused module's explicit path, its fast path, nn.MultiheadAttention, the
column form of chapter 05's derivation, and the KV cache."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from layer_helpers import torch_mha
from torch.utils.flop_counter import FlopCounterMode

from transformer_lib.masking import make_causal_mask, make_padding_mask
from transformer_lib.multi_head_attention import (
    MultiHeadAttention,
    NaiveMultiHeadAttention,
    attention_matmul_flops,
    count_parameters,
    multi_head_attention_columns,
    naive_from_fused,
    per_head_weights,
)

configs = st.tuples(st.sampled_from([(8, 1), (8, 2), (12, 3), (16, 4)]), st.integers(1, 3),
                    st.integers(1, 7), st.integers(1, 7))   # (d_model, h), B, L_q, L_k


def _mha(d_model, h, seed, bias=True):
    torch.manual_seed(seed)
    m = MultiHeadAttention(d_model, h, bias=bias).double().eval()
    if bias:   # PyTorch initialises the biases to 0; random biases make the tests stronger
        with torch.no_grad():
            m.in_proj.bias.normal_()
            m.out_proj.bias.normal_()
    return m


def _masks(kind, B, L_q, L_k, g):
    lengths = torch.randint(1, L_k + 1, (B,), generator=g)
    # (B, 1, 1, L_k), >= 1 real key
    pad = make_padding_mask((torch.arange(L_k) < lengths[:, None]).long(), 0)
    if kind == "none":
        return None
    if kind == "padding":
        return pad
    # queries are the last L_q positions of L_k; with more queries than keys, query i sees keys 0..i
    causal = make_causal_mask(L_q, offset=L_k - L_q) if L_k >= L_q else make_causal_mask(L_q)[:,
                                                                                              :L_k]
    if kind == "causal":
        return causal
    full = torch.rand(B, 1, L_q, L_k, generator=g) < 0.5                # arbitrary, some rows empty
    return full


def _run(m, q, kv, mask, need_weights):
    m.need_weights = need_weights
    out = m(q, kv, kv, mask)
    m.need_weights = False
    return out


@settings(max_examples=25, deadline=None)
@given(c=configs, seed=st.integers(0, 2**16),
       kind=st.sampled_from(["none", "padding", "causal", "random"]), self_attn=st.booleans())
def test_fast_explicit_naive_agree(c, seed, kind, self_attn):
    (d_model, h), B, L_q, L_k = c
    if self_attn:
        L_k = L_q
    g = torch.Generator().manual_seed(seed)
    m = _mha(d_model, h, seed)
    x = torch.randn(B, L_q, d_model, generator=g, dtype=torch.float64)
    kv = x if self_attn else torch.randn(B, L_k, d_model, generator=g, dtype=torch.float64)
    mask = _masks(kind, B, L_q, L_k, g)
    fast, explicit = _run(m, x, kv, mask, False), _run(m, x, kv, mask, True)
    naive = naive_from_fused(m)(x, kv, kv, mask)
    assert fast.shape == (B, L_q, d_model) and torch.isfinite(fast).all()
    torch.testing.assert_close(fast, explicit, atol=1e-10, rtol=0)
    torch.testing.assert_close(naive, explicit, atol=1e-10, rtol=0)
    assert m.attn_weights.shape == (B, h, L_q, L_k) and not m.attn_weights.requires_grad


def test_fast_and_explicit_gradients_agree_with_empty_rows():
    g = torch.Generator().manual_seed(0)
    m = _mha(8, 2, 0)
    mask = torch.ones(2, 1, 4, 5, dtype=torch.bool)
    mask[0, 0, 1] = False                                   # a fully masked row
    mask[1, 0, :, 3:] = False
    grads = []
    for need in (False, True):
        x = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64,
                        requires_grad=True)
        mem = torch.randn(2, 5, 8, generator=g.manual_seed(2), dtype=torch.float64,
                          requires_grad=True)
        m.zero_grad()
        out = _run(m, x, mem, mask, need)
        # empty row: attention output 0, then W_O and bias
        assert torch.equal(out[0, 1], m.out_proj.bias)
        out.square().sum().backward()
        grads.append([x.grad, mem.grad] + [p.grad.clone() for p in m.parameters()])
    for a, b in zip(*grads):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


@settings(max_examples=25, deadline=None)
@given(c=configs, seed=st.integers(0, 2**16), kind=st.sampled_from(["none", "padding", "causal"]),
       self_attn=st.booleans(), bias=st.booleans())
def test_matches_nn_multihead_attention_float64(c, seed, kind, self_attn, bias):
    (d_model, h), B, L_q, L_k = c
    if self_attn:
        L_k = L_q
    g = torch.Generator().manual_seed(seed)
    ref = torch_mha(d_model, h, bias, seed)
    m = MultiHeadAttention(d_model, h, bias=bias).double().eval()
    with torch.no_grad():
        m.in_proj.weight.copy_(ref.in_proj_weight)
        m.out_proj.weight.copy_(ref.out_proj.weight)
        if bias:
            m.in_proj.bias.copy_(ref.in_proj_bias)
            m.out_proj.bias.copy_(ref.out_proj.bias)
    x = torch.randn(B, L_q, d_model, generator=g, dtype=torch.float64)
    kv = x if self_attn else torch.randn(B, L_k, d_model, generator=g, dtype=torch.float64)
    mask = _masks(kind, B, L_q, L_k, g)
    kwargs = {}
    if kind == "padding":
        kwargs["key_padding_mask"] = ~mask[:, 0, 0]
    elif kind == "causal":
        kwargs["attn_mask"] = ~mask
    with torch.no_grad():
        theirs, _ = ref(x, kv, kv, need_weights=False, **kwargs)
        for need in (False, True):
            # issue: 1e-6
            torch.testing.assert_close(_run(m, x, kv, mask, need), theirs, atol=1e-10, rtol=0)


@settings(max_examples=25, deadline=None)
@given(c=configs, seed=st.integers(0, 2**16))
def test_permutation_equivariance(c, seed):
    (d_model, h), B, L, _ = c
    g = torch.Generator().manual_seed(seed)
    m = _mha(d_model, h, seed)
    x = torch.randn(B, L, d_model, generator=g, dtype=torch.float64)
    perm = torch.randperm(L, generator=g)
    with torch.no_grad():
        torch.testing.assert_close(m(x[:, perm], x[:, perm], x[:, perm]), m(x, x, x)[:, perm])


@settings(max_examples=25, deadline=None)
@given(c=configs, seed=st.integers(0, 2**16))
def test_column_form_equals_rows_plus_residual(c, seed):
    """Attn(H) = H + O [head_1; ...; head_M] (column form) == (X + MultiHead(X, X))^T, without
    biases."""
    (d_model, h), _, L, _ = c
    m = _mha(d_model, h, seed, bias=False)
    X = torch.randn(1, L, d_model, generator=torch.Generator().manual_seed(seed),
                    dtype=torch.float64)
    with torch.no_grad():
        cols = multi_head_attention_columns(X[0].T, *per_head_weights(m))
        torch.testing.assert_close(cols, (X + m(X, X, X))[0].T)


@pytest.mark.parametrize("d_model,L_q,L_k", [(16, 5, 7), (64, 10, 12)])
def test_parameter_and_flop_counts_do_not_depend_on_heads(d_model, L_q, L_k):
    xq, xkv = torch.randn(1, L_q, d_model), torch.randn(1, L_k, d_model)
    # eq. (mha-flops)
    expected = 4 * L_q * d_model**2 + 4 * L_k * d_model**2 + 4 * L_q * L_k * d_model
    for h in (1, 2, 4, 8):
        for module in (NaiveMultiHeadAttention(d_model, h), MultiHeadAttention(d_model, h)):
            module.need_weights = True
            assert count_parameters(module) == 4 * d_model**2 + 4 * d_model       # eq. (mha-params)
            with torch.no_grad(), FlopCounterMode(display=False) as counter:
                module(xq, xkv, xkv)
            assert counter.get_total_flops() == expected == attention_matmul_flops(L_q, L_k,
                                                                                   d_model, h)
    assert count_parameters(MultiHeadAttention(d_model, 4, bias=False)) == 4 * d_model**2


@settings(max_examples=15, deadline=None)
@given(B=st.integers(1, 3), L=st.integers(1, 8), prompt=st.integers(1, 8),
       seed=st.integers(0, 2**16))
def test_kv_cache_self_attention_equals_full_causal(B, L, prompt, seed):
    prompt = min(prompt, L)
    g = torch.Generator().manual_seed(seed)
    m = _mha(16, 4, seed)
    x = torch.randn(B, L, 16, generator=g, dtype=torch.float64)
    with torch.no_grad():
        full = m(x, x, x, make_causal_mask(L))
        cache = {}
        p = x[:, :prompt]
        outs = [m(p, p, p, make_causal_mask(prompt), cache=cache)]               # a prompt at once
        for t in range(prompt, L):                                         # then one token per step
            x_t = x[:, t:t + 1]
            m.need_weights = t % 2 == 0                                   # both paths use the cache
            outs.append(m(x_t, x_t, x_t, cache=cache))
        m.need_weights = False
        assert cache["k"].shape == (B, 4, L, 4) and cache["v"].shape == (B, 4, L, 4)
        torch.testing.assert_close(torch.cat(outs, dim=1), full)


@pytest.mark.parametrize("by_name", [False, True])
def test_kv_cache_several_new_tokens(by_name):
    """A prompt of 4, then 5 new tokens at once after the cache: with offset masks, or
    is_causal=True."""
    m = _mha(16, 2, 0)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    masks = [{"is_causal": True}] * 2 if by_name else [{"mask": make_causal_mask(4)},
                                                         {"mask": make_causal_mask(5, offset=4)}]
    with torch.no_grad():
        full = m(x, x, x, make_causal_mask(9))
        cache = {}
        a = m(x[:, :4], x[:, :4], x[:, :4], cache=cache, **masks[0])
        b = m(x[:, 4:], x[:, 4:], x[:, 4:], cache=cache, **masks[1])
    torch.testing.assert_close(torch.cat([a, b], 1), full)


@pytest.mark.parametrize("kind", ["none", "padding", "causal", "random", "is_causal", "cached"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_nan_query_gives_nan_on_both_paths(kind, bad, dtype):
    """A query row holding NaN (or inf) gives a NaN output row on the fast path as on the explicit
    one; the fused kernel alone returns a finite row (it reads a row of NaN scores as fully
    masked). A row that attends to nothing stays 0 (then W_O's bias) on both."""
    g = torch.Generator().manual_seed(0)
    m = _mha(8, 2, 0).to(dtype)
    B, L = 2, 5
    kv = torch.randn(B, L, 8, generator=g, dtype=torch.float64).to(dtype)
    q = torch.randn(B, L, 8, generator=g, dtype=torch.float64).to(dtype)
    q[0, 1] = bad                                         # a whole query row
    q[1, 3, 0] = bad                                      # one feature of a query
    q[1, 4, 5] = bad                                      # the query of the "cached" step
    mask = None if kind in ("none", "is_causal", "cached") else _masks(kind, B, L, L, g)
    if kind == "random":
        mask[0, 0, 1] = False                             # the bad row 0 attends to nothing
    outs = []
    for need in (False, True):
        m.need_weights = need
        if kind == "cached":                              # one query, its past in the cache
            cache = {}
            m(q[:, :4], kv[:, :4], kv[:, :4], make_causal_mask(4), cache=cache)
            outs.append(m(q[:, 4:], kv[:, 4:], kv[:, 4:], cache=cache, is_causal=True))
            q_rows = q[:, 4:]
        else:
            outs.append(m(q, kv, kv, mask, is_causal=kind == "is_causal"))
            q_rows = q
    m.need_weights = False
    fast, explicit = outs
    has_key = (torch.ones(B, q_rows.shape[1], dtype=torch.bool) if mask is None
               else mask.expand(B, 1, L, L).any(-1)[:, 0])
    nan_rows = ~q_rows.isfinite().all(-1) & has_key
    for out in (fast, explicit):
        assert torch.equal(out.isnan().any(-1), nan_rows) and torch.equal(out.isnan().all(-1),
                                                                           nan_rows)
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(fast, explicit, atol=tol, rtol=0, equal_nan=True)
    if kind == "random":
        assert torch.equal(fast[0, 1], m.out_proj.bias) and torch.equal(explicit[0, 1],
                                                                         m.out_proj.bias)


@settings(max_examples=25, deadline=None)
@given(c=configs, seed=st.integers(0, 2**16), need_weights=st.booleans(), training=st.booleans())
def test_is_causal_equals_the_causal_mask(c, seed, need_weights, training):
    """is_causal=True is make_causal_mask(L_q, offset=L_k - L_q): forward values and gradients, both
    paths."""
    (d_model, h), B, L_q, L_k = c
    L_k = max(L_k, L_q)                                  # queries are the last L_q of L_k positions
    g = torch.Generator().manual_seed(seed)
    m = _mha(d_model, h, seed)
    m.train(training)                                  # dropout is 0: training changes nothing here
    x = torch.randn(B, L_k, d_model, generator=g, dtype=torch.float64, requires_grad=True)
    q = x[:, L_k - L_q:]
    grads = []
    for kwargs in ({"mask": make_causal_mask(L_q, offset=L_k - L_q)}, {"is_causal": True}):
        m.need_weights = need_weights
        out = m(q, x, x, **kwargs) if L_q != L_k else m(x, x, x, **kwargs)
        m.need_weights = False
        grads.append((out,) + torch.autograd.grad(out.square().sum(), [x, m.in_proj.weight]))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


def test_is_causal_and_a_mask_together_are_refused():
    m = MultiHeadAttention(8, 2)
    x = torch.randn(1, 3, 8)
    with pytest.raises(ValueError, match=r"either mask or is_causal"):
        m(x, x, x, make_causal_mask(3), is_causal=True)


@pytest.mark.parametrize("need_weights", [False, True])
def test_is_causal_with_more_queries_than_keys_is_a_clear_error(need_weights):
    """Queries are the last L_q of the L_k positions: L_q > L_k has no meaning; the error names
    is_causal and both lengths."""
    m = MultiHeadAttention(8, 2)
    m.need_weights = need_weights
    x, mem = torch.randn(1, 5, 8), torch.randn(1, 3, 8)
    with pytest.raises(ValueError,
                       match=r"is_causal=True needs L_q <= L_k .* got L_q = 5, L_k = 3"):
        m(x, mem, mem, is_causal=True)


def test_static_kv_cache_is_computed_once_and_reused():
    m = _mha(16, 4, 1)
    y = torch.randn(2, 5, 16, dtype=torch.float64)
    memory = torch.randn(2, 7, 16, dtype=torch.float64)
    src_mask = make_padding_mask(torch.tensor([[1] * 7, [1] * 4 + [0] * 3]), 0)
    with torch.no_grad():
        cache = {}
        first = m(y[:, :2], memory, memory, src_mask, cache=cache, static_kv=True)
        k_id = id(cache["k"])
        # memory not needed again
        second = m(y[:, 2:], None, None, src_mask, cache=cache, static_kv=True)
        # ignored: cached
        third = m(y[:, 2:], memory * 0 + 5, memory, src_mask, cache=cache, static_kv=True)
        assert id(cache["k"]) == k_id and cache["k"].shape == (2, 4, 7, 4)
        ref = m(y, memory, memory, src_mask)
    torch.testing.assert_close(torch.cat([first, second], 1), ref)
    torch.testing.assert_close(third, second)


def test_dropout_only_in_training():
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 4, dropout=0.5)
    x = torch.randn(2, 6, 16)
    m.eval()
    assert torch.equal(m(x, x, x), m(x, x, x))
    m.train()
    assert not torch.allclose(m(x, x, x), m(x, x, x))


def test_constructor_and_attributes():
    m = MultiHeadAttention(24, 3)
    assert (m.d_model, m.n_heads, m.d_k) == (24, 3, 8)
    assert m.in_proj.weight.shape == (72, 24) and m.out_proj.weight.shape == (24, 24)
    assert m.need_weights is False and m.attn_weights is None
    assert MultiHeadAttention(8, 2, bias=False).in_proj.bias is None


@pytest.mark.parametrize("d_model,n_heads", [(10, 3), (8, 0), (8, 16)])
def test_heads_must_divide_d_model(d_model, n_heads):
    with pytest.raises(ValueError, match=r"d_model"):
        MultiHeadAttention(d_model, n_heads)
    with pytest.raises(ValueError, match=r"d_model"):
        NaiveMultiHeadAttention(d_model, n_heads)


def test_bad_inputs_name_the_argument_and_shape():
    m = MultiHeadAttention(8, 2)
    x, mem = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"query must be a floating-point tensor of shape \(B, "
                                         r"L_q, d_model\) with d_model = 8"):
        m(torch.randn(2, 3, 6), mem, mem)
    with pytest.raises(ValueError, match=r"key must be a floating-point tensor of shape \(B, L_k, "
                                         r"d_model\) with d_model = 8"):
        m(x, torch.randn(2, 5, 7), mem)
    with pytest.raises(ValueError, match=r"value must have shape \(B, L_k, d_model\) with d_model "
                                         r"= 8, B = 2, L_k = 5"):
        m(x, mem, torch.randn(2, 4, 8))
    with pytest.raises(ValueError, match=r"key must have shape .* B = 2"):
        m(x, torch.randn(3, 5, 8), torch.randn(3, 5, 8))
    with pytest.raises(ValueError, match=r"query must have shape \(B, L_q, d_model\)"):
        m(torch.randn(3, 8), mem, mem)
    with pytest.raises(ValueError, match=r"mask must be .* broadcastable to \(B, h, L_q, L_k\) = "
                                         r"\(2, 2, 3, 5\), got shape \(3, 3\)"):
        m(x, mem, mem, make_causal_mask(3))
    with pytest.raises(TypeError,
                       match=r"mask must be a boolean tensor .* got a torch.float32 tensor"):
        m(x, mem, mem, torch.zeros(3, 5))
    with pytest.raises(ValueError,
                       match=r"cache\['k'\] must have shape \(B, h, L_past, d_k\) with B = 2"):
        m(x, x, x, cache={"k": torch.zeros(1, 2, 4, 4), "v": torch.zeros(1, 2, 4, 4)})


def test_float64_input_to_a_float32_module_names_the_argument():
    m = MultiHeadAttention(8, 2)
    x, mem = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    with pytest.raises(TypeError,
                       match=r"query is a torch.float64 tensor but the module's parameters are "
                                        r"torch.float32: convert the input "
                                        r"\(query.to\(torch.float32\)\) or the module"):
        m(x.double(), mem, mem)
    with pytest.raises(TypeError, match=r"value is a torch.float64 tensor"):
        m(x, mem, mem.double())


def test_mixed_dtypes_are_allowed_under_autocast():
    """Under autocast the sub-layers see the dtypes autocast chose, not the parameters': no dtype
    error then."""
    m = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert m(x, x, x).shape == (2, 3, 8)


@pytest.mark.parametrize("p", [-1.0, 1.5, float("nan")])
def test_dropout_out_of_range_is_refused_at_construction(p):
    with pytest.raises(ValueError, match=r"dropout must be a probability in \[0, 1\)"):
        MultiHeadAttention(8, 2, dropout=p)


def test_projection_groupings_agree():
    """forward picks how to group x W_Q, x' W_K, x' W_V into matrix products from which of query,
    key and value are the same tensor object: one product with [W_Q; W_K; W_V] (self-attention), x
    W_Q plus one with
    [W_K; W_V] (one memory), or three. The groupings are the same function (to rounding), values and
    gradients."""
    m = _mha(12, 3, 0)
    g = torch.Generator().manual_seed(1)
    x, mem = (torch.randn(2, L, 12, generator=g, dtype=torch.float64, requires_grad=True)
              for L in (4, 6))
    results = []
    for args in ((x, x, x), (x, x.clone(), x.clone()), (x, x, x * 1.0)):
        # fused, three products, [W_K; W_V]
        results.append((m(*args),
                        torch.autograd.grad(m(*args).square().sum(), [x, *m.parameters()])))
    for args in ((x, mem, mem), (x, mem, mem.clone())):               # one memory: shared, separate
        results.append((m(*args),
                        torch.autograd.grad(m(*args).square().sum(), [x, mem, *m.parameters()])))
    for (out, grads), (ref, ref_grads) in [(results[1], results[0]), (results[2], results[0]),
                                           (results[4], results[3])]:
        torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
        for a, b in zip(grads, ref_grads):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
