"""transformer_lib.plotting, and the rule that `import transformer_lib` does not import
matplotlib."""
import itertools
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

from transformer_lib.plotting import (  # noqa: E402
    ARCHITECTURE_PARTS,
    ATTENTION_DIAGRAMS,
    plot_architecture,
    plot_attention,
    plot_attention_diagram,
    plot_attention_heads,
)


def test_plot_attention_labels_and_values():
    w = torch.softmax(torch.randn(1, 1, 3, 4), -1)
    ax = plot_attention(w, list("abcd"), list("xyz"))
    assert [t.get_text() for t in ax.get_xticklabels()] == list("abcd")     # columns are keys
    assert [t.get_text() for t in ax.get_yticklabels()] == list("xyz")      # rows are queries
    img = ax.images[0]
    np.testing.assert_allclose(img.get_array(), w[0, 0].numpy(), rtol=1e-6)  # not transposed
    assert img.get_clim() == pytest.approx((0.0, float(w.max())))           # the scale starts at 0


def test_plot_attention_annotates_every_cell():
    w = torch.tensor([[0.25, 0.75], [1.0, 0.0]])
    ax = plot_attention(w, annotate=True, colorbar=False)
    assert sorted(t.get_text() for t in ax.texts) == ["0.00", "0.25", "0.75", "1.00"]


def test_plot_attention_rejects_mismatched_labels_and_shapes():
    with pytest.raises(ValueError, match="x_labels has 2 labels but the weights have 4"):
        plot_attention(torch.rand(3, 4), ["a", "b"])
    with pytest.raises(ValueError, match=r"must be a \(L_q, L_k\) matrix"):
        plot_attention(torch.rand(2, 3, 4))


def test_plot_heads_grid():
    fig = plot_attention_heads(torch.rand(1, 6, 3, 3), ncols=4, colorbar=False)
    assert len(fig.axes) == 8 and sum(ax.axison for ax in fig.axes) == 6


def test_plot_heads_share_one_colour_scale():
    """A diffuse head must look paler than a sharp one: one scale for all panels, one colour bar."""
    sharp = torch.eye(3)
    flat = torch.full((3, 3), 1 / 3)
    fig = plot_attention_heads(torch.stack([flat, sharp]), ncols=2)
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 2 and len(fig.axes) == 3                      # two heads + the colour bar
    assert {ax.images[0].get_clim() for ax in panels} == {(0.0, 1.0)}
    fig = plot_attention_heads(torch.stack([flat, flat * 0.5]), vmax=0.8, colorbar=False)
    assert {ax.images[0].get_clim() for ax in fig.axes if ax.images} == {(0.0, 0.8)}


def test_plot_heads_rejects_bad_input():
    with pytest.raises(ValueError, match=r"shape \(h, L_q, L_k\)"):
        plot_attention_heads(torch.rand(3, 3))
    with pytest.raises(ValueError, match="ncols must be a positive int"):
        plot_attention_heads(torch.rand(2, 3, 3), ncols=0)
    with pytest.raises(ValueError, match="y_labels has 2 labels"):
        plot_attention_heads(torch.rand(2, 3, 3), y_labels=["a", "b"])


