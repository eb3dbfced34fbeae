"""The exercise checkers (transformer_lib.exercises, one module per exercise): each accepts the
reference solution and rejects plausible wrong answers, naming the mistake; the unsolved exercise
notebooks fail their checks; and no exercise's answer is one import away.

Solutions are the cells tagged "solution" in notebooks/exercises/solutions/*.ipynb, loaded by
conftest's `solution` (the package does not hold them); the reader's stubs are the cells tagged
"exercise".
"""
import ast
import importlib
import json
import pkgutil
from pathlib import Path

import pytest
import torch
from conftest import EXERCISES, solution, tagged_cells
from torch import nn

import transformer_lib
from transformer_lib import exercises as ex
from transformer_lib.exercises import char_model as ex3
from transformer_lib.exercises import positions as ex2m
from transformer_lib.exercises import pre_ln as ex1m
from transformer_lib.exercises import reading_heads as ex4m
from transformer_lib.exercises import rope as ex5m
from transformer_lib.layer_norm import LayerNorm, ResidualConnection
from transformer_lib.masking import make_causal_mask
from transformer_lib.multi_head_attention import MultiHeadAttention
from transformer_lib.toy import PAD, make_toy_pairs, toy_split
from transformer_lib.training import collate, get_batch

ROOT = Path(__file__).resolve().parents[1]
EX3 = solution("ex3_char_model")        # the reader writes these three; the package gives the rest
CharModel, split_text, generate = EX3["CharModel"], EX3["split_text"], EX3["generate"]


def fails(result, *words):
    """The check failed, and its message or hint names the mistake."""
    text = (result.message + " " + result.hint).lower()
    return not result.passed and all(w.lower() in text for w in words)


@pytest.fixture(scope="module")
def ex1():
    return solution("ex1_pre_ln")


@pytest.fixture(scope="module")
def ex2():
    return solution("ex2_positions")


@pytest.fixture(scope="module")
def ex4():
    return solution("ex4_reading_heads")


@pytest.fixture(scope="module")
def ex5():
    return solution("ex5_rope")


# --- the checker machinery ------------------------------------------------------------------------

def test_checker_reports_an_exception_in_the_readers_code_instead_of_raising(capsys):
    def broken(model):
        raise KeyError("oops")
    result = ex1m.check_pre_ln(broken)
    assert not result.passed and "KeyError" in result.message
    assert "✗" in capsys.readouterr().out


def test_checker_names_the_line_of_the_readers_code_not_of_torch():
    def make_pre_ln(model):
        return nn.Linear(2, 3)(torch.zeros(4))          # fails inside torch.nn
    result = ex1m.check_pre_ln(make_pre_ln)
    assert (not result.passed and "RuntimeError" in result.message
            and "in make_pre_ln" in result.message)


def test_check_result_prints_verdict_and_hint():
    assert str(ex.CheckResult("E", True, "fine")) == "✓ E: fine"
    assert str(ex.CheckResult("E", False, "bad", "do x")) == "✗ E: bad\n  Hint: do x"
    assert not ex.CheckResult("E", False, "bad")


# --- exercise 1: pre-LN ---------------------------------------------------------------------------

def test_pre_ln_accepts_solution(ex1):
    assert ex1m.check_pre_ln(ex1["make_pre_ln"]).passed


def _without_final_norm(ex1):
    def make(model):
        model = ex1["make_pre_ln"](model)
        model.encoder.norm = model.decoder.norm = None
        return model
    return make


def _swap_residuals(model, layers, make):
    """Replace every ResidualConnection of `layers` by make() and give both stacks a final
    LayerNorm."""
    for layer in layers:
        for name, child in list(layer.named_children()):
            if isinstance(child, ResidualConnection):
                setattr(layer, name, make())
    d = model.config.d_model
    model.encoder.norm, model.decoder.norm = LayerNorm(d), LayerNorm(d)
    return model


