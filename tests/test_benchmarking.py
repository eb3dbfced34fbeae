"""transformer_lib.benchmarking (appendix A3), driven by a fake clock: no test here reads real
time."""
import pytest
import torch

from transformer_lib.benchmarking import (
    Timings,
    count_flops,
    cpu_model,
    device_name,
    format_table,
    matmul_flops_per_s,
    peak_memory,
    time_interleaved,
)
from transformer_lib.multi_head_attention import MultiHeadAttention, attention_matmul_flops


class FakeClock:
    """A clock that moves only when a contender advances it."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def contenders(clock, durations, log):
    """Callables that log their name and advance the clock by their duration of the current call."""
    def make(name):
        def call():
            log.append(name)
            clock.now += durations[name](len(log))
        return call
    return {name: make(name) for name in durations}


def test_rounds_alternate_and_warmup_is_not_timed():
    clock, log, syncs = FakeClock(), [], []
    fns = contenders(clock, {"a": lambda i: 100.0 if i <= 3 else 2.0, "b": lambda i: 1.0,
                             "c": lambda i: 0.5}, log)
    t = time_interleaved(fns, rounds=4, iters=1, warmup=1, sync=lambda: syncs.append(len(log)),
                         clock=clock)
    assert log[:3] == ["a", "b", "c"]                        # warm-up, untimed (a's 100 s included)
    assert log[3:] == ["a", "b", "c", "c", "b", "a", "a", "b", "c", "c", "b", "a"]
    assert t.seconds == {"a": [2.0] * 4, "b": [1.0] * 4, "c": [0.5] * 4}
    # before and after every timed call
    assert syncs == [n for k in range(3, 15) for n in (k, k + 1)]


def test_iters_divide_and_speedup_is_round_by_round():
    clock, log = FakeClock(), []
    # The machine is 3x slower in the second round (timed calls 5-8 of 12 with iters=2, after 2
    # warm-ups).
    slow = lambda i: 3.0 if 7 <= i <= 10 else 1.0                     # noqa: E731
    fns = contenders(clock, {"ours": lambda i: 1.0 * slow(i), "ref": lambda i: 2.0 * slow(i)}, log)
    t = time_interleaved(fns, rounds=3, iters=2, warmup=1, clock=clock)
    assert t.seconds == {"ours": [1.0, 3.0, 1.0], "ref": [2.0, 6.0, 2.0]}
    assert t.median("ours") == 1.0 and t.median("ref") == 2.0
    assert t.spread("ours") == pytest.approx(2.0)                      # (3 - 1) / 1
    assert t.speedup("ours", "ref") == (2.0, 2.0, 2.0)     # the slow round cancels out of the ratio
    assert t.speedup("ref", "ours") == (0.5, 0.5, 0.5)


def test_speedup_reports_median_and_range():
    t = Timings({"ours": [1.0, 1.0, 1.0, 1.0, 1.0], "ref": [1.2, 0.9, 1.5, 1.1, 1.3]})
    assert t.speedup("ours", "ref") == pytest.approx((1.2, 0.9, 1.5))
    assert t.spread("ref") == pytest.approx((1.5 - 0.9) / 1.2)


@pytest.mark.parametrize("kwargs", [dict(rounds=0), dict(iters=0), dict(warmup=-1)])
def test_bad_arguments_are_named(kwargs):
    with pytest.raises(ValueError, match="rounds >= 1"):
        time_interleaved({"a": lambda: None}, **kwargs)
    with pytest.raises(ValueError, match="at least one"):
        time_interleaved({})


def test_matmul_ceiling_is_two_n_cubed_over_the_median():
    times = iter([0.0, 0.5, 10.0, 10.25, 20.0, 21.0])                # rounds of 0.5, 0.25 and 1.0 s
    rate = matmul_flops_per_s("cpu", n=16, rounds=3, clock=lambda: next(times))
    assert rate == 2 * 16 ** 3 / 0.5


def test_count_flops_counts_attention_products_on_every_kernel():
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4)
    x = torch.randn(2, 6, 32, requires_grad=True)

    def step():
        out = mha(x, x, x)                                             # the fast path (fused SDPA)
        out.backward(torch.ones_like(out))

    assert count_flops(step) == 3 * 2 * attention_matmul_flops(6, 6, 32, 4)


def test_peak_memory_counts_live_tensors_on_the_cpu():
    def make():
        a = torch.empty(1000, dtype=torch.float32)                      # 4,000 bytes
        b = torch.empty(500, dtype=torch.float64)                       # 4,000 bytes, both alive
        del a, b
        torch.empty(10, dtype=torch.float32)

    assert peak_memory(make, "cpu") == 8000


def test_device_name_names_the_cpu_and_its_threads():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert device_name("cpu").startswith("CPU (") and device_name("cpu").endswith(", 1 thread)")
        torch.set_num_threads(2)
        assert device_name(torch.device("cpu")).endswith(", 2 threads)")
    finally:
        torch.set_num_threads(threads)


def test_cpu_model_names_the_processor_and_the_kernel_set(monkeypatch):
    name = cpu_model()
    assert name.endswith(f"; kernels {torch.backends.cpu.get_cpu_capability()}")
    assert not name.startswith(";")                       # a processor name comes first
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    assert cpu_model().endswith("; kernels DEFAULT")


def test_format_table_aligns_columns():
    assert format_table(["x", "long"], [[1, 2], ["333", 4.5]]).splitlines() == ["  x  long",
                                                                                "  1     2",
                                                                                 "333   4.5"]
