#!/usr/bin/env bash
# The one-call GPU run: environment, GPU tests, harness benchmarks; a short table last.
# Runs on the device machine from the repository root with torch alone (no install needed):
#   bash bench/gpu_check.sh [env] [tests] [reference] [bench] [warm] [fast] [profile] [shards] [quick] [full] [exhaustive]
#                           [reject] [grid] [specs] [specs-wrong] [specs-bench] [confine] [confine-full] [session]
#                           (default: env tests bench)
# specs: the KernelBench examples and `kstui new`'s kernel pass in full; specs-wrong: the spec tasks'
# wrong-kernel suite and a prepared worker on a spec task; specs-bench: their figures (docs/BENCHMARKS.md).
# fast: warm's evaluations end to end with cuDNN judged in place of the kernel (a kernel at baseline speed);
# 15 s pauses (PAUSE=S for others): after 8 s the prepared worker was still warming up (3-4 s of worker
# wait, 2026-12-04).
# reject: request to verdict for every wrong kernel of tests/kernels/ through harness serve (median, max).
# grid: the starting kernel on the full grid, every baseline re-timed: each scenario's baseline of record
#   and the speedup against it; FA4_SITE=DIR adds DIR as the worker's site directory (FA4 unpacked there).
# confine, confine-full: the worker's sandbox per evaluation, quick or full, cold and prepared workers, with
#   bubblewrap ($KSTUI_BWRAP, else bwrap on PATH) and without (bench/bench_confine.py).
# session: `kstui run --headless` on the GPU against the loopback Messages server, scripted versions judged
#   by the real harness (tests/test_session_gpu.py); needs kstui's dependencies (anthropic, textual,
#   gitpython) importable, e.g. carried as wheels.
# On a machine without a registry (the lent GPU): carry bubblewrap as Debian's .deb (`apt-get download
#   bubblewrap`; there `dpkg -x` it and set KSTUI_BWRAP) and kstui's dependencies as cp312 wheels (`pip
#   download --no-deps --only-binary=:all: --python-version 3.12 …`; there `pip install --target DIR` and
#   PYTHONPATH=DIR). A fresh machine's first worker takes about 30 s: give `session` 400 s or more.
# Full logs and JSON go to $OUT (or ./gpu-out).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export KSTUI_CACHE_DIR=${KSTUI_CACHE_DIR:-/tmp/kstui-cache}
PY=${PY:-python3}
stages=${*:-env tests bench}
table=()

note() { table+=("$(printf '%-44s %s' "$1" "$2")"); }

