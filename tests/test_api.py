"""What a reader meets first: one way to count parameters, and token labels that match the ids."""
import pytest
import torch

import transformer_lib
from transformer_lib import Transformer, TransformerConfig, count_parameters
from transformer_lib.model import parameter_count
from transformer_lib.multi_head_attention import MultiHeadAttention


@pytest.mark.parametrize("kw", [
    dict(),
    dict(share_embeddings=False, tgt_vocab_size=53),
    dict(tie_output=False, norm_first=True),
    dict(positional="learned", max_len=40),
])
def test_count_parameters_of_a_model_or_its_config(kw):
    cfg = TransformerConfig(**{"src_vocab_size": 61, "tgt_vocab_size": 61, "d_model": 32,
                               "n_heads": 4, "n_layers": 2, "d_ff": 64, **kw})
    with torch.device("meta"):
        model = Transformer(cfg)
    assert count_parameters(model) == count_parameters(cfg) == parameter_count(cfg)["total"]


def test_count_parameters_of_any_module():
    assert count_parameters(MultiHeadAttention(32, 4)) == 4 * 32**2 + 4 * 32
    frozen = torch.nn.Linear(3, 2)
    frozen.bias.requires_grad_(False)
    assert count_parameters(frozen) == 6                  # trainable parameters only


def test_count_parameters_is_the_one_top_level_way():
    assert transformer_lib.count_parameters is count_parameters
    assert "parameter_count" not in transformer_lib.__all__
    with pytest.raises(TypeError, match="nn.Module or a TransformerConfig, got str"):
        count_parameters("base")


def test_parameter_count_of_a_model_points_to_count_parameters():
    # was: AttributeError: 'Transformer' object has no attribute 'd_model'
    cfg = TransformerConfig(src_vocab_size=11, tgt_vocab_size=11, d_model=8, n_heads=2, n_layers=1,
                            d_ff=16)
    with pytest.raises(TypeError, match=r"count_parameters\(model\)"):
        parameter_count(Transformer(cfg))


@pytest.fixture(scope="module")
def tok():
    pytest.importorskip("tokenizers")
    from transformer_lib.text import SubwordTokenizer

    texts = ["Ein Mann fährt Fahrrad.", "A man rides a bike.", "Zwei Hunde spielen im Schnee.",
             "Two dogs play in the snow."] * 20
    return SubwordTokenizer.train(texts, vocab_size=320, min_frequency=1)


@pytest.mark.parametrize("text",
                         ["A man rides a bike.", "Zwei Hunde spielen.", "x", "", "Ünïcode ✓ 42"])
@pytest.mark.parametrize("add_bos, add_eos",
                         [(False, False), (True, False), (False, True), (True, True)])
def test_token_labels_line_up_with_the_ids(tok, text, add_bos, add_eos):
    ids = tok.encode(text, add_bos=add_bos, add_eos=add_eos)
    labels = tok.tokens(text, add_bos=add_bos, add_eos=add_eos)
    assert len(labels) == len(ids)
    assert labels == [tok.id_to_token(i) for i in ids]
    assert (labels[-1:] == ["<eos>"]) == add_eos and (labels[:1] == ["<bos>"]) == add_bos


def test_token_labels_without_flags_are_the_subwords(tok):
    text = "Two dogs play in the snow."
    assert tok.tokens(text) == tok.tokenizer.encode(text, add_special_tokens=False).tokens


def test_readme_parameter_count_is_true():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    n = count_parameters(TransformerConfig.base(37000))
    assert f"`count_parameters(TransformerConfig.base(37000))` is {n:,}" in readme
