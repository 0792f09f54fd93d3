"""The Timer on the GPU: interleaved implementations are each timed at their own length."""

from __future__ import annotations

import pytest

from harness.timing import Timer


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