for stage in $stages; do
  case $stage in
    env)
      { nvidia-smi; $PY -c 'import torch,sys; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name())'; nvcc --version | tail -1; } > "$OUT/env.txt" 2>&1
      note "device" "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
      ;;
    tests)
      $PY -m pytest -v -p no:cacheprovider tests/test_gpu_harness.py tests/test_reference_accuracy.py tests/test_timing.py --durations 15 --timeout 900 \
        > "$OUT/gpu-tests.txt" 2>&1
      note "GPU tests (gpu_harness, reference_accuracy, timing)" "$(tail -1 "$OUT/gpu-tests.txt")"
      ;;
    reference)
      $PY bench/bench_reference.py > "$OUT/reference.txt" 2>&1
      while IFS= read -r line; do table+=("$line"); done < <(grep -E '^(BENCH|BAD) ' "$OUT/reference.txt" | sed 's/^BENCH //')
      ;;
    bench)
      $PY bench/bench_harness.py --out "$OUT" > "$OUT/bench.txt" 2>&1
      while IFS= read -r line; do table+=("$line"); done < <(grep '^BENCH ' "$OUT/bench.txt" | sed 's/^BENCH //')
      ;;
    warm)
      $PY bench/bench_warm.py --out "$OUT" --full > "$OUT/warm.txt" 2>&1
      while IFS= read -r line; do table+=("$line"); done < <(grep '^BENCH ' "$OUT/warm.txt" | sed 's/^BENCH //')
      ;;
    fast)
      # The stand-in worker runs from bench/, which a confined worker does not see.
      KSTUI_WORKER_SANDBOX=off $PY bench/bench_warm.py --out "$OUT/fast" --full --pause "${PAUSE:-15}" --stand-in cudnn > "$OUT/fast.txt" 2>&1
      while IFS= read -r line; do table+=("cuDNN stand-in: $line"); done < <(grep '^BENCH ' "$OUT/fast.txt" | sed 's/^BENCH //')
      ;;
    profile)
      { $PY bench/profile_judge.py --selection quick --top 0
        for who in flash cudnn; do
          $PY bench/profile_judge.py --selection quick --stand-in $who --top 0
          $PY bench/profile_judge.py --selection full --stand-in $who --top 0 --json "$OUT/profile-$who-full.json"
        done; } > "$OUT/profile.txt" 2>&1
      while IFS= read -r line; do table+=("$line"); done < <(grep '^PROFILE ' "$OUT/profile.txt" | sed 's/^PROFILE //')
      ;;
    shards)
      $PY bench/bench_shards.py --out "$OUT" > "$OUT/shards.txt" 2>&1
      while IFS= read -r line; do table+=("$line"); done < <(grep '^BENCH ' "$OUT/shards.txt" | sed 's/^BENCH //')
      ;;
    specs|specs-wrong)
      if [ "$stage" = specs ]; then select="example or kstui_new"; else select="wrong or prepared"; fi
      $PY -m pytest -v -p no:cacheprovider tests/test_spec_gpu.py -k "$select" --durations 30 --timeout 1800 \
        > "$OUT/$stage-tests.txt" 2>&1
      note "GPU tests ($stage)" "$(tail -1 "$OUT/$stage-tests.txt")"
      ;;
    specs-bench)
      $PY bench/bench_specs.py --out "$OUT" > "$OUT/specs-bench.txt" 2>&1
      while IFS= read -r line; do table+=("$line"); done < <(grep '^BENCH ' "$OUT/specs-bench.txt" | sed 's/^BENCH //')
      ;;
    reject)
      $PY bench/bench_reject.py --out "$OUT/reject" > "$OUT/reject.txt" 2>&1
      while IFS= read -r line; do table+=("$line"); done < <(grep '^BENCH ' "$OUT/reject.txt" | sed 's/^BENCH //')
      ;;
    grid)
      $PY bench/bench_grid.py ${FA4_SITE:+--site "$FA4_SITE"} --out "$OUT" > "$OUT/grid-table.txt" 2>&1
      while IFS= read -r line; do table+=("$line"); done < <(grep -E '^GRID (device|records|geomean|no result)' "$OUT/grid-table.txt")
      ;;
    confine|confine-full)
      bw=${KSTUI_BWRAP:-$(command -v bwrap)}
      if [ -z "$bw" ]; then note "$stage" "skipped: no bubblewrap (set KSTUI_BWRAP)"; continue; fi
      note "bubblewrap" "$bw: $("$bw" --version 2>&1)"
      if [ "$stage" = confine ]; then args=(--selection quick); else args=(--selection full --cli 0 --prepared 1 --pause 45); fi
      KSTUI_BWRAP=$bw $PY bench/bench_confine.py --out "$OUT" "${args[@]}" > "$OUT/$stage.txt" 2>&1
      while IFS= read -r line; do table+=("$line"); done < <(grep -E '^(BENCH|BAD) ' "$OUT/$stage.txt" | sed 's/^BENCH //')
      ;;
    session)
      KSTUI_SESSION_OUT="$OUT/session" $PY -m pytest -v -s -p no:cacheprovider tests/test_session_gpu.py --timeout 600 \
        > "$OUT/session.txt" 2>&1
      note "GPU session (kstui run --headless)" "$(tail -1 "$OUT/session.txt")"
      while IFS= read -r line; do table+=("$line"); done < <(grep '^SESSION ' "$OUT/session.txt")
      ;;
    quick|full|exhaustive)
      for k in workspace/flash_fwd.cu workspace/rmsnorm.cu; do
        n=$(basename "$k" .cu)
        t0=$(date +%s%3N)
        $PY -m harness eval "$k" --scenarios "$stage" --json "$OUT/$n-$stage.json" > "$OUT/$n-$stage.txt" 2>&1
        rc=$?
        note "$n $stage (rc $rc, $(( $(date +%s%3N) - t0 )) ms)" "$(tail -1 "$OUT/$n-$stage.txt" | cut -c1-150)"
      done
      ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
printf '%s\n' "${table[@]}"
