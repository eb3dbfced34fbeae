"""transformer_lib: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017), built one
component at a time in the *Attention, Derived* notebooks (every module is exported from one).

Mask convention, everywhere in the package: masks are boolean and ``True`` means "may attend";
a mask broadcasts to (B, h, L_q, L_k).

The model modules import only torch. Plotting (matplotlib), data, tokenizers, BLEU and the trainer
live in their own modules; the names re-exported here from those modules are loaded on first use,
so ``import transformer_lib`` never imports matplotlib.

``transformer_lib.train`` is always the capstone's module (chapter 18; ``python -m
transformer_lib.train`` is its command line), whatever was imported first; the training loop of
chapter 13 is ``transformer_lib.training.train``.
"""

__version__ = "0.4.0"

# --- Chapter 01: self-attention with no parameters ------------------------------------------------
from .self_attention import basic_self_attention

# --- Part I: attention (chapters 02-05) -----------------------------------------------------------
# isort: split
from .attention import scaled_dot_product_attention
from .interop import from_torch
from .masking import make_causal_mask, make_padding_mask
from .multi_head_attention import MultiHeadAttention, count_parameters

# --- Part II: the Transformer (chapters 06-12) ----------------------------------------------------
# isort: split
from .decoder import Decoder, DecoderLayer, reorder_cache
from .encoder import Encoder, EncoderLayer
from .feed_forward import PositionwiseFeedForward
from .layer_norm import LayerNorm, ResidualConnection
from .model import Transformer, TransformerConfig
from .positional import LearnedPositionalEmbedding, PositionalEncoding, sinusoidal_encoding

# --- Part III: training and decoding (chapters 13-16) ---------------------------------------------
# isort: split
from .decoding import beam_search, greedy_decode, length_penalty
from .optimization import (
    CheckpointError,
    LabelSmoothingLoss,
    WarmupSchedule,
    average_checkpoints,
    load_checkpoint,
    paper_adam,
    save_checkpoint,
    warmup_lr,
)

# --- Chapter 20: a recurrent baseline (RNNsearch, Bahdanau et al., 2015) ------------------------
# isort: split
from .recurrent import RecurrentConfig, RecurrentTranslator

# --- Loaded on first use (they import matplotlib, tokenizers, ... ) -------------------------------
_LAZY = {
    "plot_attention": "plotting",
    "plot_attention_heads": "plotting",
    "plot_architecture": "plotting",
    "plot_attention_diagram": "plotting",
    # Part III (chapters 13, 16)
    "train_step": "training",
    "token_batches": "training",
    "TokenBatchSampler": "training",
    "BatchLoader": "training",
    "collate": "training",
    "TrainingClock": "training",
    "make_toy_pairs": "toy",
    # Capstone (chapters 17-18) and the data (appendix A2)
    "SubwordTokenizer": "text",
    "train_joint_tokenizer": "text",
    "corpus_bleu": "text",
    "translate": "stages",
    "load_multi30k": "data",
    "load_tiny_shakespeare": "data",
    "load_tatoeba_fra_eng": "data",
    "DataError": "data",
    "load_translator": "data",
}
# What a lazily loaded module imports beyond torch, from which extra: importing the module without
# it raises an ImportError that says `pip install "transformer-lib[EXTRA]"`.
_NEEDS = {"plotting": ("matplotlib", "plot"), "training": ("tqdm", "nlp"), "train": ("tqdm", "nlp"),
          "stages": ("tqdm", "nlp"), "records": ("tqdm", "nlp")}


# Submodules loaded on first use under their own name: `transformer_lib.train` is the module.
_SUBMODULES = {"train"}


def __getattr__(name):
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'transformer_lib' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES)


def _installed(module: str) -> bool:
    import importlib.util

    return module not in _NEEDS or importlib.util.find_spec(_NEEDS[module][0]) is not None


# `from transformer_lib import *` leaves out the names whose extra is not installed, so a core
# install (torch only) can star-import.
__all__ = ([n for n in dir() if not n.startswith("_")]
           + [n for n, m in _LAZY.items() if _installed(m)]
           + [n for n in sorted(_SUBMODULES) if _installed(n)])
