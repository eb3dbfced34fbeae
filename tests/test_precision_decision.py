"""The CPU preset's precision, decided by measurement: every figure of results/README.md's "Which
precision the CPU preset trains in" is computed here from the records it names, and the preset
trains as the section says."""
import json
import re
from pathlib import Path

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


def test_no_run_showed_bfloat16_buying_bleu():
    f32, bf = (record("multi30k-cpu-30min-zen4-fp32.json"),
               record("multi30k-cpu-30min-zen4-bf16.json"))
    assert f32["test_2016_flickr"]["bleu_beam"] > bf["test_2016_flickr"]["bleu_beam"]
    assert f32["val"]["bleu_greedy"] > bf["val"]["bleu_greedy"]
    said(f"the float32 run scored {f32['test_2016_flickr']['bleu_beam']:.1f} with beam 4 on "
         f"test_2016_flickr and {f32['val']['bleu_greedy']:.1f} greedy on validation; the "
         f"bfloat16 run {bf['test_2016_flickr']['bleu_beam']:.1f} and "
         f"{bf['val']['bleu_greedy']:.1f}")
