"""Mixed precision by GPU generation: bf16 from compute capability 8.0, float16 with a gradient
scaler below it (Colab's T4 is 7.5), float32 on the CPU. The capability is mocked; the steps run on
the CPU."""
import importlib
import subprocess

import pytest
import torch

from transformer_lib import engineering, training
from transformer_lib.engineering import amp_settings, autocast_dtype
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.optimization import LabelSmoothingLoss
from transformer_lib.recipe import recipe_from_dict
from transformer_lib.training import collate, train, train_step

CUDA = torch.device("cuda")
# the capstone's recipe, small enough to prepare in seconds
TINY = dict(preset="cpu-tiny", train_pairs=300, vocab_size=450, d_model=32, n_heads=2, n_layers=1,
            d_ff=64, batch_tokens=400, time_budget_s=0.0, epochs=0, max_steps=2, progress=False)


@pytest.fixture
def gpu(monkeypatch):
    """A mocked CUDA device of the given compute capability (bf16 'supported', as PyTorch says on a
    T4)."""
    def make(capability):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    return make


@pytest.mark.parametrize("capability, expected", [
    ((9, 0), (torch.bfloat16, False, True)),    # H100
    ((8, 0), (torch.bfloat16, False, True)),    # A100
    ((8, 6), (torch.bfloat16, False, True)),    # RTX 30xx
    ((7, 5), (torch.float16, True, False)),     # T4 (free Colab): bf16 only emulated, Triton cannot
                                                # compile bf16
    ((7, 0), (torch.float16, True, False)),     # V100
    ((6, 0), (torch.float16, True, False)),     # P100, the paper's GPU
])
def test_amp_settings_by_compute_capability(gpu, capability, expected):
    gpu(capability)
    assert amp_settings(CUDA) == expected
    assert amp_settings("cuda:0") == expected
    assert autocast_dtype(CUDA, "auto") is expected[0]


def test_amp_settings_on_the_cpu():
    """float32 and never compiled: on two cores the compiled step ran at 0.95-1.04x the eager one,
    and compiling the capstone's batch shapes took 11 minutes."""
    assert amp_settings(torch.device("cpu")) == (None, False, False)
    assert autocast_dtype(torch.device("cpu"), "auto") is None
    assert engineering.no_compile_reason("cpu") == "torch.compile does not pay on a CPU"


@pytest.mark.parametrize("capability, reason", [((9, 0), None), ((8, 0), None),
                                                ((7, 5), "compute capability below 8.0")])
def test_no_compile_reason_follows_amp_settings(gpu, capability, reason):
    gpu(capability)
    assert engineering.no_compile_reason(CUDA) == reason
    assert (reason is None) is amp_settings(CUDA)[2]


def _tiny():
    torch.manual_seed(0)
    cfg = TransformerConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=16, n_heads=2, n_layers=1,
                            d_ff=32, dropout=0.0)
    model = Transformer(cfg)
    batch = collate([([5, 6, 7], [1, 8, 9, 2]), ([5, 9], [1, 10, 2])], pad_id=0)
    return model, batch, LabelSmoothingLoss(20, 0.1, pad_id=0)


class SpyScaler:
    """Records what train_step asks of a GradScaler; scales by 1, so the step is the plain one."""

    def __init__(self):
        self.calls = []

    def scale(self, loss):
        self.calls.append("scale")
        return loss

    def unscale_(self, optimizer):
        self.calls.append("unscale_")

    def step(self, optimizer):
        self.calls.append("step")
        optimizer.step()

    def update(self):
        self.calls.append("update")


def test_train_step_uses_the_scaler_in_order():
    model, batch, loss_fn = _tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = SpyScaler()
    train_step(model, batch, loss_fn, opt, clip_grad_norm=1.0, scaler=scaler)
    assert scaler.calls == ["scale", "unscale_", "step", "update"]


def test_train_step_with_a_real_scaler_matches_the_unscaled_step():
    # scaling by a power of two and unscaling is exact: the same gradients, norm and update
    results = []
    for scaler in (None, torch.amp.GradScaler("cpu", init_scale=2.0**10)):
        model, batch, loss_fn = _tiny()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss, norm = train_step(model, batch, loss_fn, opt, clip_grad_norm=0.5, scaler=scaler)
        results.append((loss, norm, [p.detach().clone() for p in model.parameters()]))
    (l0, n0, p0), (l1, n1, p1) = results
    assert torch.equal(l0, l1) and torch.allclose(n0, n1, rtol=1e-6)
    assert all(torch.allclose(a, b, rtol=1e-6, atol=1e-8) for a, b in zip(p0, p1, strict=True))


