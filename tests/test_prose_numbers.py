"""Numbers the prose quotes from the capstone's presets, from the records in results/ and from
formulas, checked against those sources.

Each `Quote` names a page, a pattern that finds the sentence, and for every number in it (a named
group) the value it must agree with, to the precision the text gives it: "2.8\\cdot10^{-3}" agrees
with 0.002795, "7.6" with 7.578624, "57" with 57.02. A changed preset or a re-recorded run whose
numbers the text still quotes the old way fails here, and so does a reworded sentence the pattern
no longer finds (reword the pattern with it). Text is read with its whitespace collapsed, so a
pattern does not care where a line breaks. The pages are book/*.md, README.md, docs/*.md (the
explanations the README links) and the markdown cells of every notebook with its figures' captions
and alt texts, which a reader reads as prose.

`test_record_numbers_are_quoted_only_where_checked` closes the loop the other way: a distinctive
number of the shipped run's records (its updates, tokens per second, BLEU scores, time budget)
found anywhere in the prose must sit inside a sentence that a `Quote` checks.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import math
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from statistics import fmean
from typing import Callable

import pytest

from transformer_lib.exercises import toy_model
from transformer_lib.model import TransformerConfig, parameter_count
from transformer_lib.optimization import warmup_lr
from transformer_lib.recipe import RUN_ONLY, Recipe, as_recorded, preset
from transformer_lib.stages import model_config

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"


# --- the sources ---------------------------------------------------------------------------------

CPU = preset("cpu-30min")
GPU = preset("gpu")
PAPER_WARMUP = inspect.signature(warmup_lr).parameters["warmup_steps"].default   # 4000, eq. (3)


def record(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


RUN = record("multi30k-cpu-30min.json")
EPYC = record("multi30k-cpu-30min-epyc.json")       # the shipped run before the rate was chosen
RUN_3X3 = record("multi30k-cpu-30min-3x3.json")      # the recipe before two layers were chosen
EARLIER_RECIPE = {"n_layers": 3, "dropout": 0.1, "attn_dropout": 0.1, "ffn_dropout": 0.1}
FP32 = record("multi30k-cpu-30min-fp32.json")
BF16 = record("multi30k-cpu-30min-bf16.json")
SHIPPED = record("multi30k-cpu-30min.shipped.json")
THROUGHPUT = record("train-throughput-cpu.json")
EVALS = record("multi30k-cpu-30min.history.json")["evals"]      # after every epoch: ch. 18's curves
SNAPSHOTS = record("multi30k-cpu-30min.attention.json")["weights"]   # chapter 18's attention maps
REMATCH_TF = record("rematch-xeon/transformer-lr2e-3.json")   # chapter 20's rematch
PARITY_2X2 = record("parity-cpu-30min-2x2-seeds.json")     # appendix A7's 8,000-token seeds
PARITY_SHIPS = record("parity-cpu-30min-4000-1e-3-seeds.json")   # chapter 11's four seeds
H200 = record("gpu-2026-11-28/gpu-5min.json")             # the runbook's first GPU records
H200_SWEEP = record("gpu-2026-11-28/gpu-30s-sweep.json")
GPU_30S = record("gpu-30s.json")                            # the gpu-30s preset as it is, eager
TINY = record("cpu-tiny-cpu.json")         # the cpu-tiny preset: chapter 18's live run on a CPU
ZEN4_BF16 = record("multi30k-cpu-30min-zen4-bf16.json")   # the recipe in both precisions, one CPU
ZEN4_FP32 = record("multi30k-cpu-30min-zen4-fp32.json")
PRECISION = record("cpu-precision-zen4.json")            # the two precisions side by side
ABLATIONS = {p.stem: json.loads(p.read_text())      # base, base.seed1, ... (not earlier/)
             for p in sorted((RESULTS / "ablations").glob("*.json"))}   # the earlier recipe: A7
ROWS = {p.stem: json.loads(p.read_text())           # the rows of the recipe: A7
        for p in sorted((RESULTS / "ablations-2x2").glob("*.json"))}
RNN_30 = record("rnn-vs-transformer-cpu-1797s.json")
EQUAL_TIME = sorted((json.loads(p.read_text())
                     for p in RESULTS.glob("bleu-at-equal-time-cpu*.json")),
                    key=lambda r: r["budget_s"])


def rows_of(rows: dict, row: str) -> list[float]:
    "Validation greedy BLEU of each seed of an ablation row: ROW (seed 0), ROW.seed1, ..."
    return [r["val"]["bleu_greedy"] for name, r in rows.items() if name.split(".")[0] == row]


def pooled_sd(rows: dict) -> float:
    "One run's standard deviation in BLEU pooled over the rows (n - 1 degrees of freedom each)."
    by_row = [rows_of(rows, row) for row in {name.split(".")[0] for name in rows}]
    ss = sum((b - sum(bs) / len(bs)) ** 2 for bs in by_row for b in bs)
    return math.sqrt(ss / sum(len(bs) - 1 for bs in by_row))


def equal_run(i: int, model: str) -> dict:
    "One model's run in the i-th BLEU-at-equal-time record (sorted by budget)."
    return next(x for x in EQUAL_TIME[i]["runs"] if x["model"] == model)


def equal_gap(i: int, bleu: str) -> float:
    "Ours minus nn.Transformer in the i-th equal-time record: 'greedy' or 'beam_4' BLEU."
    ours, ref = equal_run(i, "transformer_lib"), equal_run(i, "nn.Transformer")
    return ours["bleu"][bleu] - ref["bleu"][bleu]


def ceiling_spread(i: int) -> float:
    "How far apart the float32 ceilings measured before a record's two runs were (max/min - 1)."
    c = [x["ceiling_before_flops_per_s"] for x in EQUAL_TIME[i]["runs"]]
    return max(c) / min(c) - 1


def threads(device: str) -> int:
    "The thread count of a record's device string, 'CPU (x86_64, 2 threads)' -> 2."
    return int(re.search(r"(\d+) threads?\)", device).group(1))


def ffn_shares(config: TransformerConfig) -> dict[str, float]:
    """The FFN's share of an encoder layer, of a decoder layer, and of all weights outside the
    embedding matrices, from `parameter_count`'s formulas."""
    d, f, n = config.d_model, config.d_ff, config.n_layers
    ffn = 2 * d * f + f + d
    one_layer = dataclasses.replace(config, n_layers=1, norm_first=False)
    counts, layer = parameter_count(config), parameter_count(one_layer)
    return {"encoder layer": ffn / layer["encoder"], "decoder layer": ffn / layer["decoder"],
            "outside the embeddings": 2 * n * ffn / (counts["encoder"] + counts["decoder"])}


TRANSLATOR = model_config(CPU, CPU.vocab_size)            # the shipped translator's sizes
EX1_WIDTH = inspect.signature(toy_model).parameters["d_model"].default


