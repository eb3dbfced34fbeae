"""One rule, one place: a probability of the model (a dropout, label smoothing) is checked by
`attention.check_probability` wherever it is given, with the same bounds and the same message, and
d_model against n_heads by `multi_head_attention.check_heads`."""
import pytest
import torch

from transformer_lib import (
    LabelSmoothingLoss,
    MultiHeadAttention,
    RecurrentConfig,
    RecurrentTranslator,
    Transformer,
    TransformerConfig,
    scaled_dot_product_attention,
)
from transformer_lib.attention import check_probability
from transformer_lib.recipe import Recipe, RecipeError, validate_recipe

MESSAGE = r"must be a probability in \[0, 1\), got "


def builders():
    q = torch.zeros(1, 2, 4)
    return {
        "dropout_p": lambda p: scaled_dot_product_attention(q, q, q, dropout_p=p),
        "MultiHeadAttention dropout": lambda p: MultiHeadAttention(8, 2, dropout=p),
        "TransformerConfig dropout": lambda p: Transformer(TransformerConfig(11, 11, 8, 2, 1, 16,
                                                                             dropout=p)),
        "TransformerConfig attn_dropout": lambda p: Transformer(TransformerConfig(
            11, 11, 8, 2, 1, 16, attn_dropout=p)),
        "RecurrentConfig dropout": lambda p: RecurrentTranslator(RecurrentConfig(
            11, 11, 8, 8, 8, dropout=p)),
        "LabelSmoothingLoss": lambda p: LabelSmoothingLoss(11, smoothing=p),
        "Recipe dropout": lambda p: validate_recipe(Recipe(dropout=p)),
        "Recipe label_smoothing": lambda p: validate_recipe(Recipe(label_smoothing=p)),
    }


@pytest.mark.parametrize("where", sorted(builders()))
@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5, float("nan")])
def test_every_probability_is_refused_alike(where, p):
    recipe_nan = where.startswith("Recipe") and p != p       # a recipe refuses NaN sooner
    with pytest.raises(ValueError, match="must be a finite number" if recipe_nan else MESSAGE):
        builders()[where](p)


@pytest.mark.parametrize("where", sorted(builders()))
def test_every_probability_below_one_is_taken(where):
    builders()[where](0.999)


def test_a_recipe_says_recipe_error():
    with pytest.raises(RecipeError, match="ffn_dropout " + MESSAGE):
        validate_recipe(Recipe(ffn_dropout=1.0))


def test_the_rule_itself():
    for p in (0, 0.0, 0.5, 0.999):
        check_probability(p, "p")
    for p in ("0.1", None, 1, True):
        with pytest.raises(ValueError, match="p " + MESSAGE):
            check_probability(p, "p")


HEADS = (r"d_model must be divisible by n_heads \(each head gets d_k = d_model / n_heads "
         r"features\), got d_model=10, n_heads=3")


@pytest.mark.parametrize("where", ["MultiHeadAttention", "TransformerConfig", "Recipe"])
def test_d_model_and_n_heads_are_checked_by_one_rule(where):
    build = {"MultiHeadAttention": lambda: MultiHeadAttention(10, 3),
             "TransformerConfig": lambda: Transformer(TransformerConfig(11, 11, 10, 3, 1, 16)),
             "Recipe": lambda: validate_recipe(Recipe(d_model=10, n_heads=3))}[where]
    with pytest.raises(RecipeError if where == "Recipe" else ValueError, match=HEADS):
        build()
