"""transformer_lib.plotting, and the rule that `import transformer_lib` does not import matplotlib."""
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lib.plotting import plot_attention, plot_attention_heads  # noqa: E402


def test_plot_attention_labels_and_values():
    w = torch.softmax(torch.randn(1, 1, 3, 4), -1)
    ax = plot_attention(w, list("abcd"), list("xyz"))
    assert [t.get_text() for t in ax.get_xticklabels()] == list("abcd")
    assert [t.get_text() for t in ax.get_yticklabels()] == list("xyz")
    assert ax.images[0].get_array().shape == (3, 4)


def test_plot_attention_rejects_mismatched_labels_and_shapes():
    with pytest.raises(ValueError, match="x_labels has 2 labels but the weights have 4"):
        plot_attention(torch.rand(3, 4), ["a", "b"])
    with pytest.raises(ValueError, match=r"must be a \(L_q, L_k\) matrix"):
        plot_attention(torch.rand(2, 3, 4))


def test_plot_heads_grid():
    fig = plot_attention_heads(torch.rand(1, 6, 3, 3), ncols=4)
    assert len(fig.axes) == 8 and sum(ax.axison for ax in fig.axes) == 6


def test_import_is_light():
    code = "import sys, transformer_lib; print('matplotlib' in sys.modules, 'tokenizers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
    code = "import transformer_lib as t; print(t.plot_attention.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "transformer_lib.plotting"
