"""The Timer: interleaved implementations are each timed at their own length (GPU); a noisy one gets
more rounds, within its cap (CPU)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from harness.taskfile import TaskFileError, load_task_file
from harness.timing import FEW_SAMPLES, Samples, Timer, extra_rounds


@pytest.mark.gpu
def test_interleaved_times_each_implementation_at_its_own_length() -> None:
    import torch

    device = torch.device("cuda", 0)
    timer = Timer(device, torch.cuda.Stream(device))
    cycles = 400_000  # about 200 µs at the H200's clocks
    fns = {"short": lambda: torch.cuda._sleep(cycles), "long": lambda: torch.cuda._sleep(4 * cycles)}
    samples = timer.interleaved(fns, budget_s=0.05)
    ratio = samples["long"].median / samples["short"].median
    assert 3.6 < ratio < 4.4
    assert len(samples["short"].times_us) == len(samples["long"].times_us) >= 5  # one of each per round


@pytest.mark.gpu
def test_a_library_kernel_at_the_memory_roofline_is_not_below_the_floor() -> None:
    """cuDNN decoding over a long KV cache reads faster than a copy runs: the floor must allow it."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from harness.tasks import get_task
    from harness.timing import measure_peaks
    from harness.worker import FLOOR_MARGIN

    device = torch.device("cuda", 0)
    peaks = measure_peaks(device)
    assert peaks["peak_gbps"] == max(peaks["read_gbps"], peaks["copy_gbps"])
    task = get_task("attention", {})
    s = task.parse_spec("b=16,hq=32,hkv=32,sq=1,sk=8192,d=128")
    q = torch.randn(16, 32, 1, 128, device=device, dtype=torch.bfloat16)
    k, v = (torch.randn(16, 32, 8192, 128, device=device, dtype=torch.bfloat16) for _ in range(2))

    def decode() -> None:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            F.scaled_dot_product_attention(q, k, v)

    best = min(Timer(device, torch.cuda.Stream(device)).interleaved({"cudnn": decode}, budget_s=0.1)["cudnn"].times_us)
    floor_us = 1e6 * task.min_bytes(s) / (peaks["peak_gbps"] * 1e9 * FLOOR_MARGIN)
    assert best > floor_us, (best, floor_us, peaks)


def test_steady_implementations_get_no_extra_rounds() -> None:
    steady = {"candidate": [100.0, 100.1, 99.9, 100.0, 100.05], "cudnn": [50.0, 50.02, 49.98, 50.01, 50.0]}
    assert extra_rounds(steady, max_reps=200, noise_target_pct=0.7) == 0


def test_a_noisy_implementation_gets_rounds_up_to_its_cap() -> None:
    # IQR 3% over 5 samples: 1.31 x 3 / 0.7 squared is 32 samples; the cap is 3 x 5 = 15.
    noisy = {"candidate": [100.0, 98.5, 101.5, 100.0, 97.0], "cudnn": [50.0] * 5}
    spread = Samples(noisy["candidate"]).spread_pct
    assert 2.5 < spread < 3.5
    assert extra_rounds(noisy, max_reps=200, noise_target_pct=0.7) == 10
    assert extra_rounds(noisy, max_reps=12, noise_target_pct=0.7) == 7
    assert extra_rounds(noisy, max_reps=200, noise_target_pct=0.0) == 0


def test_a_mildly_noisy_implementation_gets_what_it_needs() -> None:
    times = [100.0 + 0.3 * ((i * 7) % 11 - 5) for i in range(8)]  # IQR about 1.1%
    need = math.ceil((1.31 * Samples(times).spread_pct / 0.7) ** 2)
    assert 8 < need < 24
    assert extra_rounds({"candidate": times}, max_reps=200, noise_target_pct=0.7) == need - 8


def test_calls_sampled_many_times_get_no_extra_rounds() -> None:
    short = [40.0 + 4.0 * ((i * 7) % 11 - 5) for i in range(FEW_SAMPLES)]  # noisy, but many samples
    assert Samples(short).spread_pct > 20
    assert extra_rounds({"candidate": short}, max_reps=200, noise_target_pct=0.7) == 0
    assert extra_rounds({"candidate": short[:-1]}, max_reps=200, noise_target_pct=0.7) > 0


def test_the_task_file_sets_the_noise_target(tmp_path: Path) -> None:
    kernel = tmp_path / "k.cu"
    kernel.write_text("")
    kernel.with_suffix(".toml").write_text('task = "attention"\n')
    assert load_task_file(kernel).noise_target_pct == 0.0  # off: see FEW_SAMPLES for its cost
    kernel.with_suffix(".toml").write_text('task = "attention"\n[eval]\nnoise_target_pct = 0.7\n')
    assert load_task_file(kernel).noise_target_pct == 0.7
    kernel.with_suffix(".toml").write_text('task = "attention"\n[eval]\nnoise_target_pct = "low"\n')
    with pytest.raises(TaskFileError, match="noise_target_pct"):
        load_task_file(kernel)
