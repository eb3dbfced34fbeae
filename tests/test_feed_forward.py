"""Chapter 08: the position-wise feed-forward network and where a layer's parameters are."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from transformer_lib.feed_forward import PositionwiseFeedForward, layer_parameter_counts


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 3), n=st.integers(1, 8), d=st.integers(1, 12), d_ff=st.integers(1, 24),
       seed=st.integers(0, 2**16))
def test_matches_formula_loop_and_conv1d(b, n, d, d_ff, seed):
    torch.manual_seed(seed)
    ffn = PositionwiseFeedForward(d, d_ff).double()
    x = torch.randn(b, n, d, dtype=torch.float64)
    y = ffn(x)
    w1, b1, w2, b2 = ffn.w_1.weight.T, ffn.w_1.bias, ffn.w_2.weight.T, ffn.w_2.bias
    torch.testing.assert_close(y, torch.clamp(x @ w1 + b1, min=0) @ w2 + b2)       # eq. ffn
    # same MLP per position
    torch.testing.assert_close(y, torch.stack([ffn(x[:, i]) for i in range(n)], 1))
    c1, c2 = nn.Conv1d(d, d_ff, 1).double(), nn.Conv1d(d_ff, d, 1).double()
    with torch.no_grad():
        c1.weight.copy_(ffn.w_1.weight[..., None])
        c1.bias.copy_(b1)
        c2.weight.copy_(ffn.w_2.weight[..., None])
        c2.bias.copy_(b2)
    torch.testing.assert_close(y, c2(torch.relu(c1(x.transpose(1, 2)))).transpose(1, 2))
    perm = torch.randperm(n)
    torch.testing.assert_close(ffn(x[:, perm]), y[:, perm])


def test_matches_pytorch_encoder_layer_ffn():
    """nn.TransformerEncoderLayer's linear2(dropout(relu(linear1(x)))) with the same weights."""
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(8, 2, 32, dropout=0.0, batch_first=True, dtype=torch.float64)
    ffn = PositionwiseFeedForward(8, 32).double()
    ffn.w_1.load_state_dict(ref.linear1.state_dict())
    ffn.w_2.load_state_dict(ref.linear2.state_dict())
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    torch.testing.assert_close(ffn(x), ref.linear2(ref.activation(ref.linear1(x))))


@pytest.mark.parametrize("d,d_ff", [(512, 2048), (1024, 4096), (64, 100)])
def test_parameter_counts_match_pytorch_layers(d, d_ff):
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    enc = layer_parameter_counts(d, d_ff)
    dec = layer_parameter_counts(d, d_ff, decoder=True)
    assert sum(enc.values()) == count(nn.TransformerEncoderLayer(d, 8 if d % 8 == 0 else 1, d_ff))
    assert sum(dec.values()) == count(nn.TransformerDecoderLayer(d, 8 if d % 8 == 0 else 1, d_ff))
    assert enc["feed-forward"] == dec["feed-forward"] == count(PositionwiseFeedForward(d, d_ff))


def test_ffn_share_is_about_two_thirds():
    for d in (256, 512, 1024):
        enc = layer_parameter_counts(d, 4 * d)
        dec = layer_parameter_counts(d, 4 * d, decoder=True)
        assert enc["feed-forward"] / sum(enc.values()) == pytest.approx(2 / 3, abs=0.01)
        assert dec["feed-forward"] / sum(dec.values()) == pytest.approx(1 / 2, abs=0.01)


def test_ffn_flops():
    """2 * 2 * d * d_ff multiply-adds per token (eq. ffn-flops: 16 d^2 for d_ff = 4d)."""
    ffn = PositionwiseFeedForward(32, 128)
    with FlopCounterMode(display=False) as counter:
        ffn(torch.randn(3, 7, 32))
    assert counter.get_total_flops() == 3 * 7 * 16 * 32 ** 2


@pytest.mark.parametrize("L", [3, 11])
def test_attention_flops(L):
    """Self-attention: 8 d^2 per token for the four projections plus 4 L d for q K^T and weights @
    V; with the FFN's 16 d^2 (d_ff = 4d) this puts the crossover of eq. ffn-flops at L = 4d."""
    from transformer_lib.multi_head_attention import MultiHeadAttention
    d, B = 32, 2
    mha = MultiHeadAttention(d, 4)
    mha.need_weights = True              # explicit path: every product is a matmul the counter sees
    x = torch.randn(B, L, d)
    with FlopCounterMode(display=False) as counter:
        mha(x, x, x)
    assert counter.get_total_flops() == B * L * (8 * d * d + 4 * L * d)
    ffn = PositionwiseFeedForward(d, 4 * d)
    with FlopCounterMode(display=False) as counter:
        ffn(torch.randn(1, 4 * d, d))
    per_token_ffn = counter.get_total_flops() // (4 * d)
    assert 4 * (4 * d) * d == per_token_ffn    # at L = 4d the scores cost exactly what the FFN does


def test_dropout_acts_on_hidden_layer_only_in_training():
    torch.manual_seed(1)
    ffn = PositionwiseFeedForward(8, 64, dropout=0.5)
    x = torch.randn(4, 8)
    ffn.eval()
    torch.testing.assert_close(ffn(x), ffn.w_2(torch.relu(ffn.w_1(x))))
    ffn.train()
    assert not torch.allclose(ffn(x), ffn.w_2(torch.relu(ffn.w_1(x))))


def test_wrong_feature_size_is_a_clear_error():
    with pytest.raises(ValueError,
                       match=r"x must have shape \(\.\.\., L, d_model=8\), got \(2, 5, 6\)"):
        PositionwiseFeedForward(8, 32)(torch.randn(2, 5, 6))


def test_float64_input_to_a_float32_module_names_the_argument():
    with pytest.raises(TypeError, match=r"x is a torch.float64 tensor but the module's parameters "
                                        r"are torch.float32"):
        PositionwiseFeedForward(8, 32)(torch.randn(2, 5, 8, dtype=torch.float64))