def _normed_residual(model):
    d = model.config.d_model

    class Wrong(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = LayerNorm(d)

        def forward(self, x, sublayer):
            h = self.norm(x)
            return h + sublayer(h)
    return _swap_residuals(model, [*model.encoder.layers, *model.decoder.layers], Wrong)


def _only_encoder_converted(ex1):      # the decoder's layers are left post-LN
    def make(model):
        d = model.config.d_model
        return _swap_residuals(model, model.encoder.layers, lambda: ex1["PreLNResidual"](d))
    return make


def _final_norm_on_encoder_only(ex1):
    def make(model):
        model = ex1["make_pre_ln"](model)
        model.decoder.norm = None
        return model
    return make


def _dropout_dropped(ex1):          # right in evaluation mode, but every new residual has p = 0
    def make(model):
        d = model.config.d_model
        return _swap_residuals(model, [*model.encoder.layers, *model.decoder.layers],
                               lambda: ex1["PreLNResidual"](d))
    return make


def _fresh_model(model):          # builds a new pre-LN model: right architecture, new weights
    return ex.toy_model(n_layers=2, d_model=16, n_heads=2, norm_first=True, seed=99)


@pytest.mark.parametrize("wrong, words", [
    (lambda m: m, ["post-LN Transformer"]),
    ("no_final_norm", ["encoder and the decoder", "final LayerNorm"]),
    ("decoder_post_ln", ["decoder is still post-LN", "encoder is right", "model.decoder.layers"]),
    ("decoder_no_final_norm",
     ["decoder is pre-LN", "not normalised", "model.decoder.norm", "encoder is right"]),
    ("dropout_dropped", ["dropout layers now have p = 0", "child.dropout.p"]),
    (_normed_residual, ["LN(x)"]),
    (_fresh_model, ["keep every existing weight"]),
    (lambda m: None, ["return model"]),
], ids=["unchanged", "no-final-norm", "decoder-post-ln", "decoder-no-final-norm", "dropout-dropped",
        "normed-residual", "new-weights", "returns-none"])
def test_pre_ln_rejects_wrong_answers(ex1, wrong, words):
    built_from_solution = {"no_final_norm": _without_final_norm,
                           "decoder_post_ln": _only_encoder_converted,
                           "decoder_no_final_norm": _final_norm_on_encoder_only,
                           "dropout_dropped": _dropout_dropped}
    make = built_from_solution[wrong](ex1) if isinstance(wrong, str) else wrong
    assert fails(ex1m.check_pre_ln(make), *words)


def test_pre_ln_trains_accepts_the_real_experiment(ex1):
    """The solution's experiment, shortened: pre-LN without warm-up ends clearly below post-LN."""
    pairs, _ = toy_split("reverse", 6400, 200, n_symbols=10, min_len=1, max_len=10, seed=0)
    post = ex.train_toy(ex.toy_model(seed=0), pairs, steps=100, lr=5e-3)
    pre = ex.train_toy(ex1["make_pre_ln"](ex.toy_model(seed=0)), pairs, steps=100, lr=5e-3)
    assert ex1m.check_pre_ln_trains(post, pre).passed


def test_pre_ln_trains_rejects_wrong_answers():
    post = [2.0] * 30
    assert fails(ex1m.check_pre_ln_trains(post, list(post)), "identical")
    assert fails(ex1m.check_pre_ln_trains(post, [1.9] * 30), "not clearly lower")
    assert fails(ex1m.check_pre_ln_trains(post, [1.0] * 5), "at least 20")
    assert fails(ex1m.check_pre_ln_trains(post, [float("nan")] * 30), "non-finite")
    assert ex1m.check_pre_ln_trains(post, [1.0] * 30).passed


def test_toy_training_is_reproducible():
    pairs, _ = toy_split("copy", 200, 10, seed=0)
    a = ex.train_toy(ex.toy_model(n_layers=1, d_model=16, seed=0), pairs, steps=5, lr=1e-3)
    b = ex.train_toy(ex.toy_model(n_layers=1, d_model=16, seed=0), pairs, steps=5, lr=1e-3)
    assert a == b and a[-1] < a[0]
    assert ex.smooth([1.0, 3.0, 5.0], window=2) == [1.0, 2.0, 4.0]


# --- exercise 2: positions ------------------------------------------------------------------------

def test_accuracy_by_position_accepts_solution(ex2):
    assert ex2m.check_accuracy_by_position(ex2["accuracy_by_position"]).passed


def _acc_train_mode(model, pairs):
    batch = collate(pairs, PAD)
    pred = model(batch.src, batch.tgt_in).argmax(-1)
    real = batch.tgt_out != PAD
    return ((pred == batch.tgt_out) & real).sum(0) / real.sum(0)


def _acc_pads_counted(model, pairs):
    model.eval()
    batch = collate(pairs, PAD)
    return (model(batch.src, batch.tgt_in).argmax(-1) == batch.tgt_out).float().mean(0)


def _acc_over_batch(model, pairs):
    model.eval()
    batch = collate(pairs, PAD)
    pred = model(batch.src, batch.tgt_in).argmax(-1)
    return ((pred == batch.tgt_out) & (batch.tgt_out != PAD)).float().mean(0)


def _acc_against_tgt_in(model, pairs):    # compares the predictions with the decoder's inputs
    model.eval()
    batch = collate(pairs, PAD)
    pred = model(batch.src, batch.tgt_in).argmax(-1)
    real = batch.tgt_out != PAD
    return ((pred == batch.tgt_in) & real).sum(0) / real.sum(0)


def _acc_overall(model, pairs):
    model.eval()
    batch = collate(pairs, PAD)
    pred = model(batch.src, batch.tgt_in).argmax(-1)
    real = batch.tgt_out != PAD
    return (((pred == batch.tgt_out) & real).sum() / real.sum()).expand(batch.tgt_out.shape[1])


@pytest.mark.parametrize("wrong, words", [
    (_acc_train_mode, ["training mode", "eval"]),
    (_acc_pads_counted, ["padding"]),
    (_acc_over_batch, ["batch size"]),
    (_acc_against_tgt_in, ["tgt_in", "tgt_out"]),
    (_acc_overall, ["differ"]),
    (lambda model, pairs: None, ["None"]),
], ids=["train-mode", "pads-counted", "over-batch", "against-tgt-in", "one-number", "none"])
def test_accuracy_by_position_rejects_wrong_answers(wrong, words):
    assert fails(ex2m.check_accuracy_by_position(wrong), *words)


def test_extrapolation_set_accepts_solution(ex2):
    assert ex2m.check_extrapolation_set(ex2["test_pairs"], ex2["TRAIN_MAX_LEN"]).passed


@pytest.mark.parametrize("pairs, words", [
    (make_toy_pairs("copy", 100, max_len=8, seed=1), ["within the training range"]),
    (make_toy_pairs("copy", 100, max_len=12, seed=1), ["go up to 16"]),
    (make_toy_pairs("copy", 100, min_len=9, max_len=16, seed=1), ["no test sequence is within"]),
    (make_toy_pairs("reverse", 100, max_len=16, seed=1), ["not copy pairs"]),
    (None, ["empty"]),
], ids=["in-range-only", "too-short", "only-long", "wrong-task", "none"])
def test_extrapolation_set_rejects_wrong_answers(pairs, words):
    assert fails(ex2m.check_extrapolation_set(pairs, 8), *words)


# --- exercise 3: character model ------------------------------------------------------------------

@pytest.mark.needs_data("tinyshakespeare")
def test_split_accepts_solution_and_rejects_wrong_splits():
    from transformer_lib.data import load_tiny_shakespeare
    text = load_tiny_shakespeare()
    assert len(text) == ex3.TINY_SHAKESPEARE_CHARS
    assert ex3.check_split(*split_text(text)).passed
    n = int(0.9 * len(text))
    assert fails(ex3.check_split(*split_text(text, 0.8)), "not 90%")
    assert fails(ex3.check_split(text[:n + 1], text[n:]), "must not overlap")
    assert fails(ex3.check_split("".join(sorted(text[:n])), text[n:]), "without shuffling")
    assert fails(ex3.check_split(None, None), "strings")


def test_char_model_accepts_solution():
    assert ex3.check_char_model(CharModel).passed


def test_char_model_causal_by_name_equals_the_explicit_causal_mask():
    """The solution passes is_causal=True to its blocks; that is the model with
    make_causal_mask(T)."""
    torch.manual_seed(0)
    model = CharModel(11, block_size=16, d_model=32, n_heads=4, n_layers=2).double().eval()
    idx = torch.randint(0, 11, (3, 16))
    with torch.no_grad():
        x = model.tok_embed(idx) + model.pos_embed.weight[:16]
        for block in model.blocks:
            x = block(x, make_causal_mask(16))
        assert torch.allclose(model(idx), model.head(model.norm(x)), atol=1e-12)


def test_char_model_check_leaves_the_fast_attention_path_on():
    model = CharModel(11, block_size=16, d_model=32, n_heads=4, n_layers=2)
    ex3._check_attends_to_itself(model, torch.zeros(1, 16, dtype=torch.long))
    assert not any(m.need_weights for m in model.modules() if isinstance(m, MultiHeadAttention))


class _NoMask(CharModel):          # sees the future
    def forward(self, idx):
        x = self.drop(self.tok_embed(idx) + self.pos_embed.weight[:idx.shape[1]])
        for block in self.blocks:
            x = block(x, None)
        return self.head(self.norm(x))


class _OnlyItself(CharModel):      # attends to its own position only: a bigram model
    def forward(self, idx):
        T = idx.shape[1]
        x = self.drop(self.tok_embed(idx) + self.pos_embed.weight[:T])
        mask = torch.eye(T, dtype=torch.bool)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


class _StrictlyLowerMask(CharModel):
    # off-by-one: the diagonal masked out; causal and uses the past
    def forward(self, idx):
        T = idx.shape[1]
        x = self.drop(self.tok_embed(idx) + self.pos_embed.weight[:T])
        mask = torch.ones(T, T, dtype=torch.bool).tril(-1)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


class _OneFutureToken(CharModel):     # off-by-one the other way: sees position t + 1
    def forward(self, idx):
        T = idx.shape[1]
        x = self.drop(self.tok_embed(idx) + self.pos_embed.weight[:T])
        mask = torch.ones(T, T, dtype=torch.bool).tril(1)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


class _Untied(CharModel):            # an output layer of its own
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.head = nn.Linear(self.tok_embed.embedding_dim, self.vocab_size, bias=False)


class _NoBlockSize(CharModel):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        del self.block_size


class _Mlp(nn.Module):                  # no transformer_lib attention at all
    def __init__(self, vocab_size, block_size, d_model, n_heads, n_layers, dropout):
        super().__init__()
        self.block_size = block_size
        self.net = nn.Sequential(nn.Embedding(vocab_size, d_model), nn.Linear(d_model, vocab_size))

    def forward(self, idx):
        return self.net(idx)


@pytest.mark.parametrize("wrong, words", [
    (_NoMask, ["sees the future", "make_causal_mask"]),
    (_OneFutureToken, ["sees the future"]),
    (_StrictlyLowerMask, ["diagonal", "off-by-one"]),
    (_OnlyItself, ["do not depend"]),
    (_Untied, ["not tied", "self.head.weight = self.tok_embed.weight"]),
    (_NoBlockSize, ["block_size"]),
    (_Mlp, ["MultiHeadAttention"]),
    (None, ["None"]),
], ids=["no-causal-mask", "one-future-token", "diagonal-masked", "bigram", "untied",
        "no-block-size", "no-attention", "none"])
def test_char_model_rejects_wrong_answers(wrong, words):
    assert fails(ex3.check_char_model(wrong), *words)


def test_sampling_accepts_solution():
    assert ex3.check_sampling(generate).passed


def _sampler(logits_fn, crop=True, position=-1):
    @torch.no_grad()
    def generate(model, idx, max_new_tokens, temperature=1.0):
        for _ in range(max_new_tokens):
            ctx = idx[:, -model.block_size:] if crop else idx
            z = model(ctx)[:, position]
            idx = torch.cat([idx, logits_fn(z, temperature)], dim=1)
        return idx
    return generate


@pytest.mark.parametrize("wrong, words", [
    (_sampler(lambda z, t: torch.multinomial(torch.softmax(z * t, -1), 1)), ["multiplied"]),
    (_sampler(lambda z, t: torch.multinomial(torch.softmax(z, -1), 1)), ["divide the logits"]),
    (_sampler(lambda z, t: z.argmax(-1, keepdim=True)), ["greedy"]),
    (_sampler(lambda z, t: torch.multinomial(torch.softmax(z / t, -1), 1), crop=False),
     ["block_size"]),
    (_sampler(lambda z, t: torch.multinomial(torch.softmax(z / t, -1), 1), position=0),
     ["first position"]),
    (lambda model, idx, n, temperature=1.0: idx, ["expected (2, 15)"]),
], ids=["multiplied", "no-temperature", "greedy", "no-crop", "first-position", "stub"])
def test_sampling_rejects_wrong_answers(wrong, words):
    assert fails(ex3.check_sampling(wrong), *words)


@pytest.mark.needs_data("tinyshakespeare")
def test_char_model_trained_accepts_a_trained_model_and_rejects_an_untrained_one():
    from transformer_lib.data import load_tiny_shakespeare
    text = load_tiny_shakespeare()
    tok = ex3.CharTokenizer(text)
    train_ids, val_ids = (tok.encode(part) for part in split_text(text))
    torch.manual_seed(0)
    model = CharModel.from_config(ex3.CharModelConfig.cpu(tok.vocab_size))
    assert fails(ex3.check_char_model_trained(model, val_ids, 64), "not below the bigram entropy")
    with ex.single_thread():
        ex3.train_char_model(model, train_ids, val_ids, batch_size=32, lr=3e-3, min_lr=3e-4,
                             warmup_steps=20, max_steps=300, eval_batches=2, log=None)
    assert ex3.check_char_model_trained(model, val_ids, 64).passed


def test_char_model_time_budget_schedule_and_batches():
    data = torch.arange(500) % 7
    x, y = get_batch(data, 16, 4, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 16) and torch.equal(x[:, 1:], y[:, :-1])
    model = CharModel(7, block_size=16, d_model=16, n_heads=2, n_layers=1)
    with ex.single_thread():
        history = ex3.train_char_model(model, data, data, batch_size=4, time_budget_s=0.5,
                                       warmup_steps=2, eval_batches=1, log=None)
    # the cosine has decayed
    assert history[-1]["train_s"] >= 0.5 and history[-1]["lr"] < 0.3 * 1e-3
    with pytest.raises(ValueError, match="exactly one"):
        ex3.train_char_model(model, data, data, batch_size=4, max_steps=2, time_budget_s=1.0)
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(1, 17, dtype=torch.long))


