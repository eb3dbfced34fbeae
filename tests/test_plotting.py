"""transformer_lib.plotting, and the rule that `import transformer_lib` does not import matplotlib."""
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lib.plotting import plot_attention, plot_attention_heads  # noqa: E402


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
    assert len(panels) == 2 and len(fig.axes) == 3                          # two heads + the colour bar
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
    code = "import sys, transformer_lib; print('matplotlib' in sys.modules, 'tokenizers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
    code = "import transformer_lib as t; print(t.plot_attention.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "transformer_lib.plotting"
