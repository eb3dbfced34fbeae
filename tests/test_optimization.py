"""Chapter 14: Adam settings, the warm-up schedule, label smoothing, checkpoints and their
average."""
import io
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_lib.optimization import (
    CheckpointError,
    LabelSmoothingLoss,
    WarmupSchedule,
    average_checkpoints,
    load_checkpoint,
    paper_adam,
    read_checkpoint,
    save_checkpoint,
    warmup_lr,
)


# --- Adam -----------------------------------------------------------------------------------------
def test_paper_adam_constants_and_update_rule():
    g = torch.Generator().manual_seed(0)
    theta = torch.randn(6, dtype=torch.float64, generator=g).requires_grad_()
    opt = paper_adam([theta], lr=0.03)
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9
    mine = theta.detach().clone()
    m = torch.zeros_like(mine)
    v = torch.zeros_like(mine)
    for t in range(1, 6):
        grad = torch.randn(6, dtype=torch.float64, generator=g)
        theta.grad = grad.clone()
        opt.step()
        m = 0.9 * m + 0.1 * grad
        v = 0.98 * v + 0.02 * grad**2
        mine = mine - 0.03 * (m / (1 - 0.9**t)) / ((v / (1 - 0.98**t)).sqrt() + 1e-9)
    torch.testing.assert_close(theta.detach(), mine, atol=1e-12, rtol=0)


# --- schedule -------------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(d_model=st.integers(1, 2048), warmup=st.integers(1, 5000), step=st.integers(1, 100_000))
def test_warmup_lr_equals_formula(d_model, warmup, step):
    expected = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
    assert warmup_lr(step, d_model, warmup) == pytest.approx(expected, rel=1e-12)
    assert warmup_lr(step, d_model, warmup, factor=2.5) == pytest.approx(2.5 * expected, rel=1e-12)


@pytest.mark.parametrize("d_model,warmup", [(512, 4000), (64, 10), (1024, 1)])
def test_peak_is_at_warmup(d_model, warmup):
    rates = [warmup_lr(s, d_model, warmup) for s in range(1, 3 * warmup + 3)]
    assert rates.index(max(rates)) + 1 == warmup
    assert max(rates) == pytest.approx((d_model * warmup) ** -0.5, rel=1e-12)


@pytest.mark.parametrize("d_model,warmup,peak", [(512, 400, 1e-3), (256, 50, 3e-3)])
def test_factor_sets_the_peak_and_keeps_the_shape(d_model, warmup, peak):
    """The chapter's recipe factor = peak · (d_model · warmup)^0.5 moves the peak, not its step or
    the shape."""
    factor = peak * (d_model * warmup) ** 0.5
    rates = [warmup_lr(s, d_model, warmup, factor=factor) for s in range(1, 3 * warmup)]
    assert rates.index(max(rates)) + 1 == warmup
    assert max(rates) == pytest.approx(peak, rel=1e-12)
    plain = [warmup_lr(s, d_model, warmup) for s in range(1, 3 * warmup)]
    assert all(r == pytest.approx(factor * p, rel=1e-12) for r, p in zip(rates, plain))


@pytest.mark.parametrize("d_model,warmup,base_lr", [(512, 50, 1.0), (32, 7, 0.5)])
def test_scheduler_follows_formula_and_survives_state_dict(d_model, warmup, base_lr):
    opt = paper_adam(nn.Linear(2, 2).parameters(), lr=base_lr)
    sched = WarmupSchedule(opt, d_model, warmup)
    for step in range(1, 4 * warmup):
        assert (opt.param_groups[0]["lr"]
                == pytest.approx(base_lr * warmup_lr(step, d_model, warmup), rel=1e-12))
        opt.step()
        sched.step()
    state = sched.state_dict()
    opt2 = paper_adam(nn.Linear(2, 2).parameters(), lr=base_lr)
    sched2 = WarmupSchedule(opt2, d_model, warmup)
    sched2.load_state_dict(state)
    assert sched2.get_last_lr() == sched.get_last_lr()