# --- exercise 4: reading heads --------------------------------------------------------------------

def test_cross_attention_weights_accepts_solution(ex4):
    assert ex4m.check_cross_attention_weights(ex4["cross_attention_weights"]).passed


def _weights_of(attr, set_eval=True):
    def read(model, src, tgt_in):
        if set_eval:
            model.eval()
        mods = [getattr(layer, attr) for layer in model.decoder.layers]
        for m in mods:
            m.need_weights = True
        with torch.no_grad():
            model(src, tgt_in)
        return torch.stack([m.attn_weights for m in mods])
    return read


def _forgot_need_weights(model, src, tgt_in):
    model.eval()
    with torch.no_grad():
        model(src, tgt_in)
    return torch.stack([layer.cross_attn.attn_weights for layer in model.decoder.layers])


@pytest.mark.parametrize("wrong, words", [
    (_weights_of("self_attn"), ["self-attention"]),
    (_weights_of("cross_attn", set_eval=False), ["model.eval()"]),
    (_forgot_need_weights, ["raised"]),
    (lambda model, src, tgt_in: None, ["need_weights"]),
], ids=["self-attention", "train-mode", "no-need-weights", "none"])
def test_cross_attention_weights_rejects_wrong_answers(wrong, words):
    assert fails(ex4m.check_cross_attention_weights(wrong), *words)


