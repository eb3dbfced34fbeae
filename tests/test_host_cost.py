"""benchmarks/speed/host_cost.py: what chapter 13's training loop adds to a bare loop, counted, not
timed
(timing belongs to a quiet machine; counts are exact anywhere). At the benchmark's tiny shape the
host's work is all there is: the loop that the capstone runs adds at most 1% of aten operators and
3% of Python calls to a bare loop with our model, and our model dispatches fewer operators per
update than nn.Transformer of the same shape."""
from pathlib import Path

import host_cost  # noqa: E402
import pytest
import torch


@pytest.fixture(scope="module")
def counts():
    before = torch.get_num_threads()
    try:
        return host_cost.measure(time_it=False, rounds=0, updates=0)
    finally:
        torch.set_num_threads(before)


def test_the_loop_adds_next_to_nothing_to_a_bare_loop(counts):
    fit, bare = counts["fit"], counts["bare ours"]
    assert fit["operators_per_update"] <= 1.01 * bare["operators_per_update"], counts
    assert fit["python_calls_per_update"] <= 1.03 * bare["python_calls_per_update"], counts


def test_our_model_dispatches_no_more_operators_than_nn_transformer(counts):
    assert (counts["bare ours"]["operators_per_update"]
            <= counts["bare nn.Transformer"]["operators_per_update"]), counts


def test_the_three_loops_train_on_the_same_batches_and_numbers():
    """`fit` and the bare loop with our model see the same batches in the same order from the same
    seed: their logged losses agree (one window of 10 updates)."""
    fit = host_cost.run("fit", 10, lambda step: None)
    bare = host_cost.run("bare ours", 10, lambda step: None)
    assert fit == pytest.approx(bare, rel=1e-6)


def test_timing_is_refused_while_other_runs_are_timed(tmp_path, monkeypatch):
    quiet = tmp_path / "QUIET"
    quiet.write_text("")
    monkeypatch.setattr(host_cost, "QUIET_FILE", str(quiet))
    with pytest.raises(SystemExit, match="being timed"):
        host_cost.main(["--time"])


def test_the_loop_reads_no_more_numbers_out_of_tensors_than_a_bare_loop(counts):
    """Reading a number out of a tensor (`.item()`, `int()`) makes the host wait for a GPU's queue:
    the loop reads the loss once per log record, nothing per update beyond the bare loop."""
    assert (counts["fit"]["tensor_reads_per_update"]
            <= counts["bare ours"]["tensor_reads_per_update"] + 0.1), counts


def test_the_budget_schedule_reads_the_clock_without_waiting_for_the_gpu(monkeypatch):
    """The budget schedule reads the run's clock every update; on a GPU that read must not wait
    for the queue (`TrainingClock.peek`), while the clock's log readings do."""
    from transformer_lib import engineering
    from transformer_lib.recipe import preset
    from transformer_lib.stages import RunResult, budget_progress

    waited, now = [], [0.0]
    monkeypatch.setattr(engineering, "synchronize", lambda device: waited.append(device.type))
    s = RunResult(preset("cpu-30min"), torch.device("cuda"), 0, 1, None, Path("unused"), None)
    s.clock = engineering.TrainingClock("cuda", timer=lambda: now[0])
    now[0] = 179.7
    assert budget_progress(s.recipe, s.seconds_trained, 10) == pytest.approx(0.1)
    assert waited == []
    assert s.clock() == 179.7 and waited == ["cuda"]
