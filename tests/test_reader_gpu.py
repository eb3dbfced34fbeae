"""Chapter 18's live training cell on a reader's GPU: `live_preset` picks `gpu-30s` where `run`
would train on a CUDA GPU (a Colab T4 included) and `cpu-tiny` on the CPU, and `run_report` prints
what the device did: its compute capability, precision, whether the model was compiled, updates,
tokens per second and BLEU. The GPU is mocked, as in test_amp.py (compute capability 7.5, the T4;
8.0, an A100); every run stays on the CPU."""
import contextlib
import dataclasses
import io
import json
from pathlib import Path

import pytest
import torch

import transformer_lib.stages as capstone
from transformer_lib.benchmarking import device_name
from transformer_lib.engineering import amp_settings, pick_device
from transformer_lib.recipe import preset, recipe_from_dict
from transformer_lib.records import run_report
from transformer_lib.stages import RunResult
from transformer_lib.train import live_preset

ROOT = Path(__file__).resolve().parents[1]
CUDA = torch.device("cuda")
NAMES = {(7, 5): "Tesla T4", (8, 0): "NVIDIA A100-SXM4-40GB", (9, 0): "NVIDIA H100 80GB HBM3"}
# test_amp.py's recipe, small enough to prepare in seconds
TINY = dict(preset="cpu-tiny", train_pairs=300, vocab_size=450, d_model=32, n_heads=2, n_layers=1,
            d_ff=64, batch_tokens=400, time_budget_s=0.0, epochs=0, max_steps=2, progress=False)


def mock_gpu(mp: pytest.MonkeyPatch, capability: tuple[int, int] | None) -> None:
    """A CUDA device of `capability` (bf16 'supported', as PyTorch says on a T4), or no GPU."""
    mp.setattr(torch.cuda, "is_available", lambda: capability is not None)
    mp.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    mp.setattr(torch.cuda, "get_device_name", lambda device=None: NAMES[capability])
    mp.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)


def cell(cell_id: str) -> str:
    nb = json.loads((ROOT / "notebooks" / "18_capstone.ipynb").read_text())
    return next("".join(c["source"]) for c in nb["cells"] if c.get("id") == cell_id)


SETUP, LIVE = "a60462aa", "a60462ab"       # the live training cell and the set-up it needs


def run_setup_cell(capability, tmp_path) -> dict:
    """The chapter's set-up cell, executed on a mocked GPU of `capability` (None: no GPU) in the
    directory `tmp_path`, where it keeps the run in my-translator/. Returns the cell's
    variables."""
    names: dict = {}
    with pytest.MonkeyPatch.context() as mp:
        mock_gpu(mp, capability)
        mp.chdir(tmp_path)
        exec(cell(SETUP), names)
    return names


@pytest.mark.parametrize("capability", [(7, 5), (8, 0), (9, 0)])
def test_a_gpu_trains_gpu_30s(monkeypatch, capability):
    mock_gpu(monkeypatch, capability)
    assert live_preset() == "gpu-30s" and live_preset(full=True) == "gpu"
    assert pick_device(preset("gpu-30s").device) == CUDA               # where `run` trains it
    assert live_preset(device="cpu") == "cpu-tiny"                     # a CPU asked for by name


def test_the_cpu_trains_cpu_tiny(monkeypatch):
    mock_gpu(monkeypatch, None)
    assert live_preset() == "cpu-tiny" and live_preset(full=True) == "cpu-30min"
    assert preset("cpu-tiny").device == "cpu"
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        live_preset(device="cuda")


@pytest.mark.parametrize("capability, expected", [(None, "cpu-tiny"), ((7, 5), "gpu-30s"),
                                                  ((8, 0), "gpu-30s")])
def test_the_chapters_training_cell_picks_by_device(tmp_path, capability, expected):
    """The chapter's own set-up cell: the book, built on the CPU, trains cpu-tiny as before; a
    reader's GPU, a T4 included, gets gpu-30s, which `run` trains on that GPU."""
    names = run_setup_cell(capability, tmp_path)
    assert names["RUN_FULL_RECIPE"] is False
    assert names["name"] == expected
    assert names["recipe"] == dataclasses.replace(preset(expected),
                                                  out_dir=f"my-translator/{expected}",
                                                  progress=False)
    (tmp_path / "my-translator" / expected).mkdir(parents=True)      # a run the reader kept
    again = run_setup_cell(capability, tmp_path)
    assert again["recipe"].out_dir == f"my-translator/{expected}-1"     # is never written over
    live = cell(LIVE)
    assert "run_report(result)" in live and len(live.splitlines()) <= 40