@pytest.mark.parametrize("amp, wants_scaler",
                         [(torch.float16, True), (torch.bfloat16, False), (None, False)])
def test_train_makes_a_scaler_for_float16(monkeypatch, amp, wants_scaler):
    seen = []

    def spy_step(model, batch, loss_fn, optimizer, scheduler=None, **kwargs):
        seen.append(kwargs)
        return torch.tensor(1.0), None

    monkeypatch.setattr(training, "train_step", spy_step)
    model, batch, loss_fn = _tiny()
    train(model, [batch, batch], loss_fn, torch.optim.SGD(model.parameters(), lr=0.1), max_steps=2,
          device="cpu", amp=amp, progress=False)
    assert len(seen) == 2 and all(k["amp_dtype"] is amp for k in seen)
    scalers = {id(k["scaler"]) for k in seen}
    assert len(scalers) == 1, "one scaler for the whole run"
    assert isinstance(seen[0]["scaler"],
                      torch.amp.GradScaler) if wants_scaler else seen[0]["scaler"] is None


@pytest.mark.needs_data
@pytest.mark.parametrize("capability, compiled", [((7, 5), False), ((8, 0), True)])
def test_the_capstone_compiles_only_where_amp_settings_says_so(gpu, monkeypatch, tmp_path, capsys,
                                                               capability, compiled):
    """The branch of the capstone's `prepare_model` that skips torch.compile below compute
    capability 8.0 (Colab's T4), run: `prepare` on the CPU, asking `amp_settings` about a mocked
    GPU. On the T4 it says it does not compile, trains the model as it is and in float16 (which
    `train` pairs with a scaler); from 8.0 on it hands the model to torch.compile, in bfloat16."""
    capstone = importlib.import_module("transformer_lib.stages")
    gpu(capability)
    real, reason = capstone.amp_settings, capstone.no_compile_reason
    monkeypatch.setattr(capstone, "amp_settings",                  # the run stays on the CPU
                        lambda device, cpu_bf16=False: real(CUDA, cpu_bf16))
    monkeypatch.setattr(capstone, "no_compile_reason", lambda device: reason(CUDA))
    monkeypatch.setattr(capstone, "device_label", lambda device: "Tesla T4")
    handed = []
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: handed.append(model) or model)
    s = capstone.prepare(recipe_from_dict({**TINY, "compile": True, "amp": True,
                                           "out_dir": str(tmp_path / "run")}))
    out = capsys.readouterr().out
    if compiled:
        assert handed == [s.model] and s.amp_dtype is torch.bfloat16
        assert ("device: Tesla T4; precision: bfloat16 autocast; compiled with torch.compile\n"
                in out)
    else:
        assert handed == [] and s.trained is s.model and s.amp_dtype is torch.float16
        assert ("device: Tesla T4; precision: float16 autocast, with a gradient scaler; not "
                "compiled (compute capability below 8.0)\n") in out


@pytest.mark.needs_data
@pytest.mark.parametrize("changes, why", [
    ({}, "the recipe's compile is off"), ({"preset": "gpu"}, "the recipe's compile is off"),
    ({"compile": True}, "torch.compile does not pay on a CPU"),
    ({"preset": "gpu", "compile": True}, "torch.compile does not pay on a CPU")])
def test_the_capstone_never_compiles_on_the_cpu(monkeypatch, tmp_path, capsys, changes, why):
    """With no preset (the gpu recipe's defaults), the gpu preset, or compile asked for by name, a
    run on the CPU is not compiled, and its settings line says so and why."""
    capstone = importlib.import_module("transformer_lib.stages")
    handed = []
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: handed.append(model) or model)
    values = {k: v for k, v in TINY.items() if k != "preset"}
    s = capstone.prepare(recipe_from_dict({**values, "device": "cpu", "amp": False, **changes,
                                           "out_dir": str(tmp_path / "run")}))
    assert handed == [] and s.trained is s.model
    assert f"precision: float32 (no autocast); not compiled ({why})" in capsys.readouterr().out


