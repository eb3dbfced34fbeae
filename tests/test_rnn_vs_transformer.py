"""benchmarks/experiments/rnn_vs_transformer.py and its records: the commands chapter 20 prints for
the records
in results/ give the recipe and the GRU those records ran (the earlier, 3+3-layer cpu-30min, pinned
by flags since the preset has two layers), and the parameter counts its docstring quotes are the
models' own. Needs no data: the commands are parsed, not run."""
import dataclasses
import json
import re
import shlex
from pathlib import Path

import pytest

from transformer_lib.equal_time import RNN_SIZES, rnn_config
from transformer_lib.multi_head_attention import count_parameters
from transformer_lib.recipe import preset
from transformer_lib.recurrent import RecurrentTranslator
from transformer_lib.stages import build_model

ROOT = Path(__file__).resolve().parents[1]
import rnn_vs_transformer  # noqa: E402

# the earlier records' commands are printed in appendix A7, with the records
CHAPTER = ROOT / "notebooks" / "A7_how_the_numbers_were_made.ipynb"
# Fields of the recipe that `compare` sets itself (the budget among them) or that the run's
# terminal decides; every other field of a record's recipe is the command's.
SET_BY_COMPARE = {"time_budget_s", "epochs", "max_steps", "average_last", "keep_snapshots",
                  "checkpoint_every", "eval_every", "eval_beam", "eval_sentences", "out_dir",
                  "progress"}
# Recipe fields added after these records, at the default that does what their code did
LATER = {"accum_steps", "dataset", "update_tokens", "store_dir", "snapshot_every", "src_lang",
         "tgt_lang", "pairs", "columns", "source", "target", "val", "test", "heldout",
         "split_seed", "max_chars", "decode_batch", "dist_timeout_s"}
# these records asked for autocast on CPUs without bfloat16 instructions: float32 (each run's
# "precision" says so), as the preset now trains without asking
NOT_COMPARED = SET_BY_COMPARE | LATER | {"amp"}
# cpu-30min before 2+2 layers and 4,000 tokens
EARLIER = {"n_layers": 3, "attn_dropout": 0.1, "ffn_dropout": 0.1, "vocab_size": 8000,
           "peak_lr": 2e-3}
SIZES_2X2 = {"d_hidden": 344, "d_attn": 344}


