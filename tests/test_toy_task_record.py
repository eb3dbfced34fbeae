"""The record chapter 16 reads, results/toy-task-cpu.json, against the script that wrote it
(benchmarks/experiments/toy_task.py) and the chapter's cells that script runs."""
import base64
import importlib.util
import io
import json
from pathlib import Path

import torch
from conftest import benchmark_script

ROOT = Path(__file__).resolve().parents[1]
RECORD = json.loads((ROOT / "results" / "toy-task-cpu.json").read_text())


def script():
    spec = importlib.util.spec_from_file_location("toy_task", benchmark_script("toy_task.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_record_ran_the_chapters_cells_as_they_are():
    s = script()
    assert RECORD["chapter"] == "notebooks/16_toy_task.ipynb" and RECORD["cells"] == list(s.CELLS)
    assert RECORD["cells_sha256"] == s.cells_sha256(s.chapter_cells()), (
        "the chapter's data or recipe cell changed since the record was made: rerun "
        "python benchmarks/experiments/toy_task.py --json results/toy-task-cpu.json")
    assert (RECORD["updates"], RECORD["log_every"], RECORD["clip_grad_norm"]) == (
        s.UPDATES, s.LOOP["log_every"], s.LOOP["clip_grad_norm"])


def test_the_chapter_trains_what_the_record_ran():
    chapter = json.loads((ROOT / RECORD["chapter"]).read_text())
    live = next("".join(c["source"]) for c in chapter["cells"] if c.get("id") == "39a0589b")
    assert (f'updates, loop = {RECORD["updates"]}, {{"log_every": {RECORD["log_every"]}, '
            f'"clip_grad_norm": {RECORD["clip_grad_norm"]}}}') in live
    assert '(records_dir() / "toy-task-cpu.json")' in live


def test_the_record_is_complete():
    steps = [r["step"] for r in RECORD["history"]]
    assert steps == list(range(RECORD["log_every"], RECORD["updates"] + 1, RECORD["log_every"]))
    assert [s for s, _ in RECORD["validation"]] == list(range(100, RECORD["updates"] + 1, 100))
    best = max(RECORD["validation"], key=lambda v: v[1])
    assert (RECORD["best_step"], RECORD["best_accuracy"]) == tuple(best)
    assert RECORD["threads"] == 1 and RECORD["git_commit"] and RECORD["cpu_seconds"] > 0


def test_the_stored_weights_load_into_the_chapters_model():
    from transformer_lib.model import Transformer, TransformerConfig
    from transformer_lib.toy import PAD, toy_vocab_size

    V = toy_vocab_size(10)
    model = Transformer(TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=64,
                                          n_heads=4, n_layers=2, d_ff=128, dropout=0.1,
                                          max_len=16, pad_id=PAD))
    state = torch.load(io.BytesIO(base64.b64decode(RECORD["best_weights"])), weights_only=True)
    params = dict(model.named_parameters())
    assert {k for k, v in state.items() if v.dtype == torch.float16} == set(params)
    model.load_state_dict({k: v.float() for k, v in state.items()})
    assert sum(p.numel() for p in model.parameters()) == RECORD["parameters"]
