"""benchmarks/speed/train_throughput.py and benchmarks/experiments/bleu_at_equal_time.py: their
smallest configurations run end to end in a subprocess and write a JSON record with the fields the
book and results/ read (the speeds and scores are not checked: they are the measurement); and the
nn.Transformer reference translates with chapter 15's decoders exactly as its own forward pass
computes; benchmarks/experiments/length_penalty_sweep.py sweeps a training run's own weights."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import benchmark_script

from transformer_lib import data
from transformer_lib.decoding import beam_search, greedy_decode
from transformer_lib.engineering import amp_settings, cpu_has_native_bf16
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.recipe import preset

ROOT = Path(__file__).resolve().parents[1]
from train_throughput import TorchReference  # noqa: E402


def run_script(name, *flags, out):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(benchmark_script(name)), *flags, "--json",
                           str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


def small_reference(norm_first):
    torch.manual_seed(0)
    return TorchReference(50, 16, 2, 2, 32, 0.1, norm_first).eval()


@pytest.mark.parametrize("norm_first", [False, True])
def test_reference_decode_matches_its_forward(norm_first):
    """decode with the prefix cache, one token at a time, gives the logits of the full forward
    pass."""
    model = small_reference(norm_first)
    g = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(3, 50, (3, 7), generator=g), torch.randint(3, 50, (3, 5), generator=g)
    src[0, 5:] = 0                                                  # padding in one source sentence
    src_mask = (src != 0)[:, None, None, :]
    with torch.no_grad():
        full = model(src, tgt)                                        # (B, T, V)
        memory, cache = model.encode(src, src_mask), {}
        steps = torch.cat([model.decode(tgt[:, t:t + 1], memory, src_mask, cache=cache)
                           for t in range(5)], 1)
        whole = model.decode(tgt, memory, src_mask)
    assert steps.shape == full.shape == (3, 5, 50)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(whole, full, atol=1e-5, rtol=1e-5)
    assert cache["prefix"].shape == (3, 5)


def test_reference_works_with_greedy_and_beam_search():
    model = small_reference(True)
    src = torch.randint(3, 50, (4, 6), generator=torch.Generator().manual_seed(2))
    cached, uncached = (greedy_decode(model, src, 8, 1, 2, use_cache=c) for c in (True, False))
    assert torch.equal(cached, uncached) and cached[:, 0].eq(1).all()
    assert torch.equal(*(beam_search(model, src, beam_size=3, max_len=8, bos_id=1, eos_id=2,
                                     use_cache=c)
                         for c in (True, False)))


def test_reference_embedding_initialised_like_ours():
    """Shared with the output layer, std d_model^-1/2 (nn.Embedding's default std 1 gives huge first
    logits)."""
    torch.manual_seed(0)
    model = TorchReference(4000, 64, 2, 1, 64, 0.0, True)
    assert model.out.weight is model.embed.weight
    assert abs(model.embed.weight.std().item() - 64 ** -0.5) < 0.01


@pytest.mark.parametrize("norm_first", [False, True])
def test_reference_has_the_recipes_three_dropouts(norm_first):
    """nn.Transformer has one `dropout`; TorchReference sets its attention-weight and FFN dropout
    apart, as the recipe does for ours (dropout on sub-layer outputs only: attn 0, ffn 0)."""
    torch.manual_seed(0)
    model = TorchReference(50, 16, 2, 2, 32, 0.0, norm_first, attn_dropout=0.0, ffn_dropout=0.0)
    layers = [*model.core.encoder.layers, *model.core.decoder.layers]
    assert all(m.self_attn.dropout == 0.0 and m.dropout.p == 0.0 for m in layers)
    src = torch.randint(3, 50, (3, 7), generator=torch.Generator().manual_seed(1))
    tgt = src[:, :5]
    with torch.no_grad():
        torch.testing.assert_close(model.train()(src, tgt), model.eval()(src, tgt))
    mixed = TorchReference(50, 16, 2, 2, 32, 0.1, norm_first, attn_dropout=0.0, ffn_dropout=0.3)
    dec = mixed.core.decoder.layers[0]
    assert (dec.dropout1.p, dec.multihead_attn.dropout, dec.dropout.p) == (0.1, 0.0, 0.3)
    assert mixed.pos.dropout.p == 0.1
    default = TorchReference(50, 16, 2, 1, 32, 0.2, norm_first)          # one rate for all three
    enc = default.core.encoder.layers[0]
    assert enc.self_attn.dropout == enc.dropout.p == enc.dropout1.p == 0.2


@pytest.mark.parametrize("norm_first", [False, True])
def test_reference_from_ours_computes_our_function(norm_first):
    """TorchReference.from_ours puts our weights into nn.Transformer: the same logits (a post-LN
    model of ours has no final LayerNorms, so the copy has none either)."""
    torch.manual_seed(0)
    cfg = TransformerConfig.base(50, d_model=16, n_heads=2, n_layers=2, d_ff=32,
                                 norm_first=norm_first)
    ours = Transformer(cfg).eval()
    ref = TorchReference.from_ours(ours)
    g = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(3, 50, (3, 7), generator=g), torch.randint(3, 50, (3, 5), generator=g)
    src[0, 5:] = 0
    with torch.no_grad():
        torch.testing.assert_close(ref(src, tgt), ours(src, tgt), atol=1e-5, rtol=1e-5)
    assert (ref.core.encoder.norm is None) == (not norm_first) and not ref.training
    with pytest.raises(ValueError, match="shares one matrix"):
        TorchReference.from_ours(Transformer(TransformerConfig(50, 50, 16, 2, 1, 32)))


@pytest.mark.needs_data
def test_reference_translates_as_ours_with_the_books_translator():
    """With the book's translator's weights, nn.Transformer (prefix recomputed at every step) and
    ours (KV cache, reordered between beams) give the same translations, greedy and beam 4, in
    float32: the decoding paths do not differ."""
    from transformer_lib.stages import translate
    ours, tok, _ = data.load_translator()
    ref = TorchReference.from_ours(ours)
    german = [de for de, _ in data.load_multi30k("val")[:24]]
    for beam in (1, 4):
        mine, theirs = (translate(m, tok, german, beam_size=beam, alpha=1.2) for m in (ours, ref))
        assert mine == theirs and len(set(mine)) > 20


@pytest.mark.needs_data
def test_translate_without_the_cache_gives_what_the_cache_gives():
    """translate(use_cache=False) re-reads the prefix at every step instead of caching keys and
    values: in float32 the same translations, greedy and beam 4."""
    from transformer_lib.stages import translate
    ours, tok, _ = data.load_translator()
    german = [de for de, _ in data.load_multi30k("val")[:24]]
    for beam in (1, 4):
        cached, recomputed = (translate(ours, tok, german, beam_size=beam, alpha=1.2,
                                        use_cache=cache) for cache in (True, False))
        assert cached == recomputed and len(set(cached)) > 20


@pytest.mark.needs_data
def test_beam_diagnosis_writes_one_row_per_path(tmp_path):
    """Ours with and without the cache and nn.Transformer, each in float32 and bfloat16: six rows,
    each with greedy and beam BLEU, the gain, and agreement with ours in float32 with the cache
    (which agrees with itself on every sentence)."""
    from beam_diagnosis import main as diagnose
    rec = diagnose(["--sentences", "3", "--alphas", "1.2", "--json", str(tmp_path / "d.json")])
    paths = [(r["model"], r["precision"], r["kv_cache"]) for r in rec["rows"]]
    assert paths == [("ours", p, c) for p in ("float32", "bfloat16") for c in (True, False)] + [
        ("nn.Transformer", p, False) for p in ("float32", "bfloat16")]
    first = rec["rows"][0]
    assert first["beam_alpha_1.2"]["same_as_ours_float32"] == 3 == first["greedy"][
        "same_as_ours_float32"]
    assert first["gain_alpha_1.2"] == pytest.approx(first["beam_alpha_1.2"]["bleu"]
                                                   - first["greedy"]["bleu"])
    assert json.loads((tmp_path / "d.json").read_text())["rows"][1]["model"] == "ours"


@pytest.mark.needs_data
@pytest.mark.slow
def test_train_throughput_smoke(tmp_path):
    rec, out = run_script("train_throughput.py", "--preset", "cpu-30min", "--tiny", "--device",
                          "cpu", "--amp", out=tmp_path / "tt.json")     # the bf16 path too
    bf16 = amp_settings("cpu", cpu_bf16=True)[0] is not None        # this CPU has bf16 instructions
    names = [r["model"] for r in rec["results"]]
    assert names == (["transformer_lib", "nn.Transformer", "transformer_lib float32",
                      "nn.Transformer bfloat16"]
                     if bf16 else ["transformer_lib", "nn.Transformer"])
    assert [r["precision"] for r in rec["results"]][:2] == ["bfloat16" if bf16 else "float32",
                                                            "float32"]
    for r in rec["results"]:
        assert r["steps"] == 12 and len(r["round_seconds"]) == 3 and r["tokens_per_s"] > 0
        assert 0 < r["ceiling_fraction"] and r["parameters"] > 0
    assert set(rec["ratios"]) == ({"as_run", "same_precision", "both_bfloat16"} if bf16
                                  else {"as_run", "same_precision"})
    assert rec["ratios"]["same_precision"]["numerator"] == ("transformer_lib float32" if bf16
                                                            else "transformer_lib")
    for c in rec["ratios"].values():
        assert c["min"] <= c["median"] <= c["max"] and len(c["rounds"]) == 3
    assert set(rec["ceilings_flops_per_s"]) == ({"float32", "bfloat16"} if bf16 else {"float32"})
    for key in ("device", "torch", "git_commit", "ratio", "ratio_median", "ratio_min", "ratio_max",
                "ceiling_flops_per_s"):                               # chapter 18 reads these
        assert key in rec
    assert "as_run" in out and "ceiling" in out


@pytest.mark.needs_data
@pytest.mark.skipif(not cpu_has_native_bf16(), reason="compares with bfloat16 instructions")
def test_cpu_precision_smoke(tmp_path):
    rec, out = run_script("cpu_precision.py", "--tiny", out=tmp_path / "p.json")
    rows = rec["rows"]
    assert set(rows) == {"float32", "bfloat16"} and rec["steps"] == 16 and rec["block"] == 4
    for row in rows.values():
        assert row["steps"] == 16 and row["target_tokens_per_s"] > 0
        assert 0 < row["first_seen_shapes"] <= 16
    b = rec["bf16_speedup_per_block"]
    assert b["min"] <= b["median"] <= b["max"] and rec["bf16_speedup"] > 0
    assert rec["distinct_shapes_by_epoch"] and "bfloat16 / float32" in out


@pytest.mark.needs_data
def test_bleu_at_equal_time_smoke(tmp_path):
    rec, out = run_script("bleu_at_equal_time.py", "--preset", "cpu-tiny", "--amp", "--norm-first",
                          "--train-pairs", "1000",
                          "--vocab-size", "500", "--budget-s", "2", "--val-sentences", "10",
                          "--beam", "2", out=tmp_path / "bleu.json")
    assert rec["sequential"] and rec["order"] == ["transformer_lib", "nn.Transformer"]
    assert (rec["val_sentences"] == 10 and rec["budget_s"] == 2 and rec["recipe"]["vocab_size"]
            == 500)
    tiny = preset("cpu-tiny")                  # both models get the recipe's three dropouts
    assert ([rec["recipe"][k] for k in ("dropout", "attn_dropout", "ffn_dropout")]
            == [tiny.dropout, tiny.attn_dropout, tiny.ffn_dropout])
    for key in ("device", "torch", "git_commit", "date"):
        assert key in rec
    bf16 = amp_settings("cpu", cpu_bf16=True)[0] is not None
    ours, ref = rec["runs"]
    assert (ours["precision"], ref["precision"]) == ("bfloat16" if bf16 else "float32", "float32")
    assert ours["parameters"] == ref["parameters"]          # pre-LN: the same modules on both sides
    for run in rec["runs"]:
        assert run["steps"] > 0 and run["training_seconds"] >= 2 and run["target_tokens_per_s"] > 0
        assert set(run["bleu"]) == {"greedy", "beam_2"} and all(0 <= b <= 100
                                                                for b in run["bleu"].values())
        assert run["val_loss"] > 0 and "tok:13a" in run["signature"]
    assert "nn.Transformer" in out


@pytest.mark.needs_data
@pytest.mark.slow
def test_parity_smoke_is_deterministic_per_update(tmp_path):
    """Equal updates, one precision, the verdict computed from the runs; the old per-block
    initialisation is a different run from ours; two processes' records combine into one."""
    flags = ("--preset", "cpu-tiny", "--train-pairs", "400", "--vocab-size", "500", "--updates",
             "6", "--val-sentences", "6")
    rec, out = run_script("parity.py", *flags, "--models", "ours", "nn.Transformer",
                          "ours-per-block-qkv", "--decode-float32", out=tmp_path / "a.json")
    assert [x["model"] for x in rec["runs"]] == ["ours", "nn.Transformer", "ours-per-block-qkv"]
    assert rec["precision"] == "float32" and rec["recipe"]["max_steps"] == 6
    tiny = preset("cpu-tiny")                  # both models get the recipe's three dropouts
    assert ([rec["recipe"][k] for k in ("dropout", "attn_dropout", "ffn_dropout")]
            == [tiny.dropout, tiny.attn_dropout, tiny.ffn_dropout])
    for x in rec["runs"]:
        assert x["steps"] == 6 and len(x["train_loss"]) == 6 and x["val_nll"] > 0
        assert set(x["bleu"]) == {"greedy"} and x["target_tokens_per_s"] > 0
        # what each decoding produced, and the same decoding again in float32: trained in float32,
        # the second decoding repeats the first exactly
        d = x["decoding"]
        assert set(d) == {"greedy", "greedy_float32"}
        assert d["greedy"]["bleu"] == x["bleu"]["greedy"] == d["greedy_float32"]["bleu"]
        assert d["greedy"]["precision"] == d["greedy_float32"]["precision"] == "float32"
        assert d["greedy"]["length_ratio"] == d["greedy_float32"]["length_ratio"] > 0
        assert 0 < d["greedy"]["brevity_penalty"] <= 1
    ours, ref, wide = rec["runs"]
    assert ours["train_loss"][0] != wide["train_loss"][0]       # another start, another first loss
    v = rec["verdict"]
    assert v["updates"] == 6 and v["val_nll_ratio"] == pytest.approx(ours["val_nll"]
                                                                     / ref["val_nll"])
    assert v["parity"] == (v["val_nll_ratio"] <= 1.01 and v["bleu_gap"]["greedy"] >= -0.5)
    again, _ = run_script("parity.py", *flags, "--models", "ours", out=tmp_path / "b.json")
    assert again["runs"][0]["train_loss"] == ours["train_loss"]    # the same updates, same losses
    assert again["verdict"] is None                                  # one model: nothing to judge
    ref_only, _ = run_script("parity.py", *flags, "--models", "nn.Transformer",
                             out=tmp_path / "c.json")
    both, _ = run_script("parity.py", "--combine", str(tmp_path / "b.json"),
                         str(tmp_path / "c.json"), out=tmp_path / "d.json")
    assert [x["model"] for x in both["runs"]] == ["ours", "nn.Transformer"]
    assert both["verdict"]["val_nll_ratio"] == pytest.approx(v["val_nll_ratio"])


