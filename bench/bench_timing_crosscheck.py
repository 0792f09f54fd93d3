"""The harness's timing method against triton.testing.do_bench on the same cuDNN call (GPU).

Same process, same inputs, same [B, S, H, D] layout; alternating order, so clock and power state hit
both alike. Prints `BENCH` lines.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton.testing  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from harness.timing import Timer  # noqa: E402

B, H, S, D = 2, 16, 8192, 128
FLOP = 4 * B * H * S * S * D


def main() -> int:
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))

    def run():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v)

    timer = Timer(torch.device("cuda", 0), torch.cuda.Stream())
    ours, theirs = [], []
    for _ in range(3):
        ours.append(timer.interleaved({"cudnn": run}, budget_s=0.5, max_reps=200)["cudnn"].median)
        with torch.cuda.stream(timer.stream):
            theirs.append(1000 * triton.testing.do_bench(run, warmup=100, rep=500, return_mode="median"))
    t_ours, t_theirs = statistics.median(ours), statistics.median(theirs)
    print(f"BENCH {'cuDNN d128 s8192: harness Timer alone':<44} {FLOP / t_ours / 1e6:.0f} TFLOP/s ({t_ours:.1f} µs)")
    print(f"BENCH {'cuDNN d128 s8192: triton do_bench':<44} {FLOP / t_theirs / 1e6:.0f} TFLOP/s ({t_theirs:.1f} µs)")
    print(f"BENCH {'difference':<44} {100 * (t_theirs - t_ours) / t_theirs:+.1f}% (positive: the harness is faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
