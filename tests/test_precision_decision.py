"""The CPU preset's precision, decided by measurement: every figure of results/README.md's "Which
precision the CPU preset trains in" is computed here from the records it names, and the preset
trains as the section says."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from transformer_lib.recipe import preset

RESULTS = Path(__file__).parent.parent / "results"
README = (RESULTS / "README.md").read_text()
SECTION = README[README.index("## Which precision the CPU preset trains in"):]


def record(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def said(text: str) -> None:
    flat = re.sub(r"\s+", " ", SECTION)
    assert text in flat, f"results/README.md does not say {text!r}"


def test_the_cpu_presets_train_in_float32():
    assert preset("cpu-30min").amp is False and preset("cpu-tiny").amp is False
    said("The CPU presets train in float32 (`amp=False`) on every CPU")


def test_side_by_side_bfloat16_is_faster_per_update():
    rec = record("cpu-precision-zen4.json")
    assert "AMD EPYC" in rec["cpu"] and rec["threads"] == 2
    bf, f32 = rec["rows"]["bfloat16"], rec["rows"]["float32"]
    assert bf["steps"] == f32["steps"] == rec["steps"] == 600
    said(f"bfloat16 trained at {bf['target_tokens_per_s']:,.0f} target tokens/s and float32 at "
         f"{f32['target_tokens_per_s']:,.0f}: {rec['bf16_speedup']:.2f} times as fast")
    block = rec["bf16_speedup_per_block"]
    said(f"(per block of {rec['block']} batches, {block['min']:.2f} to {block['max']:.2f})")
    said(f"makes {rec['distinct_shapes_by_epoch'][-1]} distinct shapes in "
         f"{len(rec['distinct_shapes_by_epoch'])} epochs")
    for row in (bf, f32):                      # a shape's first step is no slower than the median
        assert row["median_ms_first_seen_shape"] <= row["median_ms_seen_shape"]


def test_the_pair_of_runs_and_the_drift():
    f32, bf = (record("multi30k-cpu-30min-zen4-fp32.json"),
               record("multi30k-cpu-30min-zen4-bf16.json"))
    assert (f32["precision"], bf["precision"]) == ("float32", "bfloat16")
    assert f32["recipe"]["amp"] is False and bf["recipe"]["amp"] is True
    said(f"trained at {f32['target_tokens_per_s']:,.0f} target tokens/s and the bfloat16 run at "
         f"{bf['target_tokens_per_s']:,.0f}, so float32 made more updates, {f32['steps']:,} to "
         f"{bf['steps']:,}")
    history = json.loads((RESULTS / "multi30k-cpu-30min-zen4-fp32.history.json").read_text())
    rates = [h["tokens_per_s"] for h in history["history"]]
    k = len(rates) // 6
    sixths = [sum(rates[i * k:(i + 1) * k]) / k for i in range(6)]
    said(f"sixths of training ran at {min(sixths):,.0f} to {max(sixths):,.0f} target tokens/s")
    side = record("cpu-precision-zen4.json")["rows"]["float32"]["target_tokens_per_s"]
    said(f"the same float32 step ran at {side:,.0f} in the side-by-side measurement")
    assert max(sixths) / min(sixths) > 1.1           # drift larger than the gap between the runs
    assert f32["target_tokens_per_s"] / bf["target_tokens_per_s"] < 1.1


def test_in_both_pairs_the_run_with_more_updates_scored_higher():
    """The two thirty-minute pairs went opposite ways in BLEU: the later (current recipe) for
    float32, the earlier (3+3 recipe, earlier code) for bfloat16; in both the run with more updates
    scored higher, on test with beam 4 and on validation greedy."""
    f32, bf = (record("multi30k-cpu-30min-zen4-fp32.json"),
               record("multi30k-cpu-30min-zen4-bf16.json"))
    said(f"In the pair above the float32 run scored {f32['test_2016_flickr']['bleu_beam']:.1f} "
         f"with beam 4 on test_2016_flickr and {f32['val']['bleu_greedy']:.1f} greedy on "
         f"validation; the bfloat16 run {bf['test_2016_flickr']['bleu_beam']:.1f} and "
         f"{bf['val']['bleu_greedy']:.1f}.")
    e32, ebf = record("multi30k-cpu-30min-fp32.json"), record("multi30k-cpu-30min-bf16.json")
    assert e32["recipe"]["n_layers"] == ebf["recipe"]["n_layers"] == 3
    assert e32["recipe"]["amp"] is False and ebf["recipe"]["amp"] is True
    said(f"bfloat16 trained at {ebf['target_tokens_per_s']:,.0f} target tokens/s to float32's "
         f"{e32['target_tokens_per_s']:,.0f}, made {ebf['steps']:,} updates to {e32['steps']:,} "
         f"and scored higher: {ebf['test_2016_flickr']['bleu_beam']:.1f} to "
         f"{e32['test_2016_flickr']['bleu_beam']:.1f} with beam 4 on test, "
         f"{ebf['val']['bleu_greedy']:.1f} to {e32['val']['bleu_greedy']:.1f} greedy on validation")
    for more, fewer in ((f32, bf), (ebf, e32)):
        assert more["steps"] > fewer["steps"]
        assert more["test_2016_flickr"]["bleu_beam"] > fewer["test_2016_flickr"]["bleu_beam"]
        assert more["val"]["bleu_greedy"] > fewer["val"]["bleu_greedy"]


@pytest.mark.parametrize("kernels", ["avx2", "default"])
def test_without_avx512_kernels_amp_falls_back_and_the_benchmark_stops(kernels):
    """Under ATEN_CPU_CAPABILITY=avx2 or default there is no bfloat16 path: `--amp` trains in
    float32 (amp_settings gives no autocast dtype) and cpu_precision.py says so and stops."""
    env = dict(os.environ, ATEN_CPU_CAPABILITY=kernels, OMP_NUM_THREADS="1")
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; from transformer_lib.engineering import "
         "amp_settings, cpu_has_native_bf16; print(cpu_has_native_bf16(), "
         "amp_settings(torch.device('cpu'), cpu_bf16=True)[0])"],
        env=env, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0 and probe.stdout.split() == ["False", "None"], probe
    script = RESULTS.parent / "benchmarks" / "speed" / "cpu_precision.py"
    run = subprocess.run([sys.executable, str(script), "--tiny"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and "no bfloat16 instructions" in run.stderr, run
    said("`--amp` trains in float32 there and `benchmarks/speed/cpu_precision.py` says so and "
         "stops")
