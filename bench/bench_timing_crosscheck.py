"""The harness's timing method against triton.testing.do_bench on the same cuDNN call (GPU).

Same process, same inputs, same [B, S, H, D] layout; alternating order, so clock and power state hit
both alike. Then (`--regimes`) cuDNN timed by the harness's Timer interleaved with partners of
different weight, as it is inside an evaluation, with the SM clock and power sampled by nvidia-smi
during each: whether cuDNN's time depends on what it alternates with, and whether the clock is why.
Prints `BENCH` lines.
Usage: python bench/bench_timing_crosscheck.py [--regimes]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton.testing  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from harness.timing import Timer  # noqa: E402

B, H, S, D = 2, 16, 8192, 128
FLOP = 4 * B * H * S * S * D


def bench(name: str, value: str) -> None:
    print(f"BENCH {name:<44} {value}", flush=True)


class Sampler:
    """nvidia-smi's SM clock (MHz) and power (W) every 20 ms while the block runs."""

    def __enter__(self) -> "Sampler":
        self.proc = subprocess.Popen(["nvidia-smi", "-i", str(torch.cuda.current_device()), "--query-gpu=clocks.sm,power.draw",
                                      "--format=csv,noheader,nounits", "-lms", "20"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        time.sleep(0.3)  # nvidia-smi's own start
        return self

    def __exit__(self, *exc) -> None:
        time.sleep(0.05)
        self.proc.terminate()
        out = self.proc.communicate()[0]
        rows = [[float(x) for x in line.split(",")] for line in out.splitlines()[2:] if line.count(",") == 1]
        self.clock = statistics.median(r[0] for r in rows) if rows else float("nan")
        self.power = statistics.median(r[1] for r in rows) if rows else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--regimes", action="store_true", help="cuDNN interleaved with partners, clocks sampled")
    args = ap.parse_args()
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v)

    timer = Timer(torch.device("cuda", 0), torch.cuda.Stream())
    ours, theirs = [], []
    for _ in range(3):
        ours.append(timer.interleaved({"cudnn": cudnn}, budget_s=0.5, max_reps=200)["cudnn"].median)
        with torch.cuda.stream(timer.stream):
            theirs.append(1000 * triton.testing.do_bench(cudnn, warmup=100, rep=500, return_mode="median"))
    t_ours, t_theirs = statistics.median(ours), statistics.median(theirs)
    bench("cuDNN d128 s8192: harness Timer alone", f"{FLOP / t_ours / 1e6:.0f} TFLOP/s ({t_ours:.1f} µs)")
    bench("cuDNN d128 s8192: triton do_bench", f"{FLOP / t_theirs / 1e6:.0f} TFLOP/s ({t_theirs:.1f} µs)")
    bench("difference", f"{100 * (t_theirs - t_ours) / t_theirs:+.1f}% (positive: the harness is faster)")
    if args.regimes:
        _regimes(timer, cudnn, q, k, v)
    return 0


def _regimes(timer: Timer, cudnn, q, k, v) -> None:
    def efficient():
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v)

    def flash():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v)

    # An idle partner as long as the starting kernel is on this shape (about 5x cuDNN): the GPU waits.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    cycles = int(10_000_000 * 9.0 / start.elapsed_time(end))

    def idle():
        torch.cuda._sleep(cycles)

    def do_bench_us():
        with torch.cuda.stream(timer.stream):
            return 1000 * triton.testing.do_bench(cudnn, warmup=100, rep=1500, return_mode="median")

    regimes = {
        "do_bench back to back": do_bench_us,
        "Timer alone": lambda: timer.interleaved({"cudnn": cudnn}, 1.5, max_reps=600)["cudnn"].median,
        "Timer with FA2": lambda: timer.interleaved({"cudnn": cudnn, "x": flash}, 1.5, max_reps=600)["cudnn"].median,
        "Timer with efficient": lambda: timer.interleaved({"cudnn": cudnn, "x": efficient}, 1.5, max_reps=600)["cudnn"].median,
        "Timer with a 9 ms idle wait": lambda: timer.interleaved({"cudnn": cudnn, "x": idle}, 1.5, max_reps=600)["cudnn"].median,
    }
    for name, fn in regimes.items():
        fn()  # settle into the regime before sampling it
        with Sampler() as smp:
            us = fn()
        bench(f"cuDNN {name}", f"{FLOP / us / 1e6:.0f} TFLOP/s ({us:.1f} µs); SM clock median {smp.clock:.0f} MHz, "
                               f"power median {smp.power:.0f} W")


if __name__ == "__main__":
    sys.exit(main())
