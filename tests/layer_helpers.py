"""Helpers shared by the encoder, decoder, multi-head attention and interop tests."""
import torch
from torch import nn


def torch_mha(d_model, h, bias, seed):
    """PyTorch's nn.MultiheadAttention in float64, eval mode, seeded, with random (non-zero)
    biases."""
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(d_model, h, bias=bias, batch_first=True, dtype=torch.float64).eval()
    if bias:
        with torch.no_grad():
            ref.in_proj_bias.normal_()
            ref.out_proj.bias.normal_()
    return ref


def randomise(module, seed=0, scale=0.1):
    """Perturb every parameter (so LayerNorm's gamma/beta and biases are not at their trivial init);
    returns module."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def real_tokens(B, L, seed):
    """(B, L) boolean, True at real tokens: each row a random length in [1, L] followed by
    padding."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, L + 1, (B,), generator=g)
    return torch.arange(L)[None, :] < lengths[:, None]