def test_reversal_score_accepts_solution(ex4):
    assert ex4m.check_reversal_score(ex4["reversal_score"]).passed


def test_reversal_score_rejects_wrong_answers(ex4):
    score = ex4["reversal_score"]
    padded = lambda w, n: score(w, torch.full_like(n, w.shape[2]))                 # noqa: E731
    assert fails(ex4m.check_reversal_score(padded), "padded length")

    def off_by_one(w, n):
        total, count = torch.zeros(w.shape[1]), 0
        for b, nb in enumerate(n.tolist()):
            for t in range(nb):
                total += w[b, :, t, nb - t]
                count += 1
        return total / count
    assert fails(ex4m.check_reversal_score(off_by_one), "reads source position n-t", "off-by-one")

    def mean_of_means(w, n):
        return torch.stack([score(w[b:b + 1], n[b:b + 1]) for b in range(len(n))]).mean(0)
    assert fails(ex4m.check_reversal_score(mean_of_means), "per-sequence means")
    assert fails(ex4m.check_reversal_score(lambda w, n: None), "None")


# --- exercise 5: RoPE -----------------------------------------------------------------------------

def test_rope_accepts_solution(ex5):
    assert ex5m.check_rope(ex5["rope"]).passed


@pytest.mark.parametrize("wrong, words", [
    (lambda x, offset=0: ex5m._rope_reference(x, offset, layout="halves"), ["GPT-NeoX"]),
    (lambda x, offset=0: ex5m._rope_reference(x, 0, sign=-1.0), ["offset"]),
    (lambda x, offset=0: ex5m._rope_reference(x, offset) if offset in (0, 5) else x,
     ["shift by the same amount"]),
    (lambda x, offset=0: ex5m._rope_reference(x, 0), ["offset"]),
    (lambda x, offset=0: ex5m._rope_reference(x, offset + 1), ["counted from 1"]),
    (lambda x, offset=0: ex5m._rope_reference(x, offset, step=1), ["10000^(-i/d)"]),
    (lambda x, offset=0: ex5m._rope_reference(x, offset, base=500.0), ["differs"]),
    (lambda x, offset=0: x, ["unchanged"]),
    (lambda x, offset=0: 1.5 * ex5m._rope_reference(x, offset), ["lengths change"]),
], ids=["halves", "other-way-no-offset", "not-relative", "no-offset", "from-one", "frequencies",
        "wrong-base", "identity", "scaled"])
