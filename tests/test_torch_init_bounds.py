"""What chapter 11's table says about PyTorch's own initialisation of attention: nn.Transformer
redraws every matrix with Xavier (W_O's bound sqrt(6/2d)), while nn.MultiheadAttention on its own
redraws only in_proj_weight and leaves out_proj at nn.Linear's default (bound 1/sqrt(d)); both give
the stacked [W_Q; W_K; W_V] the bound sqrt(6/4d). A PyTorch release that changes this makes the
table wrong, and fails here."""
import math

import pytest
import torch


@pytest.mark.parametrize("d", [64, 256])
def test_w_o_bound_of_nn_multiheadattention_alone_and_inside_nn_transformer(d):
    torch.manual_seed(0)
    alone = torch.nn.MultiheadAttention(d, 4, batch_first=True)
    core = torch.nn.Transformer(d, 4, 1, 1, 2 * d, batch_first=True)
    inside = [core.encoder.layers[0].self_attn, core.decoder.layers[0].self_attn,
              core.decoder.layers[0].multihead_attn]
    largest = lambda w: w.detach().abs().max().item()        # noqa: E731  ~ the bound, d*d draws
    for mha in (alone, *inside):
        assert largest(mha.in_proj_weight) == pytest.approx(math.sqrt(6 / (4 * d)), rel=0.02)
    assert largest(alone.out_proj.weight) == pytest.approx(1 / math.sqrt(d), rel=0.02)
    for mha in inside:
        assert largest(mha.out_proj.weight) == pytest.approx(math.sqrt(6 / (2 * d)), rel=0.02)