def test_wmt14_throughput_smoke(tmp_path):
    """Both presets stepped as a run steps them; speed, FLOPs per step and the projection agree:
    hours = updates x micro-batches an update x seconds a step."""
    rec, out = run_script("wmt14_throughput.py", "--tiny", out=tmp_path / "w.json")
    assert [m["preset"] for m in rec["models"]] == ["wmt14-base", "wmt14-big"]
    for m in rec["models"]:
        assert m["flops_per_step"] > 0 and 0 < m["fraction_of_ceiling"]
        assert m["micro_batches_per_update"] == 25000 / (m["rows"] * m["length"])
        hours = m["updates"] * m["micro_batches_per_update"] * m["step_seconds_median"] / 3600
        assert m["projected_hours"]["1 device"] == pytest.approx(hours)
        assert m["projected_hours"]["8 devices"] == pytest.approx(hours / 8)
    assert "wmt14-big" in out and rec["tiny"] is True


@pytest.mark.needs_data
@pytest.mark.slow
def test_gpu_runbook_runs_end_to_end_on_the_cpu(tmp_path):
    """`--tiny`: every optional step of the GPU runbook, seconds long on the CPU, writes its record
    (its two calls: tests/test_gpu_runbook.py)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": sys.executable}
    env.pop("GIT_COMMIT", None)
    env.pop("DEADLINE_S", None)
    proc = subprocess.run(["bash", str(benchmark_script("gpu_runbook.sh")), "--tiny", "--steps",
                           "gpu30s parity seeds beam throughput wmt14", str(tmp_path)], cwd=ROOT,
                          env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "TIMED OUT" not in proc.stdout and "SKIPPED" not in proc.stdout, proc.stdout[-3000:]
    for name in ("gpu-30s", "gpu-parity", "gpu-30s-beam", "gpu-parity-cpu-30min-2x2-seeds",
                 "gpu-throughput", "wmt14-throughput-gpu"):
        rec = json.loads((tmp_path / f"{name}.json").read_text())
        for key in ("device", "torch", "git_commit", "date"):
            assert key in rec, (name, key)
    beam = json.loads((tmp_path / "gpu-30s-beam.json").read_text())
    assert [v["name"] for v in beam["variants"]] == ["preset"]
    assert beam["winner"]["name"] == "preset"
    table = beam["beam_table"]
    assert table["split"] == "val" and [(r["beam_size"], r["alpha"], r["precision"])
                                        for r in table["rows"]] == [(1, 0.0, "float32"),
                                                                    (2, 0.6, "float32")]
    assert all(r["length_ratio"] >= 0 and 0 <= r["brevity_penalty"] <= 1 for r in table["rows"])
    parity = json.loads((tmp_path / "gpu-parity.json").read_text())
    assert [x["model"] for x in parity["runs"]] == ["ours", "nn.Transformer"]
    assert parity["verdict"]["updates"] == 8 and set(parity["runs"][0]["bleu"]) == {"greedy",
                                                                                  "beam_2"}
    assert set(parity["runs"][0]["decoding"]) == {"greedy", "beam_2", "greedy_float32",
                                                  "beam_2_float32"}
    seeds = json.loads((tmp_path / "gpu-parity-cpu-30min-2x2-seeds.json").read_text())
    assert sorted((x["seed"], x["model"]) for x in seeds["runs"]) == [
        (0, "nn.Transformer"), (0, "ours"), (1, "nn.Transformer"), (1, "ours")]
    v = seeds["verdict"]
    assert v["seeds"] == [0, 1] and set(v["per_seed"]) == {"0", "1"}
    assert v["val_nll_ratio"] == pytest.approx(
        (v["per_seed"]["0"]["val_nll_ratio"] + v["per_seed"]["1"]["val_nll_ratio"]) / 2)
    assert seeds["runs"][0]["train_loss"] != seeds["runs"][2]["train_loss"]  # seeds differ
    assert (tmp_path / "gpu-device.txt").read_text().strip()


@pytest.mark.needs_data
@pytest.mark.slow
def test_rnn_vs_transformer_smoke(tmp_path):
    """Both models train for the same budget on one prepared run, one after the other, and the
    record holds what chapter 20 reads: updates, speed, NLL curve, BLEU, seconds per phase."""
    rec, out = run_script("rnn_vs_transformer.py", "--preset", "cpu-tiny", "--train-pairs", "500",
                          "--vocab-size", "500", "--budget-s", "2", "--val-sentences", "10",
                          "--beam", "2", "--points", "2", "--rnn-hidden", "32", "--rnn-attn",
                          "16", out=tmp_path / "rnn.json")
    assert rec["sequential"] and rec["order"] == ["gru", "transformer"] and rec["budget_s"] == 2
    assert rec["val_sentences"] == 10 and rec["recipe"]["vocab_size"] == 500
    assert rec["rnn"]["d_hidden"] == 32 and rec["rnn"]["clip"] == 1.0
    for key in ("device", "torch", "git_commit", "date", "command_line"):
        assert key in rec
    gru, transformer = rec["runs"]
    assert gru["config"]["d_hidden"] == 32 and gru["config"]["d_embed"] == 64      # = d_model
    assert transformer["config"] is None
    for run in rec["runs"]:
        assert run["updates"] > 0 and run["training_seconds"] >= 2
        assert run["target_tokens_per_s"] > 0 and run["parameters"] > 0
        assert set(run["bleu"]) == {"greedy", "beam_2"} and all(0 <= b <= 100
                                                                for b in run["bleu"].values())
        assert [p["seconds"] for p in run["curve"]] == sorted(p["seconds"] for p in run["curve"])
        assert run["curve"][-1]["val_nll"] == run["val_nll"] > 0 and len(run["curve"]) <= 2
        assert set(run["seconds_per_update"]) == {"encoder", "decoder", "backward", "optimizer"}
        assert all(v > 0 for v in run["seconds_per_update"].values())
        flops = run["matmul_flops"]
        # backward multiplies twice per forward product (less where no input gradient is needed)
        assert 2 < flops["per_update"] / flops["forward_per_update"] <= 3
        assert 0 < flops["batches"] <= 20 and flops["per_target_token"] > 0
    # both models counted on the same batches: the same target tokens
    tokens = [x["matmul_flops"]["per_update"] * x["matmul_flops"]["batches"]
              / x["matmul_flops"]["per_target_token"] for x in rec["runs"]]
    assert tokens[0] == pytest.approx(tokens[1], rel=1e-9)
    assert "transformer" in out and "gru" in out


@pytest.mark.needs_data
def test_length_penalty_sweep_reads_a_training_runs_directory(tmp_path):
    """`--run-dir` sweeps the weights a run wrote (RUN_DIR/model.pt, tokenizer.json), not the
    shipped translator: the record names the directory, and greedy decoding of those weights gives
    the BLEU the sweep reports."""
    from length_penalty_sweep import main as sweep

    from transformer_lib.optimization import save_checkpoint
    from transformer_lib.stages import timed_bleu
    from transformer_lib.text import SubwordTokenizer
    pairs = data.load_multi30k("val")[:4]
    tok = SubwordTokenizer.train([s for pair in data.load_multi30k("train")[:300] for s in pair],
                                 vocab_size=400)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.base(tok.vocab_size, d_model=16, n_heads=2, n_layers=1,
                                               d_ff=32)).eval()
    save_checkpoint(tmp_path / "model.pt", model)
    tok.save(tmp_path / "tokenizer.json")
    rec = sweep(["--run-dir", str(tmp_path), "--sentences", "4", "--beams", "2", "--alphas", "0.6",
                 "--json", str(tmp_path / "sweep.json")])
    assert rec["translator"] == {"run_dir": str(tmp_path)} and rec["sentences"] == 4
    assert [(r["beam_size"], r["alpha"]) for r in rec["rows"]] == [(1, 0.0), (2, 0.6)]
    greedy = timed_bleu(model, tok, pairs, beam_size=1, alpha=0.0, device=torch.device("cpu"),
                        amp_dtype=None)
    assert rec["rows"][0]["bleu"] == greedy["bleu"]
    assert json.loads((tmp_path / "sweep.json").read_text())["rows"] == rec["rows"]


@pytest.mark.needs_data
def test_translator_samples_record_what_translate_gives(tmp_path):
    """The sample record chapter 18 checks its live translations against: the shipped file's
    checksum, the run's beam size and length penalty, and the translations of the committed record
    (three sentences decoded alone give what they gave among the hundred)."""
    from translator_samples import main as samples

    rec = samples(["--sentences", "3", "--json", str(tmp_path / "s.json")])
    shipped = json.loads((ROOT / "results" / "multi30k-cpu-30min.shipped.json").read_text())
    run = json.loads((ROOT / "results" / "multi30k-cpu-30min.json").read_text())
    assert rec["translator_sha256"] == shipped["sha256"] and rec["sentences"] == 3
    assert (rec["beam_size"], rec["length_penalty"]) == (run["test_2016_flickr"]["beam_size"],
                                                         run["test_2016_flickr"]["length_penalty"])
    assert json.loads((tmp_path / "s.json").read_text())["beam"] == rec["beam"]
    committed = json.loads((ROOT / "results" / "multi30k-cpu-30min.samples.json").read_text())
    assert committed["translator_sha256"] == shipped["sha256"]
    assert committed["greedy"][:3] == rec["greedy"] and committed["beam"][:3] == rec["beam"]


@pytest.fixture
def restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_ffn_lookup_writes_the_record_chapter_19_reads(tmp_path, restore_threads):
    """Every design, each seed, a few updates: the record's fields, and a score per seed that the
    package's train_toy gives for the same settings."""
    from ffn_lookup import main as lookup

    from transformer_lib.inside import DESIGNS, lookup_task, toy_config, train_toy
    rec = lookup(["--seeds", "0", "--steps", "3", "--batch-size", "8", "--threads", "1",
                  "--json", str(tmp_path / "l.json")])
    assert rec["threads"] == 1 and rec["steps"] == 3 and rec["seeds"] == [0]
    assert list(rec["designs"]) == list(DESIGNS)
    train, test = lookup_task()
    name, (n_layers, d_ff) = next(iter(DESIGNS.items()))
    assert rec["designs"][name]["scores"] == [train_toy(toy_config(n_layers, d_ff), train, test, 0,
                                                        steps=3, batch_size=8)]
    assert json.loads((tmp_path / "l.json").read_text())["designs"] == rec["designs"]
    for key in ("device", "torch", "git_commit", "date"):
        assert key in rec