def test_rope_rejects_wrong_answers(wrong, words):
    assert fails(ex5m.check_rope(wrong), *words)


def test_rope_accepts_either_rotation_direction():
    """R_m = [[cos, −sin], [sin, cos]] (exercise 5) and chapter 6's R(θ) = [[cos, sin], [−sin, cos]]
    turn the other way; with either, q_m·k_n depends only on n − m, so both are RoPE."""
    result = ex5m.check_rope(lambda x, offset=0: ex5m._rope_reference(x, offset, sign=-1.0))
    assert result.passed and "other way" in result.message and "n − m" in result.message


def test_rotary_attention_accepts_either_rotation_direction(ex5):
    from transformer_lib.multi_head_attention import MultiHeadAttention

    class OtherWay(MultiHeadAttention):
        def forward(self, query, key, value, mask=None, cache=None, static_kv=False,
                    is_causal=False):
            if is_causal:
                mask = ex5m.make_causal_mask(query.shape[1])
            return ex5m._rotary_reference(self, query, mask, sign=-1.0)

    assert ex5m.check_rotary_attention(OtherWay).passed


def test_relative_test_accepts_solution(ex5):
    assert ex5m.check_relative_test(ex5["relative_property_holds"]).passed


def _norm_only(rope_fn):
    x = torch.randn(5, 8, dtype=torch.float64)
    return bool(torch.allclose(rope_fn(x).norm(dim=-1), x.norm(dim=-1)))


