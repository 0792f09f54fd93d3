"""The memory-bandwidth floor against a library kernel at the roofline (GPU).

Prints `BENCH` lines: measure_peaks (the copy, the read-only sum, the bf16 product) three times, other
ways of reading memory (torch sums of other sizes and dtypes, a Triton streaming read), and cuDNN's
decode over a long KV cache (the shape the floor once judged too-fast), its time by the harness's
Timer (minimum and median, as the GPU test and the verdict use them) and by do_bench, with the bytes
it must read, the rate that implies, and the floor at FLOOR_MARGIN over the peaks.
Usage: python bench/bench_floor.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from harness.tasks import get_task  # noqa: E402
from harness.timing import Timer, measure_peaks  # noqa: E402
from harness.worker import FLOOR_MARGIN  # noqa: E402


def bench(name: str, value: str) -> None:
    print(f"BENCH {name:<44} {value}", flush=True)


def median_s(fn, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1000.0)
    return statistics.median(times)


def reads(dev: torch.device) -> dict[str, float]:
    out = {}
    for name, n, dtype in (("sum fp32 1 GiB", 1 << 28, torch.float32), ("sum fp32 4 GiB", 1 << 30, torch.float32),
                           ("sum bf16 2 GiB", 1 << 30, torch.bfloat16), ("sum fp32 256 MiB", 1 << 26, torch.float32)):
        x = torch.ones(n, dtype=dtype, device=dev)
        out[name] = x.numel() * x.element_size() / median_s(lambda: x.sum(dtype=torch.float32)) / 1e9
        del x
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def _read(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            pid = tl.program_id(0)
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for start in range(pid * BLOCK, n, tl.num_programs(0) * BLOCK):
                offs = start + tl.arange(0, BLOCK)
                acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0, cache_modifier=".cg")
            tl.store(out_ptr + pid, tl.sum(acc, axis=0))

        x = torch.ones(1 << 28, dtype=torch.float32, device=dev)
        sms = torch.cuda.get_device_properties(dev).multi_processor_count
        for per_sm, block, warps in ((4, 4096, 8), (8, 2048, 4), (16, 1024, 4), (2, 8192, 16)):
            grid = sms * per_sm
            part = torch.empty(grid, dtype=torch.float32, device=dev)
            fn = lambda: _read[(grid,)](x, part, x.numel(), BLOCK=block, num_warps=warps)  # noqa: E731
            fn()
            torch.cuda.synchronize()
            assert abs(part.sum().item() - x.numel()) < 1e-3 * x.numel()
            out[f"triton read fp32 1 GiB {per_sm}/SM b{block} w{warps}"] = x.numel() * 4 / median_s(fn) / 1e9
    except Exception as e:  # noqa: BLE001 - a diagnostic: say what failed and go on
        print(f"triton read failed: {e!r}", flush=True)
    return out


def main() -> int:
    dev = torch.device("cuda", 0)
    peaks = []
    for i in range(3):
        p = measure_peaks(dev)
        peaks.append(p)
        bench(f"measure_peaks {i + 1}", f"copy {p['copy_gbps']:.0f} GB/s, read {p['read_gbps']:.0f} GB/s, "
                                         f"peak_gbps {p['peak_gbps']:.0f}, bf16 {p['peak_tflops_bf16']:.0f} TFLOP/s")
    for name, gbps in reads(dev).items():
        bench(name, f"{gbps:.0f} GB/s")
    task = get_task("attention", {})
    timer = Timer(dev, torch.cuda.Stream(dev))
    for b, hq, hkv, sk in ((16, 32, 32, 8192), (16, 32, 32, 16384), (32, 32, 8, 8192)):
        s = task.parse_spec(f"b={b},hq={hq},hkv={hkv},sq=1,sk={sk},d=128")
        q = torch.randn(b, hq, 1, 128, device=dev, dtype=torch.bfloat16)
        k, v = (torch.randn(b, hkv, sk, 128, device=dev, dtype=torch.bfloat16) for _ in range(2))
        gqa = hq != hkv

        def decode() -> None:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]):
                F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)

        smp = timer.interleaved({"x": decode}, budget_s=0.3)["x"]
        nbytes = task.min_bytes(s)
        try:
            import triton.testing
            with torch.cuda.stream(timer.stream):
                db = 1000 * triton.testing.do_bench(decode, warmup=50, rep=300, return_mode="median")
        except Exception as e:  # noqa: BLE001
            print(f"do_bench failed: {e!r}", flush=True)
            db = float("nan")
        for i, p in enumerate(peaks):
            floor = 1e6 * nbytes / (p["peak_gbps"] * 1e9 * FLOOR_MARGIN)
            bench(f"decode b{b} h{hq}x{hkv} s1x{sk} floor (peaks {i + 1})", f"{floor:.1f} µs")
        bench(f"decode b{b} h{hq}x{hkv} s1x{sk}",
              f"{nbytes / 1e9:.3f} GB; Timer min {min(smp.times_us):.1f} µs ({nbytes / min(smp.times_us) / 1e6:.3f} TB/s), "
              f"median {smp.median:.1f} µs ({nbytes / smp.median / 1e6:.3f} TB/s), n={len(smp.times_us)}; "
              f"do_bench {db:.1f} µs ({nbytes / db / 1e6:.3f} TB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