def chapter_commands() -> list[list[str]]:
    """The argument lists of the `python benchmarks/experiments/rnn_vs_transformer.py` commands in
    the chapter's markdown, continuation lines joined."""
    cells = json.loads(CHAPTER.read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    text = text.replace("\\\n", " ")
    return [shlex.split(line)[2:] for line in text.splitlines()
            if line.startswith("python benchmarks/experiments/rnn_vs_transformer.py ")]


def counts(recipe, **sizes) -> tuple[int, int]:
    "Parameters of the GRU translator and of the Transformer of `recipe` at its vocabulary size."
    vocab = recipe.vocab_size
    return (count_parameters(RecurrentTranslator(rnn_config(recipe, vocab, **sizes))),
            count_parameters(build_model(recipe, vocab)))


def test_the_chapter_prints_a_command_for_every_record():
    written = {argv[argv.index("--json") + 1] for argv in chapter_commands()}
    records = {p.relative_to(ROOT).as_posix()
               for p in (ROOT / "results").glob("rnn-vs-transformer-cpu-*.json")}
    assert records and written == records


@pytest.mark.parametrize("argv", chapter_commands(), ids=lambda a: a[a.index("--json") + 1])
def test_the_chapters_command_gives_the_records_recipe(argv):
    args, recipe = rnn_vs_transformer.parse_args(argv)
    record = json.loads((ROOT / args.json).read_text())
    ran, given = record["recipe"], dataclasses.asdict(recipe)
    assert {k: v for k, v in given.items() if k not in NOT_COMPARED} == {
        k: v for k, v in ran.items() if k not in NOT_COMPARED}
    assert all(r["precision"] == "float32" for r in record["runs"])
    assert all(getattr(recipe, k) == getattr(preset("cpu-30min"), k) for k in LATER)
    assert ran["time_budget_s"] == record["budget_s"] == args.budget_s
    assert {k: ran[k] for k in EARLIER} == EARLIER                        # the pinned recipe
    assert {k: getattr(preset("cpu-30min"), k) for k in EARLIER} != EARLIER   # not the preset's
    assert record["rnn"]["d_hidden"] == args.rnn_hidden and record["rnn"]["d_attn"] == args.rnn_attn
    assert record["rnn"]["peak_lr"] == (args.rnn_peak_lr or recipe.peak_lr)
    assert record["val_sentences"] == 1014 and args.val_sentences == 0
    assert record["beam_size"] == args.beam and record["order"] == ["gru", "transformer"]
    gru, transformer = (next(x for x in record["runs"] if x["model"] == m)
                        for m in ("gru", "transformer"))
    assert (gru["parameters"], transformer["parameters"]) == counts(
        recipe, d_hidden=args.rnn_hidden, d_attn=args.rnn_attn)


def test_the_default_gru_matches_the_earlier_recipe_and_344_the_current_one():
    """What the script's docstring says: 448 sizes the GRU to the 3+3 Transformer, 344 to the
    2+2 one, each within 5%; the counts it quotes are the models' own."""
    current = preset("cpu-30min")
    earlier = dataclasses.replace(current, **EARLIER)
    assert RNN_SIZES == {"d_hidden": 448, "d_attn": 448}
    doc = re.sub(r"\s+", " ", rnn_vs_transformer.__doc__)
    assert "--rnn-hidden 344 --rnn-attn 344" in doc
    assert "--n-layers 3 --attn-dropout 0.1 --ffn-dropout 0.1" in doc
    for recipe, sizes in ((earlier, {}), (current, SIZES_2X2)):
        gru, transformer = counts(recipe, **sizes)
        assert abs(gru / transformer - 1) < 0.05
        assert f"{gru:,}" in doc and f"{transformer:,}" in doc
    gru, transformer = counts(current)
    assert gru / transformer > 1.3          # the default GRU is far larger than the 2+2 model


def test_the_grus_clipping_is_a_switch_and_reaches_its_training(monkeypatch):
    """--rnn-clip 0 trains the GRU without clipping (as the recipe trains the Transformer): the
    value reaches the record and the GRU's training and timing, None meaning no clipping; the
    Transformer keeps the recipe's own clip_grad_norm."""
    from types import SimpleNamespace

    import torch

    from transformer_lib import equal_time
    args, recipe = rnn_vs_transformer.parse_args(["--rnn-clip", "0", "--models", "gru"])
    assert args.rnn_clip == 0 and args.models == ("gru",)
    with pytest.raises(SystemExit):
        rnn_vs_transformer.parse_args(["--models", "lstm"])
    with pytest.raises(ValueError, match="rnn_clip"):
        equal_time.compare(recipe, 1.0, rnn_clip=-1)
    clips = []
    s = SimpleNamespace(recipe=dataclasses.replace(recipe, clip_grad_norm=0.5), history=[],
                        train_seconds=1.0, step=1, steps_per_epoch=1, n_params=1, amp_dtype=None,
                        model=SimpleNamespace(config=SimpleNamespace()), tokenizer=None,
                        val_pairs=[], device=torch.device("cpu"), commit="c")
    monkeypatch.setattr(equal_time, "install", lambda *a: None)
    monkeypatch.setattr(equal_time, "train_for_budget",
                        lambda s, points, clip: clips.append(clip) or [{"val_nll": 1.0}])
    monkeypatch.setattr(equal_time, "phase_seconds", lambda s, clip: clips.append(clip) or {})
    monkeypatch.setattr(equal_time, "update_flops", lambda s, batches: {})
    monkeypatch.setattr(equal_time, "timed_bleu", lambda *a, **k: {
        "bleu": 1.0, "sentences_per_s": 1.0, "signature": "sig"})
    monkeypatch.setattr(equal_time.dataclasses, "asdict", lambda c: {})
    for rnn_clip, kind, expected in ((0.0, "gru", None), (1.0, "gru", 1.0),
                                     (0.0, "transformer", 0.5)):
        clips.clear()
        equal_time.run_one(s, kind, None, {"clip": rnn_clip, "sizes": {}, "peak_lr": 1e-3}, 1, 1)
        assert clips == [expected, expected], (rnn_clip, kind)
    monkeypatch.setattr(equal_time, "prepare", lambda r: s)
    monkeypatch.setattr(equal_time, "run_one", lambda s, kind, amp, rnn, points, beam, flops: {
        "model": kind, "clip": rnn["clip"]})
    rec = equal_time.compare(recipe, 1.0, models=("gru",), rnn_clip=0)
    assert rec["rnn"]["clip"] == 0.0 and rec["runs"] == [{"model": "gru", "clip": 0.0}]


REMATCHES = [ROOT / "results" / d for d in ("rematch", "rematch-xeon")]   # one folder a machine
RUN_NAME = re.compile(r"gru-(\d+)-lr([\d.e-]+\d)(?:-seed(\d+))?"
                      r"|transformer(?:-lr([\d.e-]+\d))?(?:-seed(\d+))?")


@pytest.mark.parametrize("path", sorted(p for d in REMATCHES for p in d.glob("*.json")
                                        if p.stem != "update-flops"),
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_rematch_record_is_the_run_its_name_says(path):
    """benchmarks/trials/rematch.sh names each run: the record holds that model, width, peak
    learning rate and seed, on the cpu-30min recipe as it is otherwise, 1,797 s, float32, no
    clipping, all of validation. (A Transformer run named without a rate trained at the recipe's
    peak of the time, 2e-3; the earlier folder's runs asked for autocast on a CPU without
    bfloat16, so trained in float32 too.)"""
    rec = json.loads(path.read_text())
    (run,) = rec["runs"]
    m = RUN_NAME.fullmatch(path.stem)
    assert m and path.stem != "transformer", path.stem
    ours = NOT_COMPARED | {"seed", "peak_lr"}
    cpu = dataclasses.asdict(preset("cpu-30min"))
    assert {k: v for k, v in rec["recipe"].items() if k not in ours} == {
        k: v for k, v in cpu.items() if k not in ours}
    assert rec["budget_s"] == cpu["time_budget_s"] == 1797 and rec["val_sentences"] == 1014
    assert rec["rnn"]["clip"] == 0.0 and not cpu["clip_grad_norm"]        # neither clips
    assert run["precision"] == "float32" and run["training_seconds"] >= rec["budget_s"]
    if path.parent.name == "rematch-xeon":                  # every run there: --no-amp, named CPU
        assert rec["recipe"]["amp"] is False and "kernels" in rec["cpu"]
    if m[1]:
        width = int(m[1])
        assert run["model"] == "gru" and rec["rnn"]["d_hidden"] == rec["rnn"]["d_attn"] == width
        assert rec["rnn"]["peak_lr"] == float(m[2]) and rec["recipe"]["seed"] == int(m[3] or 0)
        assert run["parameters"] == counts(preset("cpu-30min"), d_hidden=width, d_attn=width)[0]
    else:
        assert run["model"] == "transformer" and rec["recipe"]["seed"] == int(m[5] or 0)
        assert rec["recipe"]["peak_lr"] == float(m[4] or 2e-3)
        assert run["parameters"] == counts(preset("cpu-30min"))[1]
