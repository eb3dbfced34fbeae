"""benchmarks/tools/gpu_runbook.sh's two prepared calls, --tiny on the CPU: call 1 (the `gpu`
preset's run) and call 2 (benchmarks/experiments/gpu30s_sweep.py) write their records; and the
sweep chooses its winner
on the validation split alone, checked with a fake trainer and a fake test scorer (no data, no
training)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import benchmark_script

ROOT = Path(__file__).resolve().parents[1]
import gpu30s_sweep  # noqa: E402

PROVENANCE = ("device", "torch", "git_commit", "date")


def runbook(*flags, timeout=300):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": sys.executable}
    env.pop("GIT_COMMIT", None)
    env.pop("DEADLINE_S", None)
    return subprocess.run(["bash", str(benchmark_script("gpu_runbook.sh")), *flags], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)


def test_runbook_asks_for_a_call_or_steps():
    proc = runbook("--tiny")
    assert proc.returncode == 2 and "--call 1, --call 2 or --steps" in proc.stdout
    assert runbook("--tiny", "--call", "3").returncode == 2


@pytest.mark.needs_data
@pytest.mark.slow
def test_tiny_calls_write_their_records(tmp_path):
    """Call 1: the gpu preset's run, evaluated at the end only, with its record, its start-up and
    its history; call 2: ours and then nn.Transformer at the gpu-30s recipe's time budget, each with
    the clock after each of its first updates, and their ratios in one record; the sweep (a step of
    its own now): every variant scored on validation, the winner's test scores, the winner's record
    in the CLI's shape."""
    for flags in (["--call", "1"], ["--call", "2"], ["--steps", "sweep"]):
        proc = runbook("--tiny", *flags, str(tmp_path))
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "TIMED OUT" not in proc.stdout and "SKIPPED" not in proc.stdout, proc.stdout[-3000:]
    run = json.loads((tmp_path / "gpu-5min.json").read_text())
    for key in (*PROVENANCE, "recipe", "steps", "val", "test_2016_flickr", "startup"):
        assert key in run, key
    assert run["recipe"]["eval_every"] == 0 and run["recipe"]["checkpoint_every"] == 10 ** 9
    assert run["recipe"]["d_model"] == 32 and run["steps"] > 0       # the --tiny stand-in
    first = run["startup"]["first_updates_s"]
    assert len(first) == min(run["steps"], 100) and first == sorted(first)
    assert json.loads((tmp_path / "gpu-5min.history.json").read_text())["history"]
    assert (tmp_path / "gpu-gpu.log").is_file() and (tmp_path / "gpu-sweep.log").is_file()

    pair = json.loads((tmp_path / "gpu-30s-pair.json").read_text())
    assert (tmp_path / "gpu-pair30s.log").is_file() and pair["equal_time"] and pair["sequential"]
    assert [r["model"] for r in pair["runs"]] == ["ours", "nn.Transformer"]
    assert pair["recipe"]["time_budget_s"] == 3 and pair["recipe"]["max_steps"] == 0
    for r in pair["runs"]:
        assert r["steps"] > 0 and r["training_seconds"] >= 3
        assert len(r["startup"]["first_updates_s"]) == min(r["steps"], 100)
    ours, ref = pair["runs"]
    assert pair["verdict"]["updates_ratio"] == pytest.approx(ours["steps"] / ref["steps"])

    rec = json.loads((tmp_path / "gpu-30s-sweep.json").read_text())
    for key in (*PROVENANCE, "base", "rule", "variants", "winner", "winner_record"):
        assert key in rec, key
    assert rec["base"] == "gpu-30s" and rec["device"].startswith("CPU")
    assert [v["name"] for v in rec["variants"]] == ["preset", "budget-d512"]
    for v in rec["variants"]:
        assert v["flags"] == gpu30s_sweep.VARIANTS[v["name"]][0]
        assert v["command"].startswith("python -m transformer_lib.train --preset gpu-30s")
        assert v["updates"] > 0 and v["target_tokens_per_s"] > 0
        assert v["val"]["loss"] > 0 and 0 <= v["val"]["bleu_greedy"] <= 100
        assert v["val"]["sentences"] == 10 and "test_2016_flickr" not in v
    assert rec["variants"][1]["recipe"]["schedule"] == "budget"
    best = max(rec["variants"], key=lambda v: (v["val"]["bleu_greedy"], -v["val"]["loss"]))
    assert rec["winner"]["name"] == best["name"] and rec["winner"]["val"] == best["val"]
    test = rec["winner"]["test_2016_flickr"]
    assert test["sentences"] == 10 and {"bleu_greedy", "bleu_beam"} <= set(test)
    committed = json.loads((ROOT / "results" / "gpu-30s.json").read_text())
    # the CLI's record; "startup" (where the start went) and "cpu" (provenance's processor) are
    # newer than the committed one
    assert set(rec["winner_record"]) - {"startup", "cpu"} == set(committed) - {"git_commit_note"}
    assert rec["winner_record"]["startup"]["first_updates_s"]
    assert rec["winner_record"]["test_2016_flickr"] == test