def test_scheduler_peak_is_defined_inside_the_schedule():
    """`peak` rescales eq. (3) to that maximum whatever the optimizer's lr, with the arithmetic the
    capstone used when the optimizer carried the rescaling: (peak / max) × eq. (3), bit for bit."""
    d_model, warmup, peak = 256, 20, 1e-3
    top = warmup_lr(warmup, d_model, warmup)
    for lr in (peak, 1.0):                          # the optimizer's own lr does not matter
        opt = paper_adam(nn.Linear(2, 2).parameters(), lr=lr)
        sched = WarmupSchedule(opt, d_model, warmup, peak=peak)
        rates = []
        for _ in range(3 * warmup):
            rates.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        want = [peak / top * warmup_lr(k, d_model, warmup) for k in range(1, 3 * warmup + 1)]
        assert rates == want
        assert max(rates) == pytest.approx(peak, rel=1e-12)
        assert rates.index(max(rates)) == warmup - 1
    for bad in (0.0, -1e-3, float("nan")):
        with pytest.raises(ValueError, match="peak must be a learning rate > 0"):
            WarmupSchedule(paper_adam(nn.Linear(2, 2).parameters()), d_model, warmup, peak=bad)


@pytest.mark.parametrize("step,d_model,warmup", [(0, 512, 4000), (1, 0, 4000), (1, 512, 0)])
def test_warmup_lr_rejects_bad_arguments(step, d_model, warmup):
    with pytest.raises(ValueError, match="must be >= 1"):
        warmup_lr(step, d_model, warmup)


# --- label smoothing ------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 4), length=st.integers(1, 9), vocab=st.integers(2, 30),
       eps=st.sampled_from([0.0, 0.1, 0.3, 0.9]), pad_frac=st.floats(0, 0.9),
       seed=st.integers(0, 2**16))
def test_label_smoothing_equals_pytorch(b, length, vocab, eps, pad_frac, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, length, vocab, dtype=torch.float64, generator=g) * 4
    target = torch.randint(0, vocab, (b, length), generator=g)
    target[torch.rand(b, length, generator=g) < pad_frac] = 0
    target[0, 0] = 1 % vocab if vocab > 1 else 0   # at least one real token
    ours = LabelSmoothingLoss(vocab, smoothing=eps, pad_id=0)(logits, target)
    ref = F.cross_entropy(logits.transpose(1, 2), target, label_smoothing=eps, ignore_index=0)
    torch.testing.assert_close(ours, ref, atol=1e-12, rtol=1e-10)
    total = LabelSmoothingLoss(vocab, smoothing=eps, pad_id=0, reduction="sum")(logits, target)
    ref_sum = F.cross_entropy(logits.transpose(1, 2), target, label_smoothing=eps, ignore_index=0,
                              reduction="sum")
    torch.testing.assert_close(total, ref_sum, atol=1e-10, rtol=1e-10)


def test_label_smoothing_equals_cross_entropy_against_smoothed_distribution():
    """-sum_k q_k log p_k with q = (1-eps) onehot + eps/V, written out."""
    vocab, eps = 7, 0.2
    logits = torch.randn(2, 3, vocab, dtype=torch.float64,
                         generator=torch.Generator().manual_seed(0))
    target = torch.tensor([[1, 2, 0], [6, 0, 0]])
    q = torch.full((2, 3, vocab), eps / vocab, dtype=torch.float64)
    q.scatter_add_(-1, target[..., None], torch.full((2, 3, 1), 1 - eps, dtype=torch.float64))
    per_token = -(q * logits.log_softmax(-1)).sum(-1)
    keep = target != 0
    expected = per_token[keep].mean()
    torch.testing.assert_close(LabelSmoothingLoss(vocab, eps, pad_id=0)(logits, target), expected)


def test_label_smoothing_is_finite_for_certain_model_and_all_padding():
    logits = torch.full((2, 3, 5), -1e4)
    logits[..., 1] = 1e4                      # probabilities underflow to exact zeros
    target = torch.ones(2, 3, dtype=torch.long)
    loss = LabelSmoothingLoss(5, 0.1)(logits, target)
    assert torch.isfinite(loss) and loss > 1.0   # punished for certainty, but finite
    all_pad = LabelSmoothingLoss(5, 0.1)(logits, torch.zeros(2, 3, dtype=torch.long))
    assert all_pad.item() == 0.0
    assert torch.isnan(F.cross_entropy(logits.transpose(1, 2), torch.zeros(2, 3, dtype=torch.long),
                                       # PyTorch's NaN we avoid
                                       ignore_index=0, label_smoothing=0.1))


def test_label_smoothing_bf16_logits_and_gradient():
    logits = torch.randn(2, 4, 9, requires_grad=True)
    target = torch.randint(1, 9, (2, 4))
    loss = LabelSmoothingLoss(9)(logits.bfloat16(), target)
    assert loss.dtype == torch.float32
    loss.backward()
    assert torch.isfinite(logits.grad).all()


