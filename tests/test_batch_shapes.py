"""benchmarks/speed/batch_shapes.py: the GPU presets' batch shapes and their recompiles. Its choice
of fewer lengths is the best one (checked against every subset on small inputs), a compiled model
compiles once per new shape (counted on the CPU with a tiny model), and the committed record is
of the presets as they are."""
import itertools
import json
import random
from pathlib import Path

import pytest

from transformer_lib.recipe import preset
from transformer_lib.training import BatchLoader, round_up

ROOT = Path(__file__).resolve().parents[1]
import batch_shapes  # noqa: E402


def padded(lengths, chosen):
    return sum(next(c for c in chosen if c >= n) - n for n in lengths)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("k", [1, 2, 3])
def test_best_lengths_is_the_best_subset(seed, k):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 40) for _ in range(60)]
    marks = list(range(8, round_up(max(lengths), 8) + 1, 8))
    chosen = batch_shapes.best_lengths(lengths, k, 8)
    assert len(chosen) <= k and chosen[-1] == marks[-1] and set(chosen) <= set(marks)
    best = min(padded(lengths, [*c, marks[-1]]) for n in range(k)
               for c in itertools.combinations(marks[:-1], n))
    assert padded(lengths, chosen) == best


def test_a_compiled_model_compiles_once_per_shape():
    """Three lengths, fixed shapes: three shapes, three graphs, each compiled when its shape is
    first seen (dynamic=False, as `prepare` compiles)."""
    pairs = [([5] * (n - 1) + [2], [1] + [6] * (n - 1) + [2]) for n in [3, 7, 12] * 6]
    loader = BatchLoader.by_tokens(pairs, 48, bucket=4, fixed_shapes=True, seed=0)
    rec = batch_shapes.recompiles(loader)
    assert rec["distinct_shapes"] == 3 and rec["graphs_compiled"] == 3
    assert len(rec["updates_where_a_shape_is_first_seen"]) == 3


def test_the_record_is_of_the_presets_as_they_are():
    rec = json.loads((ROOT / "results" / "batch-shapes-gpu-presets.json").read_text())
    assert set(rec["presets"]) == {"gpu", "gpu-30s"}
    for name, p in rec["presets"].items():
        r = preset(name)
        assert p["recipe"] == {k: getattr(r, k) for k in p["recipe"]}
        assert p["distinct_shapes_all_epochs"] == len(p["shapes"])
    compiled = rec["recompiles_cpu_tiny_model"]
    assert compiled["graphs_compiled"] == compiled["distinct_shapes"] \
        == rec["presets"]["gpu"]["per_epoch"][0]["distinct_shapes"]