def test_exercise_3_char_model_scales_float16(monkeypatch):
    """train_char_model (exercise 3) makes a GradScaler exactly when it trains in float16, and uses
    it."""
    from conftest import solution

    from transformer_lib.exercises import char_model

    CharModel = solution("ex3_char_model")["CharModel"]       # exercise 3's answer

    made = []

    class RecordingScaler(torch.amp.GradScaler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.steps = 0
            made.append(self)

        def step(self, optimizer, *args, **kwargs):
            self.steps += 1
            return super().step(optimizer, *args, **kwargs)

    monkeypatch.setattr(torch.amp, "GradScaler", RecordingScaler)
    ids = torch.randint(0, 10, (400,))
    for amp in (None, torch.bfloat16, torch.float16):
        torch.manual_seed(0)
        model = CharModel(vocab_size=10, block_size=8, d_model=16, n_heads=2, n_layers=1,
                          dropout=0.0)
        char_model.train_char_model(model, ids, ids, batch_size=4, max_steps=2, eval_batches=1,
                                    amp_dtype=amp, log=None)
        assert len(made) == (amp is torch.float16)
    assert made[0].steps == 2


@pytest.mark.parametrize("native", [True, False])
def test_cpu_bf16_only_when_asked_and_native(monkeypatch, native):
    monkeypatch.setattr(engineering, "cpu_has_native_bf16", lambda: native)
    cpu = torch.device("cpu")
    assert amp_settings(cpu) == (None, False, False)             # "auto" stays float32 on every CPU
    assert autocast_dtype(cpu, "auto") is None
    assert amp_settings(cpu, cpu_bf16=True) == ((torch.bfloat16 if native else None), False, False)


@pytest.mark.parametrize("flags, expected", [
    ("fpu sse avx2 avx512f avx512_bf16 avx512_vnni", True),          # AMD Zen 4, Intel Cooper Lake
    ("fpu sse avx2 avx512f amx_bf16 amx_tile", True),                # Intel Sapphire Rapids
    ("fpu sse avx2 avx512f avx512bw avx512_vnni", False),           # AVX-512 without bf16: emulated
    ("fpu sse avx2", False),
])
def test_cpu_has_native_bf16_reads_the_cpu_flags(monkeypatch, tmp_path, flags, expected):
    from transformer_lib import benchmarking
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: some CPU\nflags\t\t: "
                    f"{flags}\n\nprocessor\t: 1\n")
    real_open = open
    monkeypatch.setattr(benchmarking, "open",
                        lambda path, *a, **k: real_open(info if path == "/proc/cpuinfo" else path,
                                                                                *a, **k),
                        raising=False)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert benchmarking.cpu_has_native_bf16() is expected


def test_cpu_has_native_bf16_without_proc_cpuinfo(monkeypatch):
    from transformer_lib import benchmarking

    def no_file(*args, **kwargs):
        raise FileNotFoundError("/proc/cpuinfo")
    monkeypatch.setattr(benchmarking, "open", no_file, raising=False)
    assert benchmarking.cpu_has_native_bf16() is False


def test_the_cpu_presets_train_in_float32_and_amp_asks_for_bfloat16():
    """results/README.md, "Which precision the CPU preset trains in": float32 by default, and
    --amp turns on the bfloat16 autocast that amp_settings gives a CPU with the instructions."""
    from transformer_lib.recipe import parse_args, preset
    assert preset("cpu-30min").amp is False and preset("cpu-tiny").amp is False
    recipe, _ = parse_args(["--preset", "cpu-30min", "--amp"])
    assert recipe.amp is True


def test_git_commit_falls_back_to_the_environment(monkeypatch):
    """A copy of the repository without .git (a lent GPU machine) names its commit in GIT_COMMIT."""
    from transformer_lib import engineering

    def no_git(*args, **kwargs):
        raise OSError("git: not a repository")
    monkeypatch.setattr(engineering.subprocess, "run", no_git)
    monkeypatch.setenv("GIT_COMMIT", "abc1234")
    assert engineering.git_commit() == "abc1234"
    monkeypatch.delenv("GIT_COMMIT")
    assert engineering.git_commit() is None


def test_git_commit_from_the_environment_wins_over_a_stale_git(monkeypatch):
    """The lent GPU machine's copy had a .git of an older commit: its records named that commit,
    not the one that ran. GIT_COMMIT, when set, is the commit."""
    from transformer_lib import engineering
    monkeypatch.setenv("GIT_COMMIT", "4948cac")
    assert engineering.git_commit() == "4948cac"


def test_git_commit_counts_code_not_records(tmp_path, monkeypatch):
    """Rows of a benchmark run one after another in one checkout: the records the earlier rows
    wrote under results/ are outputs, not code, and must not mark the later rows '-dirty'."""
    from transformer_lib import engineering
    monkeypatch.delenv("GIT_COMMIT", raising=False)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "row.json").write_text("{}\n")
    (tmp_path / "model.py").write_text("x = 1\n")
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "start"]):
        subprocess.run(git + args, check=True, capture_output=True)
    sha = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert engineering.git_commit(tmp_path) == sha
    (tmp_path / "results" / "row.json").write_text('{"bleu": 1}\n')         # a record rewritten
    assert engineering.git_commit(tmp_path) == sha
    (tmp_path / "model.py").write_text("x = 2\n")                            # the code changed
    assert engineering.git_commit(tmp_path) == sha + "-dirty"