def test_label_smoothing_minimum_is_smoothed_target():
    vocab, eps = 10, 0.1
    z = torch.zeros(1, 1, vocab, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([z], max_iter=200, tolerance_grad=1e-12, tolerance_change=1e-14)
    crit = LabelSmoothingLoss(vocab, eps, pad_id=None)
    target = torch.tensor([[3]])

    def closure():
        opt.zero_grad()
        loss = crit(z, target)
        loss.backward()
        return loss

    opt.step(closure)
    p = z.detach().softmax(-1)[0, 0]
    assert p[3].item() == pytest.approx(1 - eps + eps / vocab, abs=1e-6)


@pytest.mark.parametrize("logits,target,match", [
    (torch.randn(2, 3, 4), torch.zeros(2, 3, dtype=torch.long), r"logits must be .* V=5"),
    (torch.randn(2, 3, 5), torch.zeros(2, 4, dtype=torch.long),
     r"target must be a long tensor of shape \(2, 3\)"),
    (torch.randn(2, 3, 5), torch.zeros(2, 3), r"target must be a long tensor"),
    (torch.randn(2, 3, 5), torch.tensor([[1, 2, 5], [0, 0, 0]]),
     r"target contains token id 5 .* \[0, 5\)"),
    (torch.randn(2, 3, 5), torch.tensor([[1, 2, -100], [0, 0, 0]]),
     r"target contains token id -100 .* pad_id=0"),
])
def test_label_smoothing_bad_input(logits, target, match):
    with pytest.raises(ValueError, match=match):
        LabelSmoothingLoss(5)(logits, target)


def test_label_smoothing_range_check_can_be_switched_off(monkeypatch):
    crit = LabelSmoothingLoss(5)
    crit.check_inputs = False                 # no torch.aminmax (a host sync on a GPU) per call
    monkeypatch.setattr(torch, "aminmax", lambda *a, **k: pytest.fail("range check ran"))
    assert torch.isfinite(crit(torch.randn(2, 3, 5), torch.tensor([[1, 2, 4], [0, 0, 0]])))


# --- checkpoints ----------------------------------------------------------------------------------
def _trained(seed=0, steps=3):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 2))
    opt = paper_adam(net.parameters())
    sched = WarmupSchedule(opt, d_model=8, warmup_steps=4)
    for _ in range(steps):
        opt.zero_grad()
        net(torch.randn(5, 4)).pow(2).mean().backward()
        opt.step()
        sched.step()
    return net, opt, sched


def test_checkpoint_round_trip_restores_everything(tmp_path):
    net, opt, sched = _trained()
    path = save_checkpoint(tmp_path / "a" / "ckpt.pt", net, opt, sched, step=3, config={"d": 8},
                           extra={"epoch": 1, "order": torch.arange(4)})
    expected_draw = torch.rand(3)          # drawn after saving: restoring the RNG must reproduce it
    net2, opt2, sched2 = _trained(seed=1, steps=1)
    ckpt = load_checkpoint(path, net2, opt2, sched2)
    assert ckpt["step"] == 3 and ckpt["config"] == {"d": 8} and ckpt["extra"]["epoch"] == 1
    assert torch.equal(torch.rand(3), expected_draw)
    for a, b in zip(net.state_dict().values(), net2.state_dict().values()):
        assert torch.equal(a, b)
    assert sched2.last_epoch == sched.last_epoch
    s1, s2 = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert all(torch.equal(s1[k]["exp_avg_sq"], s2[k]["exp_avg_sq"]) for k in s1)
    assert not list(tmp_path.glob("a/*.tmp"))


def test_loading_uses_weights_only(tmp_path, monkeypatch):
    net, opt, sched = _trained()
    path = save_checkpoint(tmp_path / "c.pt", net, opt, sched)
    calls = []
    real_load = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    load_checkpoint(path, net)
    average_checkpoints([path, path])
    assert calls == [True, True, True]


class _Evil:
    def __reduce__(self):
        return (print, ("this would run arbitrary code",))


def test_checkpoint_with_arbitrary_object_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"format": 1, "model": {}, "payload": _Evil()}, path)
    with pytest.raises(CheckpointError, match="evil.pt"):
        read_checkpoint(path)


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "text"])
def test_corrupt_checkpoint_gives_clear_error(tmp_path, damage):
    net, opt, sched = _trained()
    path = save_checkpoint(tmp_path / "c.pt", net, opt, sched)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        mid = len(data) // 2
        data[mid: mid + 64] = bytes(64)
        data[:4] = b"XXXX"
    elif damage == "empty":
        data = b""
    else:
        data = pickle.dumps("not a checkpoint", protocol=2)
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"c\.pt"):
        load_checkpoint(path, net, opt, sched)