def test_import_is_light():
    code = ("import sys, transformer_lib; print('matplotlib' in sys.modules, 'tokenizers' in "
            "sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["False", "False"]
    code = ("import transformer_lib as t; print(t.plot_attention.__module__, "
            "t.plot_architecture.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["transformer_lib.plotting"] * 2


# --- the map of the architecture (the paper's Figure 1) and Figure 2 ------------------------------

MUTED, MUTED_FRAME = to_rgba("#f3f3f3"), to_rgba("#fafafa")     # muted boxes, muted stack frames


def _boxes(ax) -> dict:
    """gid -> face colour of every box of the drawing (the h stacked copies of Figure 2 share a
    gid)."""
    return {p.get_gid(): p.get_facecolor() for p in ax.patches if isinstance(p, FancyBboxPatch)}


def _bold(ax) -> set:
    return {t.get_gid() for t in ax.texts if t.get_fontweight() == "bold"}


def test_architecture_draws_every_block_of_figure_1():
    ax = plot_architecture()
    labels = " | ".join(t.get_text() for t in ax.texts)
    for words in ["Inputs", "Outputs\n(shifted right)", "Input\nEmbedding", "Output\nEmbedding",
                  "Positional\nEncoding", "Multi-Head\nSelf-Attention",
                  "Masked Multi-Head\nSelf-Attention",
                  "Multi-Head\nCross-Attention", "Feed-Forward", "Add & Norm", "N×", "Linear",
                  "Softmax", "Output Probabilities"]:
        assert words in labels, words
    # 2 in the encoder, 3 in the decoder
    assert sum(t.get_text() == "Add & Norm" for t in ax.texts) == 5
    assert sum(t.get_text() == "Feed-Forward" for t in ax.texts) == 2
    boxes = _boxes(ax)
    assert not {MUTED, MUTED_FRAME} & set(boxes.values()) and not _bold(ax)
    # labels get a frame only when lit                 # nothing muted, nothing emphasised
    assert all(t.get_bbox_patch() is None for t in ax.texts)
    # one colour per kind of block
    assert boxes["encoder-self-attention"] == boxes["decoder-cross-attention"]
    assert boxes["encoder-self-attention"] != boxes["encoder-feed-forward"]
    plt.close("all")


@pytest.fixture(scope="module")
def plain():
    boxes = _boxes(plot_architecture())
    plt.close("all")
    return boxes


@pytest.mark.parametrize("part", list(ARCHITECTURE_PARTS))
def test_architecture_highlights_every_part(part, plain):
    """The part's boxes get a stronger tint and bold labels (a part that is only a label, such as
    "inputs", gets a frame); every other box is muted grey."""
    ax = plot_architecture(highlight=part)
    boxes, elements = _boxes(ax), set(ARCHITECTURE_PARTS[part])
    drawn = {a.get_gid() for a in ax.get_children() if a.get_gid()}
    assert elements <= drawn, elements - drawn                  # every element of the part is drawn
    for gid, face in boxes.items():
        if gid in elements:
            assert face != MUTED and face != plain[gid], gid           # emphasised: a stronger tint
        else:
            assert face == (MUTED_FRAME if gid.endswith("-stack") else MUTED), gid
    assert _bold(ax) & drawn <= elements and _bold(ax) == {t.get_gid() for t in ax.texts} & elements
    framed = {t.get_gid() for t in ax.texts if t.get_bbox_patch() is not None}
    assert framed == ({part} if part in ("inputs", "shifted-outputs", "output-probabilities")
                      else set())
    plt.close("all")


def test_architecture_highlight_changes_what_is_drawn():
    cross, ffn = (_boxes(plot_architecture("cross-attention")),
                  _boxes(plot_architecture("feed-forward")))
    assert cross["decoder-cross-attention"] != MUTED and ffn["decoder-cross-attention"] == MUTED
    assert ffn["decoder-feed-forward"] != MUTED and cross["decoder-feed-forward"] == MUTED
    # the encoder output line that feeds cross-attention is drawn dark only when cross-attention is
    # lit
    def line(ax):
        return {to_rgba(a.get_color()) for a in ax.lines if a.get_gid() == "encoder-output"}
    assert line(plot_architecture("cross-attention")) != line(plot_architecture("feed-forward"))
    plt.close("all")


def test_architecture_highlight_list_and_spellings():
    ax = plot_architecture(highlight=["embeddings", "linear-softmax"])
    boxes = _boxes(ax)
    lit = {gid for gid, face in boxes.items() if face not in (MUTED, MUTED_FRAME)}
    assert lit == {"input-embedding", "output-embedding", "linear", "softmax"}
    same = [_boxes(plot_architecture(h)) for h in ("masked self-attention", "Masked_Self-Attention",
                                                   ["masked-self-attention"])]
    assert same[0] == same[1] == same[2]
    assert {g for g, f in same[0].items()
            if f not in (MUTED, MUTED_FRAME)} == {"decoder-masked-self-attention"}
    plt.close("all")


def test_architecture_unknown_part_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown part 'attention heads'") as e:
        plot_architecture("attention heads")
    # the message lists the valid names
    assert all(name in str(e.value) for name in ARCHITECTURE_PARTS)
    with pytest.raises(ValueError, match="unknown part 'softmx'"):
        plot_architecture(["encoder", "softmx"])
    with pytest.raises(ValueError, match="empty list"):
        plot_architecture([])
    with pytest.raises(ValueError, match="valid names: inputs"):
        plot_architecture([3])
    plt.close("all")


def test_architecture_draws_on_a_given_axes():
    fig, axes = plt.subplots(1, 2)
    assert plot_architecture("encoder", ax=axes[1]) is axes[1]
    assert not axes[0].patches and axes[1].patches
    plt.close("all")


def _text_problems(ax) -> list:
    """Box labels that spill out of their box, texts that overlap each other or leave the figure."""
    fig = ax.figure
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    boxes = {p.get_gid(): p.get_window_extent(r) for p in ax.patches
             if isinstance(p, FancyBboxPatch)}
    problems = []
    for t in ax.texts:
        e, b = t.get_window_extent(r), boxes.get(t.get_gid())
        if b is not None and not t.get_gid().endswith("stack") and (
                e.x0 < b.x0 + 2 or e.x1 > b.x1 - 2 or e.y0 < b.y0 - 1 or e.y1 > b.y1 + 1):
            problems.append(f"{t.get_text()!r} spills out of its box")
        if e.x0 < 0 or e.y0 < 0 or e.x1 > fig.bbox.x1 or e.y1 > fig.bbox.y1:
            problems.append(f"{t.get_text()!r} leaves the figure")
    for a, b in itertools.combinations(ax.texts, 2):
        if a.get_window_extent(r).overlaps(b.get_window_extent(r)):
            problems.append(f"{a.get_text()!r} overlaps {b.get_text()!r}")
    return problems


@pytest.mark.parametrize("highlight", [None, list(ARCHITECTURE_PARTS)], ids=["plain", "all-bold"])
def test_architecture_text_fits(highlight):
    """At the book's size (the default figure), with regular and with bold labels, no text
    collides."""
    assert _text_problems(plot_architecture(highlight)) == []
    plt.close("all")


def test_attention_diagrams():
    sdp = plot_attention_diagram("scaled-dot-product")
    labels = [t.get_text() for t in sdp.texts]
    assert labels.count("MatMul") == 2 and {"Q", "K", "V", "Scale", "Mask (opt.)",
                                            "SoftMax"} <= set(labels)
    mask = next(p for p in sdp.patches if p.get_gid() == "mask")
    assert mask.get_linestyle() != "-"                                 # the optional mask is dashed
    mh = plot_attention_diagram("multi-head")
    labels = [t.get_text() for t in mh.texts]
    assert {"V", "K", "Q", "Concat", "Scaled Dot-Product\nAttention", "$h$"} <= set(labels)
    assert labels.count("Linear") == 4                          # V, K, Q projections and the output
    # h copies each
    assert sum(p.get_gid() in ("linear-V", "linear-K", "linear-Q") for p in mh.patches) == 3 * 3
    # same colours
    assert _boxes(mh)["attention"] == _boxes(plot_architecture())["encoder-self-attention"]
    for ax in (sdp, mh):
        assert _text_problems(ax) == []
    fig, axes = plt.subplots(1, 2)
    assert plot_attention_diagram("multi-head", ax=axes[0]) is axes[0]
    plt.close("all")


def test_attention_diagram_unknown_kind():
    with pytest.raises(ValueError, match="unknown diagram 'dot-product'; valid kinds: "
                                         "scaled-dot-product, multi-head"):
        plot_attention_diagram("dot-product")
    assert ATTENTION_DIAGRAMS == ("scaled-dot-product", "multi-head")