def ex1_learning_rate() -> float:
    "The learning rate exercise 1's experiment cell sets (`LR, STEPS = 5e-3, 120`)."
    nb = json.loads((ROOT / "notebooks" / "exercises" / "ex1_pre_ln.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    return float(re.search(r"^LR, STEPS = ([0-9.e-]+), \d+$", code, re.MULTILINE).group(1))


# --- reading the prose ---------------------------------------------------------------------------

def figure_texts(cell: dict) -> list[str]:
    """What a reader reads of a figure made by a code cell: the caption and the alt text that
    MyST-NB takes from the cell's metadata (`mystnb.figure.caption`, `mystnb.image.alt`)."""
    meta = cell.get("metadata", {}).get("mystnb", {})
    return [t for t in (meta.get("figure", {}).get("caption"), meta.get("image", {}).get("alt"))
            if t]


@cache
def prose(page: str) -> str:
    """A page's prose with its whitespace collapsed: a .md file whole; a notebook's markdown cells
    and its figures' captions and alt texts, in the order of the cells (each joined by a blank
    line, so that no sentence runs from one into the next)."""
    path = ROOT / page
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        text = "\n\n".join(t for c in cells for t in (
            ["".join(c["source"])] if c["cell_type"] == "markdown" else figure_texts(c)))
    else:
        text = path.read_text()
    return re.sub(r"\s+", " ", text)


def prose_pages() -> list[str]:
    notebooks = sorted(p for p in (ROOT / "notebooks").rglob("*.ipynb")
                       if ".ipynb_checkpoints" not in p.parts)
    return ([p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "book").glob("*.md"))]
            + ["README.md"] + [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "docs")
                                                                             .glob("*.md"))]
            + [p.relative_to(ROOT).as_posix() for p in notebooks])


WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "ten": 10, "thirty": 30,
         "half": 0.5, "two thirds": 2 / 3, "ninth": 9,     # "a ninth": one of nine (epochs, ...)
         "twentieth": 20}
SCIENTIFIC = re.compile(r"^(?:(?P<m>[0-9.]+)\s*(?:\\cdot|·|×)\s*)?10\^\{?(?P<e>[-−]?\d+)\}?$")


def agrees(quoted: str, value: float) -> bool:
    """Whether `value`, rounded as finely as `quoted` is written, is `quoted`: "1,797" and 1797.0,
    "0.87" and 0.8676, "2\\cdot10^{-3}" and 0.002, "10^{-3}" and 0.001, "thirty" and 30."""
    q = quoted.strip().lower()
    if q in WORDS:
        target = WORDS[q]
        return abs(value - target) < 0.01 * max(abs(target), 1e-12) or round(value) == target
    m = SCIENTIFIC.match(q)
    if m:
        mantissa, exponent = m.group("m") or "1", int(m.group("e").replace("−", "-"))
        decimals = len(mantissa.partition(".")[2])
        return round(value / 10 ** exponent, decimals) == float(mantissa)
    q = q.replace(",", "")
    decimals = len(q.partition(".")[2])
    return round(value, decimals) == float(q)


# --- the quotes ----------------------------------------------------------------------------------

NUM = r"[0-9][0-9,]*(?:\.[0-9]+)?"
MATH = r"[^$]+"


@dataclass
class Quote:
    page: str
    pattern: str                      # a regex; each named group is a number, checked by `values`
    values: dict[str, Callable[[], float]] = field(default_factory=dict)
    holds: Callable[[], bool] = lambda: True      # what the sentence says in words, not numbers

    @property
    def id(self) -> str:
        return f"{self.page}: {self.pattern[:50]}"


def minutes(seconds: float) -> float:
    return seconds / 60


