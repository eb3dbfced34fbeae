"""A Mac's GPU (MPS) as a device: `auto` picks CUDA, then MPS, then the CPU; `--device mps` is
accepted where `torch.backends.mps.is_available()`; there the capstone trains in float32, with no
scaler and not compiled (`amp_settings`; its comment gives the evidence), says so when it starts,
and waits for the GPU's queue when it reads its clock. MPS is mocked, as test_amp.py mocks a GPU's
compute capability; every run stays on the CPU."""

import pytest
import torch

import transformer_lib.stages as capstone
import transformer_lib.train as train
from transformer_lib import engineering
from transformer_lib.engineering import (
    TrainingClock,
    amp_settings,
    autocast_dtype,
    device_label,
    no_compile_reason,
    pick_device,
    provenance,
)
from transformer_lib.recipe import RecipeError, parse_args, preset, recipe_from_dict

MPS = torch.device("mps")
# test_amp.py's recipe, small enough to prepare in seconds
WHY = "torch.compile for Apple GPUs is new, and unmeasured on this model"
TINY = dict(train_pairs=300, vocab_size=450, d_model=32, n_heads=2, n_layers=1, d_ff=64,
            batch_tokens=400, time_budget_s=0.0, epochs=0, max_steps=2, progress=False)


def machine(mp: pytest.MonkeyPatch, cuda: bool, mps: bool) -> None:
    mp.setattr(torch.cuda, "is_available", lambda: cuda)
    mp.setattr(torch.backends.mps, "is_available", lambda: mps)


@pytest.mark.parametrize("cuda, mps, expected", [(True, True, "cuda"), (True, False, "cuda"),
                                                 (False, True, "mps"), (False, False, "cpu")])
def test_auto_picks_cuda_then_mps_then_cpu(monkeypatch, cuda, mps, expected):
    machine(monkeypatch, cuda, mps)
    assert pick_device().type == expected and pick_device("auto").type == expected
    assert pick_device("cpu") == torch.device("cpu")


def test_mps_by_name_where_there_is_one(monkeypatch):
    machine(monkeypatch, False, True)
    assert pick_device("mps") == MPS
    recipe, _ = parse_args(["--preset", "gpu-30s", "--device", "mps"])
    assert recipe.device == "mps"
    machine(monkeypatch, False, False)
    with pytest.raises(RuntimeError, match=r"MPS \(a Mac's GPU\) is not available.*"
                                           r"torch.backends.mps.is_available\(\) is False"):
        pick_device("mps")
    with pytest.raises(RecipeError, match=r"device='mps' was requested, but MPS"):
        recipe_from_dict({"device": "mps"})
    with pytest.raises(RecipeError, match="'cuda:N' or 'mps'"):
        recipe_from_dict({"device": "mps:0"})


@pytest.mark.parametrize("macos_14", [True, False])
def test_mps_trains_in_float32_eager_whatever_the_macos(monkeypatch, macos_14):
    """float32, no scaler, not compiled, on macOS 13 and 14 alike: bfloat16 autocast on MPS needs
    macOS 14 and measured no faster, float16 needs a GradScaler that MPS gained late, and
    torch.compile for MPS is new (amp_settings' comment cites the sources)."""
    monkeypatch.setattr(torch.backends.mps, "is_macos_or_newer", lambda major, minor: macos_14)
    for cpu_bf16 in (False, True):
        assert amp_settings(MPS, cpu_bf16=cpu_bf16) == (None, False, False)
    assert autocast_dtype(MPS, "auto") is None
    assert no_compile_reason(MPS) == WHY


def test_the_clock_waits_for_the_mac_gpu(monkeypatch):
    waited = []
    monkeypatch.setattr(torch.mps, "synchronize", lambda: waited.append("mps"))
    now = [0.0]
    clock = TrainingClock(MPS, timer=lambda: now[0])
    now[0] = 2.5
    assert clock() == 2.5 and waited == ["mps"]
    engineering.wait_for("cpu")                           # the CPU: nothing to wait for
    assert waited == ["mps"]


def test_records_name_the_mac_gpu():
    assert device_label(MPS) == "Apple GPU (MPS)"
    assert provenance(MPS, processes=1, commit=None)["device"] == "Apple GPU (MPS)"
    assert device_label("cpu") == engineering.device_name("cpu")


def test_the_live_cell_keeps_a_mac_on_its_cpu(monkeypatch):
    """The chapter's live cell trains cpu-tiny on a Mac's CPU, as on any machine without CUDA; the
    GPU presets run on a Mac's GPU from the command line."""
    machine(monkeypatch, False, True)
    assert train.live_preset() == "cpu-tiny" and train.live_preset(full=True) == "cpu-30min"
    assert preset("cpu-tiny").device == "cpu"
    assert pick_device(preset("gpu-30s").device) == MPS


def test_torchrun_on_mps_is_one_clear_error(monkeypatch, tmp_path):
    machine(monkeypatch, False, True)
    monkeypatch.setenv("WORLD_SIZE", "2")
    out = tmp_path / "run"
    with pytest.raises(RecipeError, match="2 processes on a Mac's GPU"):
        capstone.prepare(recipe_from_dict({**TINY, "device": "mps", "out_dir": str(out)}))
    assert not out.exists()


@pytest.mark.needs_data
@pytest.mark.parametrize("changes, why", [({"compile": True}, WHY),
                                          ({"compile": True, "amp": True}, WHY),
                                          ({}, "the recipe's compile is off"),
                                          ({"preset": "gpu-30s"}, "the recipe's compile is off")])
def test_the_capstone_on_a_mac_gpu(monkeypatch, tmp_path, capsys, changes, why):
    """`prepare` on the CPU, asking `amp_settings` about MPS (test_amp.py's trick): the gpu recipe
    (no preset), gpu-30s, and compile asked for by name all train in float32, not compiled, and the
    settings line names the Mac's GPU and why it is not compiled (the presets train eager
    anyway)."""
    real_amp, real_reason = capstone.amp_settings, capstone.no_compile_reason
    monkeypatch.setattr(capstone, "amp_settings",                  # the run stays on the CPU
                        lambda device, cpu_bf16=False: real_amp(MPS, cpu_bf16))
    monkeypatch.setattr(capstone, "no_compile_reason", lambda device: real_reason(MPS))
    monkeypatch.setattr(capstone, "device_label", lambda device: device_label(MPS))
    handed = []
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: handed.append(model) or model)
    s = capstone.prepare(recipe_from_dict({**TINY, "device": "cpu", **changes,
                                           "out_dir": str(tmp_path / "run")}))
    assert handed == [] and s.trained is s.model and s.amp_dtype is None
    assert (f"device: Apple GPU (MPS); precision: float32 (no autocast); not compiled ({why})\n"
            in capsys.readouterr().out)