def fake_sweep(monkeypatch, tmp_path, val, argv=()):
    """Run the sweep's main with a fake trainer that gives each variant the validation (BLEU, loss)
    of `val`, and a fake test scorer that would make every other variant the winner on test; returns
    the record and the variants whose test set was scored."""
    scored = []

    def train_variant(flags, run_dir, timeout_s):
        name = run_dir.name
        assert flags[:2] == ["--preset", "gpu-30s"] and "--out-dir" in flags
        if val[name] is None:
            return {"error": "diverged"}
        bleu, loss = val[name]
        return {"precision": "float32", "device": "fake", "parameters": 1, "updates": 10,
                "epochs": 1.0, "training_seconds": 30.0, "target_tokens_per_s": 1.0,
                "weights": "last", "val": {"loss": loss, "bleu_greedy": bleu, "sentences": 1014}}

    def score_test(flags, run_dir, row):
        scored.append(run_dir.name)
        bleu = 10.0 if run_dir.name == "budget" else 50.0       # the test split favours the others
        t = {"bleu_greedy": bleu, "bleu_beam": bleu}
        return {"test_2016_flickr": t, "record": {"test_2016_flickr": t}}

    monkeypatch.setattr(gpu30s_sweep, "train_variant", train_variant)
    monkeypatch.setattr(gpu30s_sweep, "score_test", score_test)
    rec = gpu30s_sweep.main(["--runs", str(tmp_path), "--json", str(tmp_path / "s.json"), *argv])
    assert json.loads((tmp_path / "s.json").read_text())["winner"] == rec["winner"]
    return rec, scored


def test_sweep_chooses_on_validation_and_scores_only_the_winner_on_test(monkeypatch, tmp_path):
    """All five variants' flags are valid recipes; the winner has the best validation BLEU although
    the fake test scores favour every other variant, and only the winner's test set is scored."""
    val = {"preset": (30.0, 2.0), "budget": (33.0, 2.1), "budget-batch-6k": (32.0, 1.9),
           "budget-pre-ln": (31.0, 1.8), "budget-d512": None}
    rec, scored = fake_sweep(monkeypatch, tmp_path, val)
    assert [v["name"] for v in rec["variants"]] == list(gpu30s_sweep.VARIANTS)
    assert rec["variants"][-1]["error"] == "diverged"
    assert rec["winner"]["name"] == "budget" and scored == ["budget"]
    assert rec["winner"]["test_2016_flickr"]["bleu_greedy"] == 10.0
    recipes = {v["name"]: v["recipe"] for v in rec["variants"]}
    assert recipes["preset"] == {} and recipes["budget"] == {"schedule": "budget",
                                                             "decay_start": 0.5}
    assert recipes["budget-batch-6k"]["batch_tokens"] == 6144
    assert recipes["budget-pre-ln"]["norm_first"] and recipes["budget-pre-ln"]["peak_lr"] == 3e-3
    assert recipes["budget-d512"]["d_model"] == 512


def test_sweep_breaks_ties_by_validation_loss_and_skips_past_its_deadline(monkeypatch, tmp_path):
    val = dict.fromkeys(gpu30s_sweep.VARIANTS, (30.0, 2.0)) | {"budget-pre-ln": (30.0, 1.5)}
    rec, scored = fake_sweep(monkeypatch, tmp_path / "a", val)
    assert rec["winner"]["name"] == "budget-pre-ln" and scored == ["budget-pre-ln"]
    # a deadline shorter than one variant's estimate (30 s of training and its overhead): nothing
    # trains, nothing is scored, the record says why
    rec, scored = fake_sweep(monkeypatch, tmp_path / "b", val,
                             ["--deadline-s", "40", "--variants", "preset", "budget"])
    assert rec["winner"] is None and scored == []
    assert all("deadline" in v["skipped"] for v in rec["variants"])
