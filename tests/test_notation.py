"""Chapter 00 and the notation page (book/notation.md).

* The column convention (H in R^{D x N}) and the row convention (X in R^{N x D}) agree.
* The names, defaults and shapes the notation page gives in its "code" columns are the package's.
* Every cross-reference and citation on the book's own pages (book/*.md) resolves, so a renamed
  label or equation in a chapter cannot leave a landing page pointing at nothing.
"""
import inspect
import json
import re
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib import basic_self_attention
from transformer_lib.decoding import beam_search, length_penalty
from transformer_lib.layer_norm import LayerNorm
from transformer_lib.masking import make_causal_mask, make_padding_mask
from transformer_lib.model import TransformerConfig
from transformer_lib.multi_head_attention import MultiHeadAttention
from transformer_lib.optimization import LabelSmoothingLoss, paper_adam, warmup_lr
from transformer_lib.positional import pe_shift_matrix, sinusoidal_encoding

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"


@settings(max_examples=25, deadline=None)
@given(D=st.integers(1, 8), N=st.integers(1, 9), out=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_linear_map_rows_equal_columns(D, N, out, seed):
    g = torch.Generator().manual_seed(seed)
    H = torch.randn(D, N, generator=g, dtype=torch.float64)
    linear = torch.nn.Linear(D, out, bias=False, dtype=torch.float64)
    # W H (columns) == (X W^T)^T (rows, nn.Linear with weight W).
    torch.testing.assert_close(linear.weight @ H, linear(H.T).T)


@settings(max_examples=25, deadline=None)
@given(D=st.integers(1, 8), N=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_self_attention_columns_equal_rows(D, N, seed):
    g = torch.Generator().manual_seed(seed)
    H = torch.randn(D, N, generator=g, dtype=torch.float64)
    H_out = H @ torch.softmax(H.T @ H, dim=0)        # column form: softmax over each column
    Y, _ = basic_self_attention(H.T)                  # row form
    torch.testing.assert_close(H_out, Y.T)


# --- the notation page's "in the code" column -----------------------------------------------------

def _defaults(fn):
    return {k: p.default for k, p in inspect.signature(fn).parameters.items()}


def test_training_and_decoding_names_and_paper_values():
    assert _defaults(paper_adam)["betas"] == (0.9, 0.98) and _defaults(paper_adam)["eps"] == 1e-9
    assert _defaults(warmup_lr)["warmup_steps"] == 4000
    assert _defaults(LabelSmoothingLoss.__init__)["smoothing"] == 0.1
    beam = _defaults(beam_search)
    assert beam["beam_size"] == 4 and beam["alpha"] == 0.6 and "max_len" in beam
    assert length_penalty(7, alpha=0.6) == pytest.approx(((5 + 7) / 6) ** 0.6)
    assert _defaults(LayerNorm.__init__)["eps"] == 1e-5
    # lrate = d_model^-0.5 min(step^-0.5, step warmup_steps^-1.5), peak at step = warmup_steps
    assert warmup_lr(4000, 512) == pytest.approx(512 ** -0.5 * 4000 ** -0.5)


def test_size_names_and_base_values():
    c = TransformerConfig.base(37000)
    assert (c.d_model, c.n_heads, c.n_layers, c.d_ff, c.dropout) == (512, 8, 6, 2048, 0.1)
    assert c.src_vocab_size == c.tgt_vocab_size == 37000
    assert c.attn_dropout == 0.0 and c.ffn_dropout == 0.0         # not in the paper, off by default


def test_multi_head_shapes_and_kv_cache():
    B, h, d_model, L_past, L_new = 2, 4, 16, 5, 3
    mha = MultiHeadAttention(d_model, h).eval()
    assert mha.d_k == d_model // h
    assert mha.in_proj.weight.shape == (3 * d_model, d_model)      # [W_Q; W_K; W_V], column form
    assert mha.out_proj.weight.shape == (d_model, d_model)         # W_O^T, column form
    x = torch.randn(B, L_past + L_new, d_model)
    cache = {}
    mha(x[:, :L_past], x[:, :L_past], x[:, :L_past], mask=make_causal_mask(L_past), cache=cache)
    assert cache["k"].shape == cache["v"].shape == (B, h, L_past, mha.d_k)
    new = x[:, L_past:]
    mask = make_causal_mask(L_new, offset=L_past)
    assert mask.shape == (L_new, L_past + L_new)
    mha(new, new, new, mask=mask, cache=cache)
    assert cache["k"].shape == (B, h, L_past + L_new, mha.d_k)


def test_other_names_the_page_uses_exist():
    import dataclasses

    from conftest import solution

    from transformer_lib import optimization, positional, training

    assert {"tgt_in", "tgt_out", "src"} <= {f.name for f in dataclasses.fields(training.Batch)}
    assert "max_tokens" in _defaults(training.token_batches)
    assert callable(optimization.average_checkpoints)
    assert "temperature" in _defaults(solution("ex3_char_model")["generate"])     # exercise 3
    assert "vocab_size" in _defaults(LabelSmoothingLoss.__init__)
    assert _defaults(positional.LearnedPositionalEmbedding.__init__)["max_len"] == 512
    forward = _defaults(MultiHeadAttention.forward)
    assert "cache" in forward and "static_kv" in forward
    mha = MultiHeadAttention(8, 2)
    assert mha.need_weights is False
    mha.need_weights = True
    x = torch.randn(1, 3, 8)
    mha(x, x, x)
    assert mha.attn_weights.shape == (1, 2, 3, 3)                   # (B, h, L_q, L_k)


def test_mask_shapes():
    tokens = torch.tensor([[5, 6, 0], [7, 0, 0]])
    pad = make_padding_mask(tokens, pad_id=0)
    assert pad.shape == (2, 1, 1, 3) and pad.dtype == torch.bool
    assert pad[0, 0, 0].tolist() == [True, True, False]             # True = may attend
    causal = make_causal_mask(3)
    assert torch.equal(causal, torch.ones(3, 3, dtype=torch.bool).tril())   # M_tj = [j <= t]
    assert (pad & causal).shape == (2, 1, 3, 3)


def test_positional_symbols():
    d, pos, k = 8, 3, 2
    PE = sinusoidal_encoding(10, d, dtype=torch.float64)
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    torch.testing.assert_close(PE[pos, 0::2], torch.sin(omega * pos))
    torch.testing.assert_close(PE[pos, 1::2], torch.cos(omega * pos))
    # PE_{pos+k} = R_k PE_pos
    torch.testing.assert_close(pe_shift_matrix(k, d) @ PE[pos], PE[pos + k])


# --- cross-references on the book's own pages -----------------------------------------------------

ROLE = re.compile(r"\{(ref|doc|eq|cite:p|cite:t)\}`([^`]+)`")


def _target(text: str) -> str:
    m = re.search(r"<([^>]+)>\s*$", text)                            # {ref}`title <label>`
    return m.group(1) if m else text


def _sources():
    pages = {p: p.read_text(encoding="utf-8") for p in BOOK.glob("*.md")}
    notebooks = {}
    for p in (ROOT / "notebooks").rglob("*.ipynb"):
        cells = json.loads(p.read_text(encoding="utf-8"))["cells"]
        notebooks[p] = "\n".join("".join(c["source"]) for c in cells if c["cell_type"]
                                 == "markdown")
    return pages, notebooks


def test_book_pages_cross_references_resolve():
    pages, notebooks = _sources()
    every_text = list(pages.values()) + list(notebooks.values())
    labels = {m for t in every_text for m in re.findall(r"^\(([\w-]+)\)=\s*$", t, flags=re.M)}
    equations = {m for t in every_text for m in re.findall(r"\$\$\s*\((eq-[\w-]+)\)", t)}
    bib = (BOOK / "references.bib").read_text(encoding="utf-8")
    keys = set(re.findall(r"^@\w+\{([^,\s]+),", bib, flags=re.M))
    assert labels and equations and keys
    broken = []
    for page, text in pages.items():
        for role, arg in ROLE.findall(text):
            target = _target(arg)
            if role == "doc":
                path = (page.parent / target).resolve()
                ok = path.with_suffix(".md").exists() or path.with_suffix(".ipynb").exists()
            elif role == "ref":
                ok = target in labels
            elif role == "eq":
                ok = target in equations
            else:
                ok = all(k.strip() in keys for k in target.split(","))
            if not ok:
                broken.append(f"{page.name}: {{{role}}}`{arg}`")
    assert not broken, "unresolved references: " + "; ".join(broken)