def _same_position_only(rope_fn):      # compares only m == n with the unrotated score: the m^2
                                       # rotation passes
    q, k = torch.randn(2, 1, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    return all(bool(torch.allclose(rope_fn(q, offset=m) @ rope_fn(k, offset=m).T, q @ k.T))
               for m in range(5))


@pytest.mark.parametrize("wrong, words", [
    (_norm_only, ["accepts"]),
    (_same_position_only, ["accepts rotation by m²θ"]),
    (lambda rope_fn: True, ["accepts"]),
    (lambda rope_fn: False, ["rejects the reference"]),
    (lambda rope_fn: "yes", ["return True or False"]),
], ids=["norm-only", "same-position-only", "always-true", "always-false", "not-bool"])
def test_relative_test_rejects_wrong_answers(wrong, words):
    assert fails(ex5m.check_relative_test(wrong), *words)


def test_rotary_attention_accepts_solution(ex5):
    assert ex5m.check_rotary_attention(ex5["RotaryMultiHeadAttention"]).passed


def _rotary(use_mask=True, **kwargs):
    class Wrong(MultiHeadAttention):
        def forward(self, query, key, value, mask=None, cache=None, static_kv=False,
                    is_causal=False):
            if is_causal:
                mask = make_causal_mask(query.shape[1])
            return ex5m._rotary_reference(self, query, mask if use_mask else None, **kwargs)
    return Wrong


def _rotary_from_solution(ex5, signature_without_is_causal=False):
    """The solution's module, but is_causal ignored (or not even accepted)."""
    class Wrong(ex5["RotaryMultiHeadAttention"]):
        def forward(self, query, key, value, mask=None, cache=None, static_kv=False, **kwargs):
            if signature_without_is_causal and kwargs:
                raise TypeError("forward() got an unexpected keyword argument "
                                f"{next(iter(kwargs))!r}")
            return super().forward(query, key, value, mask)
    return Wrong


def _rotary_unscaled(ex5):         # written out by hand, as a reader would, without the 1/sqrt(d_k)
    rope = ex5["rope"]

    class Wrong(MultiHeadAttention):
        def forward(self, query, key, value, mask=None, cache=None, static_kv=False):
            B, L, d = query.shape
            # (B, h, L, d_k)
            q, k, v = (self.split_heads(t) for t in self.in_proj(query).chunk(3, dim=-1))
            scores = rope(q) @ rope(k).transpose(-2, -1)                              # (B, h, L, L)
            weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
            return self.out_proj((weights @ v).transpose(1, 2).reshape(B, L, d))
    return Wrong


@pytest.mark.parametrize("wrong, words", [
    (_rotary(rotate_k=False), ["only the queries", "keys too"]),
    (_rotary(per_head=False), ["before splitting the heads"]),
    (_rotary(rotate_v=True), ["values are rotated"]),
    ("unscaled", ["not divided by √d_k"]),
    ("ignores_is_causal", ["is_causal=True gives another output", "make_causal_mask"]),
    ("no_is_causal", ["does not take the argument is_causal"]),
    (_rotary(scale="d_model"), ["√d_model instead of √d_k"]),
    (_rotary(use_mask=False), ["mask is ignored"]),
    (MultiHeadAttention, ["nothing is rotated"]),
], ids=["keys-unrotated", "over-d-model", "values-rotated", "unscaled", "ignores-is-causal",
        "no-is-causal", "scaled-by-d-model", "mask-ignored", "plain"])
def test_rotary_attention_rejects_wrong_answers(ex5, wrong, words):
    built_from_solution = {
        "unscaled": _rotary_unscaled, "ignores_is_causal": _rotary_from_solution,
        "no_is_causal": lambda ex5: _rotary_from_solution(ex5, signature_without_is_causal=True)}
    wrong = built_from_solution[wrong](ex5) if isinstance(wrong, str) else wrong
    assert fails(ex5m.check_rotary_attention(wrong), *words)


def test_rotary_attention_scores_depend_only_on_offset(ex5):
    """The relative property at the level of the module: with the same token at every position,
    log w[m, n] - log w[m, m] = S[m, n] - S[m, m] depends on n - m only."""
    torch.manual_seed(0)
    attn = ex5["RotaryMultiHeadAttention"](16, 2).double().eval()
    attn.need_weights = True
    x = torch.randn(1, 1, 16, dtype=torch.float64).expand(1, 6, 16).contiguous()
    attn(x, x, x)
    log_w = attn.attn_weights[0].log()                                   # (h, 6, 6), no mask
    rel = log_w - log_w.diagonal(dim1=-2, dim2=-1)[..., :, None]         # (h, 6, 6)
    for o in range(-5, 6):
        d = rel.diagonal(o, dim1=-2, dim2=-1)                            # (h, 6 - |o|)
        assert torch.allclose(d, d[:, :1].expand_as(d), atol=1e-9)
    plain = MultiHeadAttention(16, 2).double().eval()
    plain.need_weights = True
    plain(x, x, x)
    # no positions: uniform
    assert torch.allclose(plain.attn_weights, torch.full_like(plain.attn_weights, 1 / 6))


# --- the unsolved notebooks fail their checks -----------------------------------------------------

def _stub(name):
    return tagged_cells(EXERCISES / f"{name}.ipynb", "exercise")


def test_unsolved_exercise_stubs_fail_their_checks():
    s1 = _stub("ex1_pre_ln")
    assert not ex1m.check_pre_ln(s1["make_pre_ln"]).passed
    s2 = _stub("ex2_positions")
    assert not ex2m.check_accuracy_by_position(s2["accuracy_by_position"]).passed
    assert not ex2m.check_extrapolation_set(s2["test_pairs"], s2["TRAIN_MAX_LEN"]).passed
    s4 = _stub("ex4_reading_heads")
    assert not ex4m.check_cross_attention_weights(s4["cross_attention_weights"]).passed
    assert not ex4m.check_reversal_score(s4["reversal_score"]).passed
    s5 = _stub("ex5_rope")
    assert not ex5m.check_rope(s5["rope"]).passed
    assert not ex5m.check_relative_test(s5["relative_property_holds"]).passed
    assert not ex5m.check_rotary_attention(s5["RotaryMultiHeadAttention"]).passed


@pytest.mark.needs_data("tinyshakespeare")
def test_unsolved_char_model_stub_fails_its_checks():
    s3 = _stub("ex3_char_model")
    assert not ex3.check_split(s3["train_text"], s3["val_text"]).passed
    assert not ex3.check_char_model(s3["CharModel"]).passed
    assert not ex3.check_sampling(s3["generate"]).passed


def test_checkers_do_not_change_global_state(ex1):
    threads = torch.get_num_threads()
    ex1m.check_pre_ln(ex1["make_pre_ln"])
    assert torch.get_num_threads() == threads


def test_committed_cpu_char_record_matches_the_cpu_configuration():
    """results/char-shakespeare-cpu-10min.json (the exercise 3 solution points to it) is a run of
    CharModelConfig.cpu as it is now, with a loss history that ends at the quoted loss."""
    rec = json.loads((Path(__file__).resolve().parents[1] / "results"
                      / "char-shakespeare-cpu-10min.json").read_text())
    torch.manual_seed(0)
    assert (rec["parameters"]
            == sum(p.numel()
                   for p in CharModel.from_config(ex3.CharModelConfig.cpu(65)).parameters()))
    assert rec["device"] == "cpu" and rec["budget_s"] == 600 and rec["compile"] is False
    assert rec["history"][-1]["val_loss"] == rec["final_val_loss"] == 1.5674
    assert [round(h["val_loss"], 3) for h in rec["history"]
            if round(h["train_s"]) in (100, 300)] == [1.737, 1.648]


# --- exercise 5's character model is exercise 3's design ------------------------------------------

def test_rope_char_model_is_the_reference_char_model_from_the_same_seed():
    torch.manual_seed(0)
    want = CharModel(11, block_size=64, d_model=64, n_heads=4, n_layers=2)
    torch.manual_seed(0)
    got = ex5m.rope_char_model(11)
    assert [(n, p.shape) for n, p in got.named_parameters()] \
        == [(n, p.shape) for n, p in want.named_parameters()]
    assert all(torch.equal(p, q) for p, q in zip(got.parameters(), want.parameters()))
    idx = torch.randint(0, 11, (2, 64))
    with torch.no_grad():
        assert torch.equal(got.eval()(idx), want.eval()(idx))


def test_rope_char_model_puts_the_attention_given_in_every_block(ex5):
    rotary = ex5["RotaryMultiHeadAttention"]
    torch.manual_seed(0)
    want = CharModel(11, block_size=64, d_model=64, n_heads=4, n_layers=2, positional="none")
    torch.manual_seed(0)
    got = ex5m.rope_char_model(11, rotary)
    assert got.pos_embed is None and all(type(b.self_attn) is rotary for b in got.blocks)
    assert all(torch.equal(p, q) for p, q in zip(got.parameters(), want.parameters()))


# --- no exercise's answer is one import away ------------------------------------------------------

def _package_modules():
    """Every module of transformer_lib, imported (a module whose optional extra is missing is left
    out)."""
    modules = [transformer_lib]
    for info in pkgutil.walk_packages(transformer_lib.__path__, "transformer_lib."):
        try:
            modules.append(importlib.import_module(info.name))
        except ModuleNotFoundError as e:
            if (e.name or "").startswith("transformer_lib"):
                raise
    return modules


def _asked_for(name: str) -> set[str]:
    """The functions and classes an exercise asks the reader to write: those its stub defines."""
    nb = json.loads((EXERCISES / f"{name}.ipynb").read_text())
    return {node.name for c in nb["cells"]
            if c["cell_type"] == "code" and "exercise" in c["metadata"].get("tags", [])
            for node in ast.parse("".join(c["source"])).body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


def test_no_exercise_answer_is_importable_under_the_name_it_is_asked_for():
    asked = set().union(*(_asked_for(p.stem) for p in sorted(EXERCISES.glob("ex[0-9]_*.ipynb"))))
    assert {"CharModel", "generate", "make_pre_ln", "rope", "RotaryMultiHeadAttention"} <= asked
    asked |= {"split_text"}                # exercise 3: step 1, which its stub leaves inline
    found = [f"{m.__name__}.{name}" for m in _package_modules() for name in sorted(asked)
             if callable(getattr(m, name, None))]
    assert not found, f"an exercise's answer is in the package: {found}"


def test_checkers_live_only_in_transformer_lib_exercises():
    """No module outside transformer_lib/exercises/ imports the checker machinery or defines a
    checker; each exercise module's public check_* functions are checkers (decorated)."""
    package = ROOT / "transformer_lib"
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text())
        decorated = {node.name for node in ast.walk(tree)
                     if isinstance(node, ast.FunctionDef) and any(
                         isinstance(d, ast.Call) and getattr(d.func, "id", "") == "checker"
                         for d in node.decorator_list)}
        if "exercises" in path.relative_to(package).parts:
            if path.name != "__init__.py":
                public = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)
                          and node.name.startswith("check_")}
                assert public and public <= decorated, (path.name, public - decorated)
            continue
        imports = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                   and "exercises" in (node.module or "").split(".")]
        assert not imports and not decorated, f"{path.name}: a checker outside exercises/"