def finished_run(recipe_name: str, device: torch.device) -> RunResult:
    """A finished run of the preset on `device` ('gpu --compile': the gpu preset, compile asked
    for), its record as `finalize` writes it; the precision is the one `prepare` takes from
    `amp_settings`, the figures are made up."""
    name, _, flag = recipe_name.partition(" ")
    recipe = dataclasses.replace(preset(name), compile=flag == "--compile" or preset(name).compile)
    amp = amp_settings(device, cpu_bf16=True)[0] if recipe.amp else None
    s = RunResult(recipe, device, 0, 1, amp, Path("unused"), commit=None)
    s.results = {"device": device_name(device),
                 "precision": str(amp or torch.float32).removeprefix("torch."),
                 "parameters": 1234567, "steps": 1502, "epochs": 3.21, "training_seconds": 30.04,
                 "target_tokens_per_s": 123456.7,
                 "test_2016_flickr": {"sentences": 1000, "bleu_greedy": 12.34, "bleu_beam": 13.46,
                                      "beam_size": 4}}
    return s


FIGURES = ("1,234,567 parameters, 1,502 updates (3.21 epochs) in 30 s of training, 123,457 target "
           "tokens/s\ntest_2016_flickr (1000 sentences): greedy BLEU 12.3, beam 4 BLEU 13.5")


@pytest.mark.parametrize("capability, recipe, first_lines", [
    ((7, 5), "gpu-30s", "Tesla T4 (compute capability 7.5)\nprecision: float16 autocast, with a "
                        "gradient scaler; not compiled (the recipe's compile is off)"),
    ((7, 5), "gpu", "Tesla T4 (compute capability 7.5)\nprecision: float16 autocast, with a "
                    "gradient scaler; not compiled (the recipe's compile is off)"),
    ((7, 5), "gpu --compile", "Tesla T4 (compute capability 7.5)\nprecision: float16 autocast, "
                              "with a gradient scaler; not compiled (compute capability below "
                              "8.0)"),
    ((8, 0), "gpu-30s", "NVIDIA A100-SXM4-40GB (compute capability 8.0)\nprecision: bfloat16 "
                        "autocast; not compiled (the recipe's compile is off)"),
    ((8, 0), "gpu", "NVIDIA A100-SXM4-40GB (compute capability 8.0)\nprecision: bfloat16 "
                    "autocast; not compiled (the recipe's compile is off)"),
    ((8, 0), "gpu --compile", "NVIDIA A100-SXM4-40GB (compute capability 8.0)\nprecision: "
                              "bfloat16 autocast; compiled with torch.compile"),
])
def test_the_report_of_a_gpu_run(monkeypatch, capability, recipe, first_lines):
    """On a T4 the live cell's gpu-30s trains in float16 with a scaler and is not compiled; the
    presets train eager, and torch.compile asked for by name is what the T4 cannot do and an A100
    does."""
    mock_gpu(monkeypatch, capability)
    assert run_report(finished_run(recipe, CUDA)) == first_lines + "\n" + FIGURES


def test_the_report_of_a_cpu_run():
    report = run_report(finished_run("cpu-tiny", torch.device("cpu")))
    assert report == (f"{device_name('cpu')}\nprecision: float32 (no autocast); not compiled (the "
                      "recipe's compile is off)\n" + FIGURES)
    assert "compute capability" not in report


def test_the_report_needs_a_finished_run():
    s = finished_run("cpu-tiny", torch.device("cpu"))
    s.results = {}                                            # not process 0, or not finished
    with pytest.raises(ValueError, match="no results record"):
        run_report(s)