@pytest.mark.needs_data
def test_heads_off_writes_the_record_chapter_19_reads(tmp_path, restore_threads):
    """Two sentences: one translation with every head, one per head and per module, one per kind
    of attention; the record names the translator file it decoded."""
    from heads_off import main as heads

    rec = heads(["--sentences", "2", "--threads", "1", "--json", str(tmp_path / "h.json")])
    shipped = json.loads((ROOT / "results" / "multi30k-cpu-30min.shipped.json").read_text())
    assert rec["translator_sha256"] == shipped["sha256"] and rec["sentences"] == 2
    n_modules = len(rec["per_module"])
    assert all(len(d) == rec["n_heads"] for d in rec["per_head"].values())
    assert rec["translations"] == 1 + n_modules * (rec["n_heads"] + 1) + len(rec["per_kind"])
    assert set(rec["per_kind"]) == {"self", "cross"}
    assert json.loads((tmp_path / "h.json").read_text())["per_head"] == rec["per_head"]


@pytest.mark.needs_data
def test_snapshot_averages_scores_the_average_of_the_last_k_weights(tmp_path):
    """`--last k` averages the last k of [epoch snapshots..., model.pt] (k = 1: the final weights
    alone): the score it reports for k = 2 is that of the elementwise mean of the last snapshot and
    the final weights, decoded here independently; a k beyond the weights kept is an error."""
    from snapshot_averages import main as averages

    from transformer_lib.optimization import save_checkpoint
    from transformer_lib.stages import timed_bleu
    from transformer_lib.text import SubwordTokenizer
    pairs = data.load_multi30k("val")[:4]
    tok = SubwordTokenizer.train([s for pair in data.load_multi30k("train")[:300] for s in pair],
                                 vocab_size=400)
    config = TransformerConfig.base(tok.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    models = []
    for seed, path in ((0, "snapshots/epoch_0000.pt"), (1, "snapshots/epoch_0001.pt"),
                       (2, "model.pt")):
        torch.manual_seed(seed)
        models.append(Transformer(config).eval())
        (tmp_path / path).parent.mkdir(exist_ok=True)
        save_checkpoint(tmp_path / path, models[-1])
    tok.save(tmp_path / "tokenizer.json")
    rec = averages(["--run-dir", str(tmp_path), "--last", "1", "2", "--sentences", "4",
                    "--beam", "2", "--alpha", "0.6", "--json", str(tmp_path / "avg.json")])
    assert [r["averaged"] for r in rec["rows"]] == [["model.pt"], ["epoch_0001.pt", "model.pt"]]
    mean = Transformer(config).eval()
    mean.load_state_dict({k: ((v.double() + models[1].state_dict()[k].double()) / 2).float()
                          for k, v in models[2].state_dict().items()})
    cpu = torch.device("cpu")
    for row, model in zip(rec["rows"], (models[2], mean)):
        assert row["bleu_greedy"] == timed_bleu(model, tok, pairs, beam_size=1, alpha=0.6,
                                                device=cpu, amp_dtype=None)["bleu"]
    assert json.loads((tmp_path / "avg.json").read_text())["rows"] == rec["rows"]
    with pytest.raises(SystemExit):
        averages(["--run-dir", str(tmp_path), "--last", "4"])


@pytest.mark.needs_data
def test_update_flops_counts_every_model_on_the_same_batches(tmp_path):
    """benchmarks/experiments/update_flops.py: the Transformer and each GRU width, counted on the
    same batches (the same target tokens); a wider GRU costs more; backward about twice forward."""
    rec, out = run_script("update_flops.py", "--preset", "cpu-tiny", "--train-pairs", "300",
                          "--vocab-size", "450", "--rnn-hidden", "16", "32", "--batches", "2",
                          out=tmp_path / "flops.json")
    models = rec["models"]
    assert list(models) == ["transformer", "gru-16", "gru-32"]
    tokens = {name: m["per_update"] * m["batches"] / m["per_target_token"]
              for name, m in models.items()}
    assert len({round(t, 6) for t in tokens.values()}) == 1 and all(
        m["batches"] == 2 for m in models.values())
    assert models["gru-32"]["per_update"] > models["gru-16"]["per_update"] > 0
    assert models["gru-32"]["parameters"] > models["gru-16"]["parameters"]
    for m in models.values():
        assert 2 < m["per_update"] / m["forward_per_update"] <= 3
    assert "GFLOP per update" in out and rec["git_commit"]


def test_ffn_lookup_across_kernel_sets_keeps_each_sets_scores(tmp_path):
    """--kernels: one child process per kernel set; the record keys each set's scores by the set
    the child reports, and the DEFAULT set's scores are those a plain run under it gives."""
    script = benchmark_script("ffn_lookup.py")
    common = ["--seeds", "0", "--steps", "2", "--batch-size", "4", "--threads", "1"]
    subprocess.run([sys.executable, str(script), *common, "--kernels", "default", "native",
                    "--jobs", "2", "--json", str(tmp_path / "k.json")], check=True,
                   capture_output=True)
    rec = json.loads((tmp_path / "k.json").read_text())
    assert rec["requested"] == ["default", "native"] and "DEFAULT" in rec["kernels"]
    assert len(rec["kernels"]) == 2 and rec["cpu"] and rec["seeds"] == [0]
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    subprocess.run([sys.executable, str(script), *common, "--json", str(tmp_path / "d.json")],
                   check=True, capture_output=True, env=env)
    plain = json.loads((tmp_path / "d.json").read_text())
    assert rec["kernels"]["DEFAULT"]["designs"] == plain["designs"]
    assert plain["cpu"].endswith("kernels DEFAULT")