def test_missing_and_foreign_files(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt")
    torch.save({"weights": torch.ones(2)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a transformer_lib checkpoint"):
        load_checkpoint(tmp_path / "other.pt")


def test_config_mismatch_names_the_fields(tmp_path):
    class WithConfig(nn.Linear):
        def __init__(self, config):
            super().__init__(2, 2)
            self.config = config

    path = save_checkpoint(tmp_path / "c.pt", WithConfig({"d_model": 512, "n_layers": 6}))
    with pytest.raises(CheckpointError, match="d_model: 512 in the checkpoint, 256 in the model"):
        load_checkpoint(path, WithConfig({"d_model": 256, "n_layers": 6}))
    with pytest.raises(CheckpointError, match="does not fit the model"):
        load_checkpoint(path, nn.Linear(3, 3))


def test_unwraps_ddp_like_wrappers(tmp_path):
    class Wrapper(nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module

    net, _, _ = _trained()
    path = save_checkpoint(tmp_path / "w.pt", Wrapper(net))
    assert set(read_checkpoint(path)["model"]) == set(net.state_dict())
    other = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 2))
    load_checkpoint(path, Wrapper(other))
    assert torch.equal(other[0].weight, net[0].weight)


def test_average_checkpoints_is_elementwise_mean(tmp_path):
    paths, states = [], []
    for i in range(4):
        net, opt, _ = _trained(seed=i, steps=i + 1)
        net.register_buffer("count", torch.tensor(i))
        paths.append(save_checkpoint(tmp_path / f"{i}.pt", net, opt))
        states.append({k: v.clone() for k, v in net.state_dict().items()})
    avg = average_checkpoints(paths)
    for name in states[0]:
        if name == "count":
            assert avg[name].item() == 3          # integer buffers come from the last checkpoint
            continue
        torch.testing.assert_close(avg[name], sum(s[name] for s in states) / 4)
        assert avg[name].dtype == states[0][name].dtype
    same = average_checkpoints([paths[2]] * 3)
    assert all(torch.equal(same[k], states[2][k]) for k in same)


def test_average_checkpoints_rejects_mismatch(tmp_path):
    a = save_checkpoint(tmp_path / "a.pt", nn.Linear(2, 2))
    b = save_checkpoint(tmp_path / "b.pt", nn.Linear(2, 3))
    with pytest.raises(CheckpointError, match="different parameter names or shapes"):
        average_checkpoints([a, b])
    with pytest.raises(ValueError, match="at least one"):
        average_checkpoints([])


def test_average_checkpoints_refuses_one_path(tmp_path):
    """One path (str or Path) is not a list of paths: iterating it would read '/', 'c', ... and
    report 'checkpoint / does not exist'."""
    a = save_checkpoint(tmp_path / "a.pt", nn.Linear(2, 2))
    for one in (str(a), a):
        with pytest.raises(TypeError, match=rf"paths must be a list of checkpoint paths, got one "
                                            rf"path '{a}'; pass \['{a}'\]"):
            average_checkpoints(one)
    assert average_checkpoints([str(a)]).keys() == nn.Linear(2, 2).state_dict().keys()


def test_read_checkpoint_names_a_directory(tmp_path):
    with pytest.raises(CheckpointError, match=rf"checkpoint {tmp_path} is a directory; give the "
                                              "checkpoint file"):
        average_checkpoints([tmp_path])


# --- the budget schedule (chapter 14, "A schedule for a fixed budget") ---
from transformer_lib.optimization import BudgetSchedule, budget_lr  # noqa: E402


def test_budget_lr_warms_up_holds_and_decays_to_zero():
    assert budget_lr(1, 0.0, warmup_steps=4) == 0.25
    assert budget_lr(4, 0.1, warmup_steps=4) == 1.0
    assert budget_lr(100, 0.6, warmup_steps=4, decay_start=0.6) == 1.0      # last point of the hold
    assert abs(budget_lr(100, 0.8, warmup_steps=4, decay_start=0.6) - 0.5) < 1e-12
    assert budget_lr(100, 1.0, warmup_steps=4, decay_start=0.6) == 0.0
    # both at once
    assert budget_lr(2, 0.8, warmup_steps=4, decay_start=0.6) == pytest.approx(0.25, abs=1e-15)
    assert budget_lr(7, 0.99, warmup_steps=4, decay_start=1.0) == 1.0  # decay_start=1: never decays


@pytest.mark.parametrize("kwargs, name",
                         [(dict(step=0), "step"), (dict(warmup_steps=0), "warmup_steps"),
                                          (dict(decay_start=1.5), "decay_start"),
                          (dict(progress=-0.1), "progress")])
def test_budget_lr_names_the_bad_argument(kwargs, name):
    args = dict(step=1, progress=0.0, warmup_steps=10, decay_start=0.5) | kwargs
    with pytest.raises(ValueError, match=name):
        budget_lr(**args)


def test_budget_schedule_follows_the_formula_and_checkpoints_without_its_clock():
    clock = [0.0]
    opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.5)
    sched = BudgetSchedule(opt, warmup_steps=3, progress=lambda updates: clock[0], decay_start=0.5)
    seen = []
    for k in range(1, 11):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        clock[0] = k / 10                               # a fake clock: 10% of the budget per update
        sched.step()
    expected = [0.5 * budget_lr(k, min((k - 1) / 10, 1.0), 3, 0.5) for k in range(1, 11)]
    assert seen == pytest.approx(expected, abs=1e-15)
    state = sched.state_dict()
    assert "progress" not in state
    torch.save(state, io.BytesIO())                       # picklable although progress is a closure
    again = BudgetSchedule(opt, warmup_steps=3, progress=lambda updates: updates / 10,
                           decay_start=0.5)
    again.load_state_dict(state)
    assert again.last_epoch == 10 and again.progress(5) == 0.5


def test_budget_schedule_reads_the_update_count():
    opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=1.0)
    sched = BudgetSchedule(opt, warmup_steps=1, progress=lambda updates: updates / 4,
                           decay_start=0.0)
    rates = []
    for _ in range(4):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert rates == pytest.approx([1.0, 0.75, 0.5, 0.25])


