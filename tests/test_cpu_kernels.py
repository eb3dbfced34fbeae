"""The CPU's kernel set (ATEN_CPU_CAPABILITY) as the package sees it: the same machine runs
PyTorch's DEFAULT, AVX2 or AVX512 kernels, and the choice decides more than rounding."""
import pytest
import torch

from transformer_lib import benchmarking

AMX_FLAGS = "fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile"


def fake_cpuinfo(monkeypatch, tmp_path, flags):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: some CPU\nflags\t\t: {flags}\n")
    real_open = open
    monkeypatch.setattr(benchmarking, "open",
                        lambda path, *a, **k: real_open(info if path == "/proc/cpuinfo" else path,
                                                        *a, **k), raising=False)


@pytest.mark.parametrize("kernels, expected", [("AVX512", True), ("AVX2", False),
                                               ("DEFAULT", False)])
def test_bf16_counts_as_native_only_with_avx512_kernels(monkeypatch, tmp_path, kernels, expected):
    """An AMX CPU told to use AVX2 kernels (ATEN_CPU_CAPABILITY=avx2, as `make test-kernels` does)
    has no bfloat16 fast path: its flash-attention kernel stops with 'pack_vnni2 is only supported
    when avx512 is supported'. So bfloat16 is native only where the AVX-512 kernels run."""
    fake_cpuinfo(monkeypatch, tmp_path, AMX_FLAGS)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: kernels)
    assert benchmarking.cpu_has_native_bf16() is expected


def test_cpu_model_reads_the_model_name(monkeypatch, tmp_path):
    fake_cpuinfo(monkeypatch, tmp_path, AMX_FLAGS)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert benchmarking.cpu_model() == "some CPU; kernels AVX2"
