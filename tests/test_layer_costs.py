"""Chapter 09b: layer_costs, the paper's Table 1 counted, against hand-worked numbers and PyTorch's
FLOP counter."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from transformer_lib.complexity import layer_costs
from transformer_lib.multi_head_attention import MultiHeadAttention


def test_hand_worked_numbers():
    # n = 10, d = 4, k = 3, r = 5, worked out on paper:
    # attention 4*10*16 + 2*100*4; RNN 2*10*16; GRU 6*10*16; conv 3*10*16;
    # paths: conv ceil(9/2) = 5, dilated: 3^2 - 1 = 8 < 9 <= 26 = 3^3 - 1 -> 3, restricted ceil(9/2)
    # = 5.
    c = layer_costs(10, 4, k=3, r=5)
    got = {name: (row["mult_adds"], row["sequential_ops"], row["max_path_length"])
           for name, row in c.items()}
    assert got == {"self_attention": (1440, 1, 1), "rnn": (320, 10, 9), "gru": (960, 10, 9),
                   "conv": (480, 1, 5), "dilated_conv": (480, 1, 3),
                   "restricted_self_attention": (1040, 1, 5)}
    assert c["self_attention"]["table1"] == "O(n^2 d)" and c["rnn"]["table1"] == "O(n d^2)"
    assert "restricted_self_attention" not in layer_costs(10, 4)


def test_paper_base_sizes():
    # d = 512, n = 1000, k = 3: dilated path ceil(log_3 1000) = 7 (3^6 = 729 < 1000 <= 2187); conv
    # ceil(999/2) = 500.
    c = layer_costs(1000, 512, k=3, r=9)
    assert (c["self_attention"]["mult_adds"] == 4 * 1000 * 512**2 + 2 * 1000**2 * 512
            == 2_072_576_000)
    assert c["conv"]["max_path_length"] == 500 and c["dilated_conv"]["max_path_length"] == 7
    assert c["restricted_self_attention"]["max_path_length"] == 250       # ceil(999 / 4)
    assert c["gru"]["sequential_ops"] == 1000 and c["self_attention"]["sequential_ops"] == 1


def test_single_position_has_no_path():
    assert all(row["max_path_length"] == 0 for row in layer_costs(1, 8, r=3).values())


@pytest.mark.parametrize("d", [1, 7, 64, 512])
def test_crossover_with_gru_is_n_equals_d(d):
    def attn_minus_gru(n):
        c = layer_costs(n, d)
        return c["self_attention"]["mult_adds"] - c["gru"]["mult_adds"]
    assert attn_minus_gru(d) == 0 and attn_minus_gru(d + 1) > 0
    if d > 1:
        assert attn_minus_gru(d - 1) < 0


class CausalConv(nn.Module):
    def __init__(self, d, k, dilation=1):
        super().__init__()
        self.pad, self.conv = (k - 1) * dilation, nn.Conv1d(d, d, k, dilation=dilation)

    def forward(self, x):
        return self.conv(F.pad(x.transpose(1, 2), (self.pad, 0))).transpose(1, 2)


@pytest.mark.parametrize("n,d,k", [(5, 8, 2), (12, 16, 3), (7, 12, 5)])
def test_mult_adds_match_pytorch_flop_counter(n, d, k):
    torch.manual_seed(0)
    x = torch.randn(1, n, d)
    attn = MultiHeadAttention(d, 4, dropout=0.0).eval()
    attn.need_weights = True                   # the explicit path: matrix products the counter sees
    run = {"self_attention": lambda: attn(x, x, x),
           "rnn": lambda: nn.RNN(d, d, batch_first=True)(x),
           "gru": lambda: nn.GRU(d, d, batch_first=True)(x), "conv": lambda: CausalConv(d, k)(x),
           "dilated_conv": lambda: CausalConv(d, k, dilation=k)(x)}
    costs = layer_costs(n, d, k)
    for name, f in run.items():
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            f()
        assert counter.get_total_flops() == 2 * costs[name]["mult_adds"], name


@pytest.mark.parametrize("n,k", [(9, 2), (16, 3), (30, 3), (26, 5)])
def test_path_lengths_match_gradients(n, k):
    """The first depth at which output n depends on input 1 is the path length layer_costs gives."""
    torch.manual_seed(0)
    d = 4
    x = torch.randn(1, n, d, dtype=torch.float64)
    costs = layer_costs(n, d, k)

    def first_depth(make_layer):
        layers = []
        for depth in range(1, n + 1):
            layers.append(make_layer(depth).double())
            xg = x.clone().requires_grad_(True)
            y = xg
            for layer in layers:
                y = layer(y)
            y[0, -1].sum().backward()
            if xg.grad[0, 0].abs().sum() > 0:
                return depth
        raise AssertionError("position 1 never reached position n")

    assert first_depth(lambda _: CausalConv(d, k)) == costs["conv"]["max_path_length"]
    assert (first_depth(lambda depth: CausalConv(d, k, dilation=k ** (depth - 1)))
            == costs["dilated_conv"]["max_path_length"])


@pytest.mark.parametrize("kwargs,match",
                         [({"n": 0, "d": 4}, "n must be"), ({"n": 3, "d": 2.0}, "d must be"),
                                          ({"n": 3, "d": 4, "k": 1}, "k must be"),
                                          ({"n": 3, "d": 4, "r": 4}, "r \\(neighbourhood size\\)")])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        layer_costs(**kwargs)