# --- hardening: nothing half-done -----------------------------------------------------------------
def test_an_optimizer_state_that_does_not_fit_leaves_the_weights_alone(tmp_path):
    net, opt, sched = _trained()
    path = save_checkpoint(tmp_path / "c.pt", net, opt, sched, step=3)
    other, _, _ = _trained(seed=5)
    before = {k: v.clone() for k, v in other.state_dict().items()}
    partial_opt = paper_adam(other[0].parameters())            # one layer only: 2 parameters, not 4
    with pytest.raises(CheckpointError, match=r"optimizer state holds \[4\] parameters per group, "
                                              r"the optimizer \[2\]"):
        load_checkpoint(path, other, partial_opt)
    assert all(torch.equal(before[k], v) for k, v in other.state_dict().items())
    assert not partial_opt.state                                    # the optimizer is untouched too
    swapped = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 2))
    wrong = paper_adam([swapped[2].weight, swapped[2].bias, swapped[0].weight, swapped[0].bias])
    with pytest.raises(CheckpointError, match=r"optimizer state 'exp_avg' of shape \(8, 4\) does "
                                              r"not fit a parameter "
                                              r"of shape \(2, 8\)"):
        load_checkpoint(path, swapped, wrong)


def test_a_failed_save_leaves_no_temporary_file(tmp_path, monkeypatch):
    net, opt, sched = _trained()
    save_checkpoint(tmp_path / "c.pt", net, opt, sched, step=1)
    good = (tmp_path / "c.pt").read_bytes()

    def disk_full(obj, f, *args, **kwargs):
        Path(f).write_bytes(b"half a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(tmp_path / "c.pt", net, opt, sched, step=2)
    assert (sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]
            and (tmp_path / "c.pt").read_bytes() == good)


@pytest.mark.parametrize("extra, where", [
    ({"bleu": np.float64(30.0)}, r"extra\['bleu'\] is a numpy.float64"),
    ({"best": np.int64(3)}, r"extra\['best'\] is a numpy.int64"),
    ({"out": Path("runs")}, r"extra\['out'\] is a pathlib.*Path"),
    ({"log": [{"step": 1, "loss": np.float32(2.0)}]},
     r"extra\['log'\]\[0\]\['loss'\] is a numpy.float32"),
    ({"ids": frozenset({1})}, r"extra\['ids'\] is a builtins.frozenset"),
])
def test_extra_values_that_loading_refuses_are_refused_when_saving(tmp_path, extra, where):
    net, _, _ = _trained()
    with pytest.raises(TypeError, match=where + ".*cannot hold"):
        save_checkpoint(tmp_path / "c.pt", net, extra=extra)
    assert not list(tmp_path.iterdir())
    fine = {"epoch": 1, "order": torch.arange(3), "log": [{"a": 1.5, "b": None, "c": (1, "x")}],
            "dtype": torch.float16, "shape": torch.Size([2]), "tags": {"a"}, 3: b"raw"}
    save_checkpoint(tmp_path / "ok.pt", net, extra=fine)
    assert read_checkpoint(tmp_path / "ok.pt")["extra"]["log"] == fine["log"]