@pytest.mark.needs_data
@pytest.mark.parametrize("capability", [(7, 5), (8, 0)])
@pytest.mark.parametrize("compile_", [True, False])
def test_the_report_says_what_prepare_did(monkeypatch, tmp_path, capsys, capability, compile_):
    """`prepare` on the CPU, asking `amp_settings` about a mocked GPU (test_amp.py's trick): the
    report names the precision `prepare` chose and says "compiled" exactly when `prepare` handed
    the model to torch.compile."""
    mock_gpu(monkeypatch, capability)
    real, reason = capstone.amp_settings, capstone.no_compile_reason
    monkeypatch.setattr(capstone, "amp_settings",                  # the run stays on the CPU
                        lambda device, cpu_bf16=False: real(CUDA, cpu_bf16))
    monkeypatch.setattr(capstone, "no_compile_reason", lambda device: reason(CUDA))
    handed = []
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: handed.append(model) or model)
    s = capstone.prepare(recipe_from_dict({**TINY, "compile": compile_, "amp": True,
                                           "out_dir": str(tmp_path / "run")}))
    s.device = CUDA                                       # the GPU the mocked settings describe
    s.results = {**finished_run("gpu", CUDA).results,
                 "precision": str(s.amp_dtype or torch.float32).removeprefix("torch.")}
    report = run_report(s)
    assert ("compiled with torch.compile" in report) is bool(handed)
    assert bool(handed) is (compile_ and capability >= (8, 0))
    assert report.startswith(f"{NAMES[capability]} (compute capability {capability[0]}."
                             f"{capability[1]})\nprecision: "
                             + {torch.float16: "float16 autocast, with a gradient scaler",
                                torch.bfloat16: "bfloat16 autocast"}[s.amp_dtype])


@pytest.mark.needs_data
def test_the_live_cell_prints_the_runs_own_figures(tmp_path):
    """The chapter's two cells end to end: the set-up cell on a mocked T4 picks gpu-30s; that
    recipe, forced onto the CPU with a few hundred pairs and three updates, runs in the live cell,
    which prints the run's own figures."""
    names = run_setup_cell((7, 5), tmp_path)
    assert names["name"] == "gpu-30s"
    names["recipe"] = dataclasses.replace(names["recipe"], out_dir=str(tmp_path / "run"),
                                          device="cpu", train_pairs=300,
                                          vocab_size=450, batch_tokens=400, time_budget_s=0.0,
                                          max_steps=3, eval_sentences=8, test_sentences=8)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(cell(LIVE), names)
    printed, result = out.getvalue(), names["result"]
    rec, test = result.results, result.results["test_2016_flickr"]
    assert rec["steps"] == 3 and rec["recipe"]["d_model"] == preset("gpu-30s").d_model
    precision = {None: "float32 (no autocast)",
                 torch.bfloat16: "bfloat16 autocast"}[result.amp_dtype]     # a CPU: no float16
    assert (f"preset gpu-30s on {device_name('cpu')}\nprecision: {precision}; not compiled (the "
            "recipe's compile is off)\n") in printed
    for figure in (f"{rec['parameters']:,} parameters", "3 updates",
                   f"({rec['epochs']} epochs) in {rec['training_seconds']:.0f} s of training",
                   f"{rec['target_tokens_per_s']:,.0f} target tokens/s",
                   f"test_2016_flickr ({test['sentences']} sentences)",
                   f"greedy BLEU {test['bleu_greedy']:.1f}",
                   f"beam 4 BLEU {test['bleu_beam']:.1f}"):
        assert figure in printed, (figure, printed)
    assert test["sentences"] == 8 and "; whole cell " in printed


def test_the_report_says_where_the_start_went(monkeypatch):
    """A GPU reader sees where the seconds went: before training, the clock at updates 1, 10 and
    100, and the seconds compiling (a record without them, from before they were kept, gets no
    line)."""
    mock_gpu(monkeypatch, (8, 0))
    s = finished_run("gpu --compile", CUDA)
    s.results["startup"] = {"prepare_s": 21.4, "compile_s": 161.27, "first_updates_from_step": 1,
                            "first_updates_s": [40.0 + k for k in range(100)]}
    lines = run_report(s).splitlines()
    assert lines[3] == ("start-up: 21 s before training (data, tokenizer, model); update 1 after "
                        "40.0 s of training, update 10 after 49.0 s, update 100 after 139.0 s; "
                        "161 s of training went to compiling")
    s.results["startup"] = {**s.results["startup"], "compile_s": 0.0,
                            "first_updates_from_step": 501, "first_updates_s": [3.25, 3.5]}
    assert run_report(s).splitlines()[3] == ("start-up: 21 s before training (data, tokenizer, "
                                             "model); update 501 after 3.2 s of training")
