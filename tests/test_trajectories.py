"""Numerics do not change when the code is reorganised: every step's loss of a seeded CPU run of the
capstone's `run()` and of the character model's training equals the trajectory
recorded before the training stack was unified (tests/fixtures/trajectories.json, recorded with
the code of commit c566d34 by tests/fixtures/record_trajectories_before_issue16.py.txt). The
capstone's entry was recorded again (tests/fixtures/record_capstone_trajectory.py.txt) when W_Q,
W_K, W_V moved to nn.Transformer's initialisation, and again when the FFN biases did (nn.Linear's
uniform draw instead of zeros): changes of every step by design.

Bit for bit holds on the machine the fixture was recorded on. Another CPU's kernels round the last
bits of float32 differently: on an AMD EPYC (Zen 4, AVX-512) the capstone's losses differ from the
fixture by at most 8e-8 relative, with the code the fixture was recorded from as with today's. So
the comparison allows
REL = 1e-6 relative, which any change in the arithmetic (another initialisation, dropout mask, batch
order or update) exceeds by orders of magnitude; the learning rates are plain Python and stay
exact."""
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import solution

from transformer_lib.exercises import char_model as cm
from transformer_lib.recipe import recipe_from_dict
from transformer_lib.train import run

REL = 1e-6

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "trajectories.json").read_text())


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)                  # the fixture was recorded with one thread
    yield
    torch.set_num_threads(before)


@pytest.mark.needs_data
def test_capstone_loss_trajectory_is_unchanged(tmp_path, one_thread):
    want = FIXTURE["capstone"]
    result = run(recipe_from_dict({**want["recipe"], "out_dir": str(tmp_path / "run")}))
    assert [h["loss"] for h in result.history] == pytest.approx(want["losses"], rel=REL, abs=0)
    assert [h["lr"] for h in result.history] == want["lrs"]
    assert result.results["val"]["loss"] == pytest.approx(want["val_loss"], rel=REL, abs=0)


def test_char_model_loss_trajectory_is_unchanged(one_thread, monkeypatch):
    want = FIXTURE["char_model"]
    reference = solution("ex3_char_model")       # the model and split are exercise 3's answer
    text = "First Citizen: Before we proceed any further, hear me speak. All: Speak, speak. " * 40
    tok = cm.CharTokenizer(text)
    train_ids, val_ids = (tok.encode(part) for part in reference["split_text"](text))
    torch.manual_seed(0)
    model = reference["CharModel"].from_config(cm.CharModelConfig.cpu(tok.vocab_size, block_size=16,
                                                                     d_model=32, dropout=0.1))
    seen, cross_entropy = [], F.cross_entropy

    def spy(*args, **kwargs):                 # every training loss, as the fixture recorded them
        out = cross_entropy(*args, **kwargs)
        if torch.is_grad_enabled():
            seen.append(out.item())
        return out

    monkeypatch.setattr(F, "cross_entropy", spy)
    history = cm.train_char_model(model, train_ids, val_ids, batch_size=8, lr=3e-3, min_lr=3e-4,
                                  warmup_steps=5,
                                  max_steps=20, eval_every_steps=5, eval_batches=2, seed=0,
                                  log=None)
    assert seen == pytest.approx(want["losses"], rel=REL, abs=0)
    assert [h["step"] for h in history] == [e["step"] for e in want["evals"]]
    assert [h["lr"] for h in history] == [e["lr"] for e in want["evals"]]
    assert [h["val_loss"] for h in history] == pytest.approx([e["val_loss"] for e in want["evals"]],
                                                             rel=REL, abs=0)
    assert (float(sum(p.detach().double().sum() for p in model.parameters()))
            == pytest.approx(want["weight_sum"], rel=REL))