QUOTES = [
    # ---------------------------------------------------------------- book/capstone.md, chapter 18
    Quote("book/capstone.md",
          rf"sentence pairs \((?P<n>two) encoder and (?P<n2>two) decoder layers\), pre-LN, dropout "
          rf"(?P<dropout>{NUM}) on sub-layer outputs and embeddings only, tied embeddings",
          {"dropout": lambda: CPU.dropout, "n": lambda: CPU.n_layers, "n2": lambda: CPU.n_layers},
          lambda: CPU.norm_first and CPU.attn_dropout == CPU.ffn_dropout == 0 < CPU.dropout),
    Quote("book/capstone.md",
          rf"tied embeddings over a joint vocabulary of (?P<v>{NUM}) BPE tokens",
          {"v": lambda: CPU.vocab_size}),
    Quote("book/capstone.md",
          rf"schedule for a fixed budget \(warm-up over (?P<w>{NUM}) updates to a peak of "
          rf"\$(?P<lr>{MATH})\$, held until (?P<p>half) of the time, then a straight line to "
          rf"zero\)",
          {"w": lambda: CPU.warmup_steps, "lr": lambda: CPU.peak_lr, "p": lambda: CPU.decay_start},
          lambda: CPU.schedule == "budget"),
    Quote("book/capstone.md",
          rf"label smoothing (?P<ls>{NUM}), small batches, float32 \(bfloat16 autocast with "
          rf"`--amp`\), a time budget of (?P<t>{NUM}) seconds of training, the last weights "
          rf"without checkpoint averaging, and beam search with beam (?P<k>{NUM}) and length "
          rf"penalty α = (?P<alpha>{NUM})\. That is the `cpu-30min` preset, trained on a CPU\.",
          {"ls": lambda: CPU.label_smoothing, "t": lambda: CPU.time_budget_s,
           "k": lambda: CPU.beam_size, "alpha": lambda: CPU.length_penalty},
          lambda: not CPU.amp and CPU.average_last == 1 and CPU.device == "cpu"),
    Quote("book/capstone.md",
          rf"The `gpu` preset, for readers with a GPU, is a wider model with dropout "
          rf"(?P<dropout>{NUM}), equation 3 rescaled to a peak of \$(?P<lr>{MATH})\$ after "
          rf"(?P<w>{NUM}) updates, batches with few shapes, trained eager, and the average of "
          rf"the last (?P<n>{NUM}) epochs' weights",
          {"dropout": lambda: GPU.dropout, "lr": lambda: GPU.peak_lr, "w": lambda: GPU.warmup_steps,
           "n": lambda: GPU.average_last},
          lambda: (GPU.d_model > CPU.d_model and GPU.schedule == "noam" and GPU.fixed_shapes
                   and not GPU.compile)),
    # ---------------------------------------------------------------- chapter 18's figures
    Quote("notebooks/18_capstone.ipynb",
          rf"the validation loss falls fast at first, is lowest after epoch (?P<low>{NUM}) and "
          rf"then rises a little; validation BLEU climbs from about (?P<b1>{NUM}) to "
          rf"(?P<b3>{NUM}) over the first three epochs, pauses at the fourth, then rises unevenly, "
          rf"with small falls, to (?P<end>{NUM}) at the end of training",
          {"low": lambda: 1 + min(range(len(EVALS)), key=lambda i: EVALS[i]["val_loss"]),
           "b1": lambda: EVALS[0]["bleu_greedy"], "b3": lambda: EVALS[2]["bleu_greedy"],
           "end": lambda: EVALS[-1]["bleu_greedy"]},
          lambda: (abs(EVALS[3]["bleu_greedy"] - EVALS[2]["bleu_greedy"]) < 0.1     # a pause
                   and EVALS[-1]["val_loss"] > min(e["val_loss"] for e in EVALS)  # loss rises
                   and any(b["bleu_greedy"] < a["bleu_greedy"]                    # small falls
                           for a, b in zip(EVALS[3:], EVALS[4:]))
                   and EVALS[-1]["bleu_greedy"] == RUN["val"]["bleu_greedy"])),
    Quote("notebooks/18_capstone.ipynb",                  # the caption and the alt text
          rf"after epochs (?P<e1>{NUM}), (?P<e2>{NUM}) and (?P<e3>{NUM}),? and (?:for )?the final "
          rf"weights",
          {"e1": lambda: SNAPSHOTS[0]["epoch"] + 1, "e2": lambda: SNAPSHOTS[1]["epoch"] + 1,
           "e3": lambda: SNAPSHOTS[len(SNAPSHOTS) // 2]["epoch"] + 1},      # the panels drawn
          lambda: SNAPSHOTS[-1]["epoch"] is None),
    # ---------------------------------------------------------------- chapter 11's parity (A7)
    Quote("notebooks/A7_how_the_numbers_were_made.ipynb",
          rf"At the capstone's recipe as it ships, `benchmarks/experiments/parity.py` trained both "
          rf"models from "
          rf"(?P<n>four) seeds for (?P<u>{NUM}) updates each, the two of a seed on the same "
          rf"batches, on a CPU in float32\.",
          {"n": lambda: len(PARITY_SHIPS["verdict"]["per_seed"]),
           "u": lambda: PARITY_SHIPS["recipe"]["max_steps"]},
          lambda: (all(as_recorded(PARITY_SHIPS["recipe"])[k] == v
                       for k, v in dataclasses.asdict(CPU).items()
                       if k not in RUN_ONLY | {"seed"})
                   and PARITY_SHIPS["precision"] == "float32"
                   and PARITY_SHIPS["device"].startswith("CPU"))),
    Quote("notebooks/A7_how_the_numbers_were_made.ipynb",
          rf"On average ours ends with (?P<r>{NUM}) times `nn.Transformer`'s validation NLL and a "
          rf"greedy BLEU (?P<g>{NUM}) higher; seed by seed the ratio stays within 1\.5% of 1 and "
          rf"the BLEU gap takes either sign\.",
          {"r": lambda: PARITY_SHIPS["verdict"]["val_nll_ratio"],
           "g": lambda: PARITY_SHIPS["verdict"]["bleu_gap"]["greedy"]},
          lambda: (PARITY_SHIPS["verdict"]["parity"]
                   and max(abs(v["val_nll_ratio"] - 1)
                           for v in PARITY_SHIPS["verdict"]["per_seed"].values()) < 0.015
                   and min(v["bleu_gap"]["greedy"] for v in PARITY_SHIPS["verdict"]["per_seed"]
                           .values()) < 0 < max(v["bleu_gap"]["greedy"]
                                                for v in PARITY_SHIPS["verdict"]["per_seed"]
                                                .values()))),
    # ---------------------------------------------------------------- chapter 14, appendix A5
    Quote("notebooks/A5_recipe.ipynb",
          r"A reader who trains for a fixed \*time\* \((?P<m>thirty) minutes on a CPU, as in",
          {"m": lambda: minutes(CPU.time_budget_s)}, lambda: CPU.device == "cpu"),
    Quote("notebooks/14_optimization.ipynb",
          rf"Its CPU recipe uses a budget schedule instead, warming up over "
          rf"(?P<w>{NUM}) updates to a peak of \$(?P<lr>{MATH})\$, held until (?P<p>half) of the "
          rf"training time,",
          {"w": lambda: CPU.warmup_steps, "lr": lambda: CPU.peak_lr, "p": lambda: CPU.decay_start},
          lambda: CPU.schedule == "budget"),
    Quote("notebooks/14_optimization.ipynb",
          rf"its `gpu` recipe keeps the shape of equation \{{eq\}}`eq-warmup-schedule`, with a "
          rf"peak of \$(?P<lr>{MATH})\$ after (?P<w>{NUM}) updates",
          {"lr": lambda: GPU.peak_lr, "w": lambda: GPU.warmup_steps},
          lambda: GPU.schedule == "noam"),
    # ---------------------------------------------------------------- chapter 18
    Quote("notebooks/18_capstone.ipynb",
          r"The translator is trained on a CPU: (?P<m>thirty) minutes of training on (?P<n>two) "
          r"threads of an x86-64 processor",
          {"m": lambda: minutes(RUN["training_seconds"]), "n": lambda: threads(RUN["device"])},
          lambda: "x86_64" in RUN["device"]),
    Quote("notebooks/18_capstone.ipynb",
          rf"shipped with the book as one (?P<mb>{NUM}) MB file",
          {"mb": lambda: SHIPPED["bytes"] / 1e6}),
    Quote("notebooks/A5_recipe.ipynb",
          rf"a\s?(?P<p>{NUM})-million-parameter model processes two to six thousand target tokens "
          rf"per second on (?P<c>two) cores, depending on the CPU, so thirty minutes buy several "
          rf"thousand updates and many passes over the data",
          {"p": lambda: RUN["parameters"] / 1e6, "c": lambda: threads(RUN["device"])},
          lambda: all(r["epochs"] >= 8 and 2000 <= r["target_tokens_per_s"] < 6000
                      and 3000 <= r["steps"] < 11000 for r in (RUN, EPYC, BF16, FP32))),
    Quote("notebooks/18_capstone.ipynb",
          rf"\$d_{{\\text{{model}}}}=(?P<d>{NUM})\$, \$h=(?P<h>{NUM})\$, "
          rf"\$d_{{ff}}=(?P<f>{NUM})\$, (?P<n>{NUM}) encoder and (?P<n2>{NUM}) decoder layers, "
          rf"(?P<p>{NUM})M parameters with an? (?P<v>{NUM})-token vocabulary",
          {"d": lambda: CPU.d_model, "h": lambda: CPU.n_heads, "f": lambda: CPU.d_ff,
           "n": lambda: CPU.n_layers, "n2": lambda: CPU.n_layers,
           "p": lambda: RUN["parameters"] / 1e6, "v": lambda: CPU.vocab_size}),
    Quote("notebooks/18_capstone.ipynb",
          r"\*\*Pre-LN instead of the paper's post-LN\*\*", {}, lambda: CPU.norm_first),
    Quote("notebooks/18_capstone.ipynb",
          rf"\*\*Small batches: at most (?P<b>{NUM}) padded positions per side\.\*\*.{{0,500}}No "
          rf"padding of the batch axis and no rounding of lengths",
          {"b": lambda: CPU.batch_tokens},
          lambda: not CPU.fixed_shapes and CPU.bucket == 1),
    Quote("notebooks/18_capstone.ipynb",
          rf"linear warm-up over (?P<w>{NUM}) updates to a peak of \$(?P<lr>{MATH})\$, held "
          rf"until (?P<p>half) of the training time, then a straight line to zero at the end of "
          rf"the budget",
          {"w": lambda: CPU.warmup_steps, "lr": lambda: CPU.peak_lr, "p": lambda: CPU.decay_start},
          lambda: CPU.schedule == "budget"),
    Quote("notebooks/A5_recipe.ipynb",
          rf"after the (?P<steps>{NUM}) updates of the shipped run it would still be\s+at "
          rf"\$\\sqrt{{w/(?P<steps2>{NUM})}}\$ of its peak: (?P<b>{NUM}) of it with this recipe's "
          rf"(?P<w2>{NUM}) warm-up updates, and (?P<a>{NUM})\s+with the paper's (?P<w1>{NUM}), "
          rf"which it\s+would have left\s+(?P<left>{NUM}) updates before\.",
          {"steps": lambda: RUN["steps"], "steps2": lambda: RUN["steps"],
           "a": lambda: math.sqrt(PAPER_WARMUP / RUN["steps"]), "w1": lambda: PAPER_WARMUP,
           "left": lambda: RUN["steps"] - PAPER_WARMUP,
           "b": lambda: math.sqrt(CPU.warmup_steps / RUN["steps"]), "w2": lambda: CPU.warmup_steps},
          # eq. (3): past its warm-up its rate over its peak is sqrt(w / step)
          lambda: RUN["steps"] > PAPER_WARMUP and all(math.isclose(
              warmup_lr(RUN["steps"], CPU.d_model, w) / warmup_lr(w, CPU.d_model, w),
              math.sqrt(w / RUN["steps"])) for w in (CPU.warmup_steps, PAPER_WARMUP))),
    Quote("notebooks/18_capstone.ipynb",
          rf"\*\*Dropout (?P<d>{NUM})\*\* on sub-layer outputs and embeddings only; \*\*label "
          rf"smoothing (?P<ls>{NUM})\*\*",
          {"d": lambda: CPU.dropout, "ls": lambda: CPU.label_smoothing},
          lambda: CPU.attn_dropout == CPU.ffn_dropout == 0 < CPU.dropout),
    Quote("notebooks/A5_recipe.ipynb",
          rf"\*\*Model size: (?P<n>{NUM}) encoder and (?P<n2>{NUM}) decoder layers at width "
          rf"(?P<d>{NUM})\.\*\*.{{0,300}}Two layers rather than three make each update cheaper",
          {"n": lambda: CPU.n_layers, "n2": lambda: CPU.n_layers, "d": lambda: CPU.d_model},
          lambda: CPU.n_layers == 2 and RUN_3X3["recipe"]["n_layers"] == 3),
    Quote("notebooks/18_capstone.ipynb",
          rf"\*\*One joint BPE vocabulary of (?P<v>{NUM}) tokens\*\*",
          {"v": lambda: CPU.vocab_size}),
    Quote("notebooks/18_capstone.ipynb",
          r"no gradient clipping; no checkpoint averaging", {},
          lambda: CPU.clip_grad_norm == 0 and CPU.average_last == 1),
    Quote("notebooks/18_capstone.ipynb",
          r"\| precision \| not stated \| float32; `--amp` asks for \*\*mixed precision where the "
          r"CPU has bfloat16 instructions\*\*", {},
          lambda: not CPU.amp),
    Quote("notebooks/A5_recipe.ipynb",
          r"but of the two pairs of thirty-minute runs on such a CPU one went each way, and in "
          r"both the run with more updates scored higher", {},
          lambda: (ZEN4_FP32["steps"] > ZEN4_BF16["steps"] and BF16["steps"] > FP32["steps"]
                   and ZEN4_FP32["test_2016_flickr"]["bleu_beam"]
                   > ZEN4_BF16["test_2016_flickr"]["bleu_beam"]
                   and BF16["test_2016_flickr"]["bleu_beam"] > FP32["test_2016_flickr"]["bleu_beam"]
                   and ZEN4_FP32["val"]["bleu_greedy"] > ZEN4_BF16["val"]["bleu_greedy"]
                   and ZEN4_FP32["precision"] == "float32" and ZEN4_BF16["precision"] == "bfloat16"
                   and PRECISION["bf16_speedup"] > 1 and PRECISION["cpu"].startswith("AMD EPYC"))),
    Quote("notebooks/18_capstone.ipynb",
          rf"\*\*A time budget, not a number of epochs:\*\* (?P<t>{NUM}) seconds of training "
          rf"\(evaluation excluded\), so that training ends inside (?P<m>thirty) minutes",
          {"t": lambda: CPU.time_budget_s, "m": lambda: math.ceil(minutes(CPU.time_budget_s))},
          lambda: CPU.time_budget_s <= 1800),
    Quote("notebooks/18_capstone.ipynb",
          rf"\*\*beam search with beam (?P<k>{NUM}) and length penalty α = (?P<alpha>{NUM})\*\*",
          {"k": lambda: CPU.beam_size, "alpha": lambda: CPU.length_penalty}),
    Quote("notebooks/18_capstone.ipynb",
          rf"The `gpu` preset \(width (?P<d>{NUM}), (?P<b>{NUM})-token batches, bf16 where the GPU "
          rf"has it, else float16, trained eager\)",
          {"d": lambda: GPU.d_model, "b": lambda: GPU.batch_tokens},
          lambda: GPU.amp and not GPU.compile),
    Quote("notebooks/A7_how_the_numbers_were_made.ipynb",
          rf"trained for one epoch's worth of updates \((?P<s>{NUM}) updates of at most "
          rf"(?P<b>{NUM}) padded positions; the rows with larger batches make fewer, "
          rf"(?P<s2>{NUM}) with (?P<b2>{NUM}) positions, (?P<s4>{NUM}) with (?P<b4>{NUM}), and "
          rf"(?P<sv>{NUM}) with (?P<bv>{NUM}) positions and a (?P<v>{NUM})-subword vocabulary;"
          rf".{{0,300}}scored on all "
          rf"(?P<n>{NUM}) validation sentences\. The rows train in float32 on one thread each",
          {"s": lambda: ABLATIONS["base"]["steps"],
           "b": lambda: ABLATIONS["base"]["recipe"]["batch_tokens"],
           "s2": lambda: ABLATIONS["batch_2048"]["steps"],
           "b2": lambda: ABLATIONS["batch_2048"]["recipe"]["batch_tokens"],
           "s4": lambda: ABLATIONS["batch_4096_post_ln"]["steps"],
           "b4": lambda: ABLATIONS["batch_4096_post_ln"]["recipe"]["batch_tokens"],
           "sv": lambda: ABLATIONS["vocab_4000_batch_2048"]["steps"],
           "bv": lambda: ABLATIONS["vocab_4000_batch_2048"]["recipe"]["batch_tokens"],
           "v": lambda: ABLATIONS["vocab_4000_batch_2048"]["recipe"]["vocab_size"],
           "n": lambda: ABLATIONS["base"]["val"]["sentences"]},
          lambda: (ABLATIONS["base"]["epochs"] == 1.0
                   and {r["val"]["sentences"] for r in ABLATIONS.values()}
                   == {ABLATIONS["base"]["val"]["sentences"]}
                   and not any(r["recipe"]["amp"] for r in ABLATIONS.values()))),
    Quote("notebooks/A7_how_the_numbers_were_made.ipynb",
          rf"trained for one epoch's worth of updates \((?P<s>{NUM}) updates of at most "
          rf"(?P<b>{NUM}) padded positions;.{{0,200}}scored on all (?P<n>{NUM}) validation "
          rf"sentences, greedy\. Two rows change how many batches an epoch holds and make that "
          rf"many updates: the (?P<v>{NUM})-token vocabulary (?P<sv>{NUM}), batches of "
          rf"(?P<b2>{NUM}) positions (?P<s2>{NUM}) \(with half the warm-up, (?P<w2>{NUM}) updates, "
          rf"so that it keeps the same share of the run\)\. The rows train in float32 on "
          rf"(?P<t>one) thread each, two at a time\. One epoch is about a (?P<f>twentieth) of the "
          rf"(?P<m>thirty)-minute run",
          {"s": lambda: ROWS["base"]["steps"], "b": lambda: ROWS["base"]["recipe"]["batch_tokens"],
           "n": lambda: ROWS["base"]["val"]["sentences"],
           "v": lambda: ROWS["vocab_8000"]["recipe"]["vocab_size"],
           "sv": lambda: ROWS["vocab_8000"]["steps"],
           "b2": lambda: ROWS["batch_2048"]["recipe"]["batch_tokens"],
           "s2": lambda: ROWS["batch_2048"]["steps"],
           "w2": lambda: ROWS["batch_2048"]["recipe"]["warmup_steps"],
           "t": lambda: max(threads(r["device"]) for r in ROWS.values()),
           "f": lambda: RUN["epochs"], "m": lambda: minutes(RUN["training_seconds"])},
          lambda: ({r["epochs"] for r in ROWS.values()} == {1.0}
                   and {r["val"]["sentences"] for r in ROWS.values()} == {1014}
                   and not any(r["recipe"]["amp"] for r in ROWS.values())
                   and len(ROWS) == 20 and all(       # every other row makes the base row's updates
                       r["steps"] == ROWS["base"]["steps"] for name, r in ROWS.items()
                       if r["recipe"]["batch_tokens"] == ROWS["base"]["recipe"]["batch_tokens"]
                       and r["recipe"]["vocab_size"] == ROWS["base"]["recipe"]["vocab_size"])
                   and 2 * ROWS["batch_2048"]["recipe"]["warmup_steps"]
                   == ROWS["base"]["recipe"]["warmup_steps"])),
    Quote("notebooks/A7_how_the_numbers_were_made.ipynb",
          rf"one run's greedy BLEU scatters by \$\\sigma \\approx (?P<sd>{NUM})\$ points, so a row "
          rf"must move about (?P<bar>{NUM}) points from the recipe to clear the bars\. (?P<k>Six) "
          rf"rows do\.",
          {"sd": lambda: pooled_sd(ROWS), "bar": lambda: 2 * pooled_sd(ROWS),
           "k": lambda: sum(abs(fmean(rows_of(ROWS, row)) - fmean(rows_of(ROWS, "base")))
                            > 2 * pooled_sd(ROWS) for row in {n.split(".")[0] for n in ROWS})},
          # 2 sigma is two standard errors of a difference only where every row has two seeds
          lambda: all(len(rows_of(ROWS, n.split(".")[0])) == 2 for n in ROWS)),
    Quote("notebooks/A7_how_the_numbers_were_made.ipynb",
          rf"The two train at the same speed: (?P<r>{NUM}) times over all rounds, (?P<m>{NUM}) in "
          rf"the median round, while single rounds range from (?P<lo>{NUM}) to (?P<hi>{NUM})",
          {"r": lambda: THROUGHPUT["ratios"]["as_run"]["ratio"],
           "m": lambda: THROUGHPUT["ratios"]["as_run"]["median"],
           "lo": lambda: THROUGHPUT["ratios"]["as_run"]["min"],
           "hi": lambda: THROUGHPUT["ratios"]["as_run"]["max"]},
          lambda: {r["precision"] for r in THROUGHPUT["results"]} == {"float32"}),
    Quote("notebooks/A7_how_the_numbers_were_made.ipynb",
          rf"At (?P<b1>{NUM}) s, `nn.Transformer` first, the two made the same number of updates "
          rf"\((?P<n1>{NUM}) and (?P<n2>{NUM})\) and ours ended ahead, by (?P<g1>{NUM}) greedy and "
          rf"(?P<m1>{NUM}) beam BLEU; at (?P<b2>{NUM}) s, ours first, `nn.Transformer` made "
          rf"(?P<p>{NUM})% more updates and ended ahead, by (?P<g2>{NUM}) and (?P<m2>{NUM})\. The "
          rf"machine itself moved between runs: its float32 ceiling, measured just before each, "
          rf"differed by (?P<c1>{NUM})% and (?P<c2>{NUM})%\.",
          {"b1": lambda: EQUAL_TIME[0]["budget_s"], "b2": lambda: EQUAL_TIME[-1]["budget_s"],
           "n1": lambda: equal_run(0, "nn.Transformer")["steps"],
           "n2": lambda: equal_run(0, "transformer_lib")["steps"],
           "g1": lambda: equal_gap(0, "greedy"), "m1": lambda: equal_gap(0, "beam_4"),
           "g2": lambda: -equal_gap(-1, "greedy"), "m2": lambda: -equal_gap(-1, "beam_4"),
           "p": lambda: 100 * (equal_run(-1, "nn.Transformer")["steps"]
                               / equal_run(-1, "transformer_lib")["steps"] - 1),
           "c1": lambda: 100 * ceiling_spread(0), "c2": lambda: 100 * ceiling_spread(-1)},
          lambda: ([r["order"][0] for r in EQUAL_TIME] == ["nn.Transformer", "transformer_lib"]
                   and all(x["precision"] == "float32" for r in EQUAL_TIME for x in r["runs"]))),
    # ---------------------------------------------------------------- appendix A2
    Quote("notebooks/A2_data.ipynb",
          rf"about (?P<mb>{NUM}) MB for (?P<p>{NUM}) million parameters",
          {"mb": lambda: SHIPPED["bytes"] / 1e6, "p": lambda: RUN["parameters"] / 1e6}),
    # ---------------------------------------------------------------- chapters 08 and 19
    Quote("notebooks/19_inside_the_translator.ipynb",
          rf"it puts (?P<enc>two thirds) of an encoder layer's weights into memory, (?P<dec>half) "
          rf"of a decoder layer's \(\{{ref\}}`chapter-feed-forward`\), and (?P<pct>{NUM})% of this "
          rf"translator's weights outside its embedding matrix",
          {"enc": lambda: ffn_shares(TRANSLATOR)["encoder layer"],
           "dec": lambda: ffn_shares(TRANSLATOR)["decoder layer"],
           "pct": lambda: 100 * ffn_shares(TRANSLATOR)["outside the embeddings"]}),
    Quote("notebooks/08_feed_forward.ipynb",
          r"With (?P<enc>two thirds) of an encoder layer's weights and (?P<dec>half) of a decoder "
          r"layer's, the FFN",
          {"enc": lambda: ffn_shares(TransformerConfig.base(37000))["encoder layer"],
           "dec": lambda: ffn_shares(TransformerConfig.base(37000))["decoder layer"]}),
    Quote("notebooks/08_feed_forward.ipynb",
          rf"On the left, the FFN holds (?P<enc>{NUM})% of an encoder layer's parameters and "
          rf"(?P<dec>{NUM})% of a decoder layer's",
          {"enc": lambda: 100 * ffn_shares(TransformerConfig.base(37000))["encoder layer"],
           "dec": lambda: 100 * ffn_shares(TransformerConfig.base(37000))["decoder layer"]}),
    # ---------------------------------------------------------------- exercise 1
    Quote("notebooks/exercises/ex1_pre_ln.ipynb",
          rf"\((?P<n>{NUM}) layers, \$d_{{\\text{{model}}}}=(?P<d>{NUM})\$, (?P<h>{NUM}) heads, "
          rf"batches of 32 sequences\), at a learning rate of \$(?P<lr>{MATH})\$, (?P<x>{NUM}) "
          rf"times the peak that the paper's schedule reaches for a model this wide after its "
          rf"(?P<w>{NUM}) warm-up steps, "
          rf"\$(?P<d2>{NUM})\^\{{-0\.5\}}\\cdot(?P<w2>{NUM})\^\{{-0\.5\}} "
          rf"\\approx (?P<peak>{MATH})\$",
          {"n": lambda: inspect.signature(toy_model).parameters["n_layers"].default,
           "d": lambda: EX1_WIDTH, "d2": lambda: EX1_WIDTH,
           "h": lambda: inspect.signature(toy_model).parameters["n_heads"].default,
           "lr": ex1_learning_rate,
           "x": lambda: ex1_learning_rate() / warmup_lr(PAPER_WARMUP, EX1_WIDTH, PAPER_WARMUP),
           "w": lambda: PAPER_WARMUP, "w2": lambda: PAPER_WARMUP,
           "peak": lambda: warmup_lr(PAPER_WARMUP, EX1_WIDTH, PAPER_WARMUP)}),
    # ------------------------------------------------- chapter 20 (its earlier records, in A7)
    Quote("notebooks/A7_how_the_numbers_were_made.ipynb",
          rf"--n-layers (?P<n>{NUM}) --attn-dropout (?P<ad>{NUM}) \\ --ffn-dropout (?P<fd>{NUM}) "
          rf"--vocab-size (?P<v>{NUM}) --peak-lr 2e-3 --budget-s (?P<t1>{NUM}) \\ "
          rf"--json results/rnn-vs-transformer-cpu-(?P<t2>{NUM})s\.json "
          rf"``` The second trains each model for the `cpu-30min` recipe's whole training budget, "
          rf"(?P<t3>{NUM}) seconds, so the pair takes a little over an hour",
          {"t1": lambda: CPU.time_budget_s, "t2": lambda: RNN_30["budget_s"],
           "t3": lambda: CPU.time_budget_s, "n": lambda: RNN_30["recipe"]["n_layers"],
           "ad": lambda: RNN_30["recipe"]["attn_dropout"],
           "fd": lambda: RNN_30["recipe"]["ffn_dropout"],
           "v": lambda: RNN_30["recipe"]["vocab_size"]},
          lambda: (3600 < 2 * CPU.time_budget_s + 600 < 4500 and RNN_30["recipe"]["peak_lr"] == 2e-3
                   and RNN_30["recipe"] | EARLIER_RECIPE == RNN_30["recipe"]
                   and CPU.n_layers != EARLIER_RECIPE["n_layers"])),
    Quote("notebooks/A7_how_the_numbers_were_made.ipynb",
          rf"The second record trains each model for (?P<t>{NUM}) seconds, the training budget of "
          rf"the `cpu-30min` recipe, on the same (?P<c>two) cores in float32",
          {"t": lambda: RNN_30["budget_s"], "c": lambda: threads(RNN_30["device"])},
          lambda: (RNN_30["budget_s"] == CPU.time_budget_s
                   and {x["precision"] for x in RNN_30["runs"]} == {"float32"})),
    # ---------------------------------------------------------------- chapter 20: the rematch
    Quote("notebooks/20_recurrent_baseline.ipynb",
          rf"The comparison that matters runs for the capstone's budget, (?P<t>{NUM}) seconds of "
          rf"training per model, on all (?P<n>{NUM}) validation sentences",
          {"t": lambda: REMATCH_TF["budget_s"], "n": lambda: REMATCH_TF["val_sentences"]},
          lambda: REMATCH_TF["budget_s"] == CPU.time_budget_s),
    Quote("notebooks/20_recurrent_baseline.ipynb",
          rf"Trained for the same (?P<t>{NUM}) seconds on (?P<c>two) cores of one kind",
          {"t": lambda: REMATCH_TF["budget_s"], "c": lambda: threads(REMATCH_TF["device"])}),
    # ---------------------------------------------------------------- chapter 00 and book/intro.md
    Quote("notebooks/00_introduction.ipynb",
          r"a German→English translator, trained for (?P<m>thirty) minutes on a CPU",
          {"m": lambda: minutes(CPU.time_budget_s)}, lambda: CPU.device == "cpu"),
    Quote("notebooks/00_introduction.ipynb",
          r"such as the (?P<m>thirty)-minute training of the capstone's translator",
          {"m": lambda: minutes(RUN["training_seconds"])}),
    Quote("notebooks/00_introduction.ipynb",
          r"The capstone's own recipe, `cpu-30min`, trains its translator in (?P<m>thirty) minutes "
          r"on a CPU",
          {"m": lambda: minutes(CPU.time_budget_s)}, lambda: CPU.device == "cpu"),
    Quote("book/intro.md",
          r"chapter 18 prints the (?P<m>thirty)-minute\s+training run that produced the "
          r"translator, watched epoch by epoch,.{0,300}appendix A7 the runs\s+of an earlier, "
          r"(?P<n>three)-layer "
          r"version of the recipe \(a pair in bfloat16 and in float32 on a CPU with bfloat16 "
          r"instructions, one in float32 on a slower CPU without them, and its one-epoch ablation "
          r"rows\)",
          {"m": lambda: minutes(RUN["training_seconds"]),
           "n": lambda: RUN_3X3["recipe"]["n_layers"]},
          lambda: (FP32["recipe"]["amp"] is False and FP32["precision"] == "float32"
                   and BF16["recipe"]["amp"] is True and BF16["date"] < RUN["date"]
                   and FP32["date"] < RUN["date"] and RUN_3X3["date"] < RUN["date"]
                   and all(r["recipe"] | EARLIER_RECIPE == r["recipe"]
                           for r in (FP32, BF16, RUN_3X3))
                   and ABLATIONS["base"]["recipe"]["n_layers"] == RUN_3X3["recipe"]["n_layers"]
                   # bfloat16 asked for, float32 given: a CPU without the instructions, and slower
                   and RUN_3X3["recipe"]["amp"] is True and RUN_3X3["precision"] == "float32"
                   and RUN_3X3["target_tokens_per_s"] < FP32["target_tokens_per_s"])),
    # ---------------------------------------------------------------- README.md: the presets' table
    Quote("README.md",
          rf"What the presets reached \(BLEU with beam (?P<k>{NUM}), then greedy; the time is "
          rf"training time\)",
          {"k": lambda: RUN["test_2016_flickr"]["beam_size"]},
          lambda: all(r["test_2016_flickr"]["beam_size"] == RUN["test_2016_flickr"]["beam_size"]
                      for r in (TINY, H200, GPU_30S))),
    Quote("README.md",
          rf"\| `cpu-tiny` \| any CPU; recorded on (?P<n>{NUM}) cores of an AMD EPYC \| "
          rf"(?P<s>{NUM}) s \((?P<w>{NUM}) s in all\) \| (?P<g>{NUM}) greedy on (?P<k>{NUM}) test "
          rf"sentences: a pipeline check, not a translator \| `results/cpu-tiny-cpu.json`",
          {"n": lambda: threads(TINY["device"]), "s": lambda: preset("cpu-tiny").time_budget_s,
           "w": lambda: TINY["wall_seconds"], "g": lambda: TINY["test_2016_flickr"]["bleu_greedy"],
           "k": lambda: TINY["test_2016_flickr"]["sentences"]},
          lambda: (TINY["cpu"].startswith("AMD EPYC") and preset("cpu-tiny").device == "cpu"
                   and round(TINY["training_seconds"]) == preset("cpu-tiny").time_budget_s
                   and all(as_recorded(TINY["recipe"])[k] == v for k, v in
                           dataclasses.asdict(preset("cpu-tiny")).items() if k not in RUN_ONLY))),
    Quote("README.md",
          rf"\| `cpu-30min` \| (?P<c>{NUM}) CPU cores; recorded on (?P<n>{NUM}) cores of an Intel "
          rf"Xeon, float32, (?P<tps>{NUM}) target tokens/s \| (?P<m>{NUM}) min \| "
          rf"(?P<beam>{NUM}) beam, (?P<greedy>{NUM}) greedy \| `results/multi30k-cpu-30min.json`",
          {"c": lambda: threads(RUN["device"]), "n": lambda: threads(RUN["device"]),
           "m": lambda: minutes(RUN["training_seconds"]),
           "beam": lambda: RUN["test_2016_flickr"]["bleu_beam"],
           "greedy": lambda: RUN["test_2016_flickr"]["bleu_greedy"],
           "tps": lambda: RUN["target_tokens_per_s"]},
          lambda: (not RUN["recipe"]["amp"] and not CPU.amp and RUN["precision"] == "float32"
                   and RUN["cpu"].startswith("Intel(R) Xeon(R)")
                   and all(as_recorded(RUN["recipe"])[k] == v for k, v in
                           dataclasses.asdict(CPU).items() if k not in RUN_ONLY))),
    Quote("README.md",
          rf"\| `gpu` \(the default\) \| one GPU; recorded on one H200, bfloat16, (?P<u>{NUM}) "
          rf"updates, while the preset still compiled \| (?P<m>{NUM}) min \| (?P<b>{NUM}) beam, "
          rf"(?P<g>{NUM}) greedy \| `results/gpu-2026-11-28/gpu-5min.json`",
          {"u": lambda: H200["steps"], "m": lambda: minutes(H200["training_seconds"]),
           "b": lambda: H200["test_2016_flickr"]["bleu_beam"],
           "g": lambda: H200["test_2016_flickr"]["bleu_greedy"]},
          lambda: (H200["device"] == "NVIDIA H200" and H200["precision"] == "bfloat16"
                   and H200["recipe"]["compile"] and not GPU.compile
                   and GPU.time_budget_s == H200["recipe"]["time_budget_s"]
                   and dataclasses.asdict(Recipe()) == dataclasses.asdict(GPU)
                   and all(as_recorded(H200["recipe"])[k] == v for k, v in
                           dataclasses.asdict(GPU).items() if k not in RUN_ONLY))),
    Quote("README.md",
          rf"\| `gpu-30s` \| one GPU; recorded on one H200, bfloat16, (?P<u>{NUM}) updates \(a "
          rf"later run of the preset on an H200 made (?P<u2>{NUM}), scored on validation only: "
          rf"(?P<g2>{NUM}) greedy\) \| (?P<s>{NUM}) s \| (?P<b>{NUM}) beam, (?P<g>{NUM}) greedy \| "
          rf"`results/gpu-30s.json`; the later run `results/gpu-2026-11-28/gpu-30s-sweep.json`",
          {"s": lambda: preset("gpu-30s").time_budget_s, "u": lambda: GPU_30S["steps"],
           "u2": lambda: H200_SWEEP["variants"][0]["updates"],
           "g2": lambda: H200_SWEEP["variants"][0]["val"]["bleu_greedy"],
           "b": lambda: GPU_30S["test_2016_flickr"]["bleu_beam"],
           "g": lambda: GPU_30S["test_2016_flickr"]["bleu_greedy"]},
          lambda: (GPU_30S["device"] == "NVIDIA H200" and GPU_30S["precision"] == "bfloat16"
                   and H200_SWEEP["variants"][0]["name"] == "preset"
                   and H200_SWEEP["variants"][0]["flags"] == []
                   and H200_SWEEP["device"] == "NVIDIA H200" and H200_SWEEP["base"] == "gpu-30s"
                   and all(as_recorded(H200_SWEEP["base_recipe"])[k] == v for k, v in
                           dataclasses.asdict(preset("gpu-30s")).items() if k not in RUN_ONLY)
                   and not GPU_30S["recipe"]["compile"]
                   and round(GPU_30S["training_seconds"]) == preset("gpu-30s").time_budget_s
                   and all(as_recorded(GPU_30S["recipe"])[k] == v for k, v in
                           dataclasses.asdict(preset("gpu-30s")).items() if k not in RUN_ONLY))),
    # ---------------------------------------------------------------- docs/training.md
    Quote("docs/training.md",
          rf"a bfloat16 update of `cpu-30min` was (?P<x>{NUM}) times as fast as a float32 one "
          rf"\(`results/cpu-precision-zen4.json`\)\. In BLEU, the two pairs of thirty-minute runs "
          rf"on such a CPU went opposite ways: with the current recipe the bfloat16 run scored "
          rf"(?P<bb>{NUM}) with beam (?P<k>{NUM}) on test_2016_flickr and the float32 run "
          rf"(?P<fb>{NUM}) \(`results/multi30k-cpu-30min-zen4-bf16.json`, `-zen4-fp32.json`\), the "
          rf"machine's drift outweighing bfloat16's speed, so that float32 made more updates; with "
          rf"the earlier 3\+3 recipe and code, bfloat16 made (?P<eu>{NUM}) updates to float32's "
          rf"(?P<fu>{NUM}) and scored (?P<eb>{NUM}) to (?P<ef>{NUM}) "
          rf"\(`-bf16.json`, `-fp32.json`\)\. In both pairs the run with more updates scored "
          rf"higher\.",
          {"x": lambda: PRECISION["bf16_speedup"],
           "fb": lambda: ZEN4_FP32["test_2016_flickr"]["bleu_beam"],
           "bb": lambda: ZEN4_BF16["test_2016_flickr"]["bleu_beam"],
           "k": lambda: ZEN4_FP32["test_2016_flickr"]["beam_size"],
           "eu": lambda: BF16["steps"], "fu": lambda: FP32["steps"],
           "eb": lambda: BF16["test_2016_flickr"]["bleu_beam"],
           "ef": lambda: FP32["test_2016_flickr"]["bleu_beam"]},
          lambda: (ZEN4_FP32["steps"] > ZEN4_BF16["steps"] and BF16["steps"] > FP32["steps"]
                   and FP32["recipe"]["n_layers"] == BF16["recipe"]["n_layers"] == 3
                   and BF16["recipe"]["amp"] and not FP32["recipe"]["amp"]
                   and ZEN4_FP32["cpu"].startswith("AMD EPYC")
                   and ZEN4_BF16["cpu"].startswith("AMD EPYC")
                   and PRECISION["cpu"].startswith("AMD EPYC")
                   and not ZEN4_FP32["recipe"]["amp"] and ZEN4_BF16["recipe"]["amp"]
                   and ZEN4_FP32["precision"] == "float32" and ZEN4_BF16["precision"] == "bfloat16"
                   and all(as_recorded(ZEN4_FP32["recipe"])[k]
                           == as_recorded(ZEN4_BF16["recipe"])[k] == v
                           for k, v in dataclasses.asdict(CPU).items() if k not in RUN_ONLY))),
    # ---------------------------------------------------------------- chapter 21
    Quote("notebooks/21_wmt14.ipynb",
          rf"(?P<m>Thirty) minutes \((?P<s>{NUM}) s\) is much longer than any of those waits in a "
          r"run whose store is built: a process that waits longer stops with one line naming "
          r"`--dist-timeout`",
          {"m": lambda: preset("wmt14-base").dist_timeout_s / 60,
           "s": lambda: preset("wmt14-base").dist_timeout_s},
          lambda: preset("wmt14-big").dist_timeout_s == preset("wmt14-base").dist_timeout_s),
    Quote("notebooks/21_wmt14.ipynb",
          rf"the run goes on from its last checkpoint \(one every (?P<k>{NUM}) updates\)",
          {"k": lambda: preset("wmt14-base").checkpoint_every},
          lambda: preset("wmt14-big").checkpoint_every == preset("wmt14-base").checkpoint_every),
    # ---------------------------------------------------------------- docs/gpu.md
    Quote("docs/gpu.md",
          rf"the `gpu` preset made (?P<u>{NUM}) updates in (?P<s>{NUM}) s and scored (?P<g>{NUM}) "
          rf"greedy and (?P<b>{NUM}) beam BLEU on test_2016_flickr \(chapter 18 reads it\); the "
          rf"sweep's `gpu-30s` preset made (?P<u2>{NUM}) updates in its (?P<s2>{NUM}) s and the "
          rf"best variant, `budget-pre-ln`, (?P<u3>{NUM}), scoring (?P<g3>{NUM}) greedy and "
          rf"(?P<b3>{NUM}) beam on test",
          {"u": lambda: H200["steps"], "s": lambda: H200["recipe"]["time_budget_s"],
           "g": lambda: H200["test_2016_flickr"]["bleu_greedy"],
           "b": lambda: H200["test_2016_flickr"]["bleu_beam"],
           "u2": lambda: H200_SWEEP["variants"][0]["updates"],
           "s2": lambda: H200_SWEEP["base_recipe"]["time_budget_s"],
           "u3": lambda: H200_SWEEP["winner_record"]["steps"],
           "g3": lambda: H200_SWEEP["winner_record"]["test_2016_flickr"]["bleu_greedy"],
           "b3": lambda: H200_SWEEP["winner_record"]["test_2016_flickr"]["bleu_beam"]},
          lambda: (H200["recipe"]["compile"] and H200_SWEEP["variants"][0]["name"] == "preset"
                   and H200_SWEEP["winner"]["name"] == "budget-pre-ln"
                   and H200["git_commit"].startswith("d71383a"))),
]


@pytest.mark.parametrize("quote", QUOTES, ids=[q.id for q in QUOTES])
def test_quoted_numbers_agree_with_presets_and_records(quote):
    text = prose(quote.page)
    matches = list(re.finditer(quote.pattern, text))
    assert matches, (f"{quote.page}: the sentence this test checks is gone or reworded; find it "
                     f"and update the pattern with the text: {quote.pattern!r}")
    for m in matches:
        for name, value in quote.values.items():
            assert agrees(m.group(name), value()), (
                f"{quote.page} says {m.group(name)!r} ({name}) where the source gives "
                f"{value()!r}: «{m.group(0)}»")
    assert quote.holds(), f"{quote.page}: what the sentence says no longer holds: «{matches[0][0]}»"


def test_every_named_group_is_checked():
    for quote in QUOTES:
        assert set(re.compile(quote.pattern).groupindex) == set(quote.values), quote.id


def test_agrees_rounds_as_the_text_does():
    assert agrees("1,797", 1797.0) and agrees("0.87", 0.8676) and agrees("0.14", 0.1372)
    assert not agrees("0.86", 0.8676) and not agrees("half", 0.87)
    assert agrees("2\\cdot10^{-3}", 0.002) and agrees("10^{-3}", 0.001)
    assert agrees("2.8\\cdot10^{-3}", 0.0027951) and not agrees("2.8\\cdot10^{-3}", 0.0029)
    assert agrees("7.6", 7.578624) and agrees("57", 57.02) and not agrees("58", 57.02)
    assert agrees("thirty", 1797.14 / 60) and agrees("two thirds", 0.6655)
    assert agrees("half", 0.4989) and agrees("two", 2) and not agrees("two", 1)


def test_a_changed_number_is_caught():
    """The check fails when the text and the source part: here the text is changed."""
    quote = next(q for q in QUOTES if "sqrt" in q.pattern)
    text = prose(quote.page).replace("0.10 of it", "0.19 of it")
    m = re.search(quote.pattern, text)
    assert m and not agrees(m.group("b"), quote.values["b"]())


# --- numbers of the records found outside the checked sentences ---------------------------------

def distinctive_numbers() -> set[str]:
    """The shipped run's numbers as the prose would write them: updates, tokens per second, BLEU
    to one decimal, epochs, and the time budget."""
    out = set()
    for rec in (RUN, FP32, BF16):
        t = rec["test_2016_flickr"]
        out |= {f"{rec['steps']:,}", f"{rec['steps']}", f"{rec['target_tokens_per_s']:,.0f}",
                f"{rec['val']['bleu_greedy']:.1f}", f"{t['bleu_greedy']:.1f}",
                f"{t['bleu_beam']:.1f}", f"{rec['epochs']}", f"{rec['epochs']:.1f}"}
    for split in ("val", "test_2016_flickr"):
        out |= {f"{SHIPPED[split]['bleu_greedy']:.1f}", f"{SHIPPED[split]['bleu_beam']:.1f}"}
    out |= {f"{CPU.time_budget_s:,.0f}", f"{CPU.time_budget_s:.0f}"}
    return out


def unchecked_occurrences(page: str, text: str | None = None) -> list[str]:
    """Each distinctive record number in `page` (or in `text`, read as that page) that lies outside
    every sentence a `Quote` of the page checks, with some context."""
    text = prose(page) if text is None else text
    covered = [m.span() for q in QUOTES if q.page == page for m in re.finditer(q.pattern, text)]
    found = []
    for number in sorted(distinctive_numbers()):
        for m in re.finditer(rf"(?<![\d.,]){re.escape(number)}(?![\d]|[.,]\d)", text):
            if not any(a <= m.start() and m.end() <= b for a, b in covered):
                found.append(f"{number}: «{text[max(0, m.start() - 60):m.end() + 60]}»")
    return found


def test_the_scan_finds_an_unchecked_quote():
    page = "notebooks/18_capstone.ipynb"
    assert not unchecked_occurrences(page)
    added = f" The run made {RUN['steps']:,} updates, {RUN['target_tokens_per_s']:,.0f} tokens/s."
    found = unchecked_occurrences(page, prose(page) + added)
    assert sorted(f.split(":")[0] for f in found) == sorted(
        [f"{RUN['steps']:,}", f"{RUN['target_tokens_per_s']:,.0f}"]), found


def test_captions_and_alt_texts_are_read_as_prose():
    cell = {"cell_type": "code", "source": [],
            "metadata": {"mystnb": {"figure": {"caption": "C", "name": "fig-x"},
                                    "image": {"alt": "A"}}}}
    assert figure_texts(cell) == ["C", "A"] and figure_texts({"metadata": {}}) == []
    page = "notebooks/18_capstone.ipynb"
    cells = json.loads((ROOT / page).read_text())["cells"]
    texts = [t for c in cells if c["cell_type"] == "code" for t in figure_texts(c)]
    assert len(texts) >= 8 and all(re.sub(r"\s+", " ", t) in prose(page) for t in texts)
    alt = next(t for t in texts if "rises unevenly" in t)
    number = f"{RUN['val']['bleu_greedy']:.1f}"
    assert number in alt and not unchecked_occurrences(page)           # a Quote checks it
    assert unchecked_occurrences(page, prose(page).replace(alt, alt.replace(
        "at the end of training", "when training ends")))                  # and only a Quote


@pytest.mark.parametrize("page", prose_pages())
def test_record_numbers_are_quoted_only_where_checked(page):
    found = unchecked_occurrences(page)
    assert not found, (f"{page} quotes numbers of the records in results/ in a sentence that no "
                       f"Quote in tests/test_prose_numbers.py checks; add one: {found}")
