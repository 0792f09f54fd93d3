"""harness.build: real nvcc builds of small kernels, the ptxas report, errors, the cache, timeouts."""

from __future__ import annotations

import stat
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from nvcc_support import NVCC, needs_nvcc

from harness.build import (
    BuildInputError,
    BuildOptions,
    arch_from_compute_cap,
    build,
    cache_key,
    cap_log,
    detect_arch,
    dynamic_symbols,
    find_nvcc,
    nvcc_flags,
    nvcc_version,
    parse_errors,
    parse_ptxas,
    validate_extra_flags,
)

KERNEL = textwrap.dedent(
    """\
    #include <cuda_runtime.h>
    __global__ void scale(const float* a, float* b, int n) {
      __shared__ float tile[256];
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      tile[threadIdx.x] = i < n ? a[i] : 0.f;
      __syncthreads();
      if (i < n) b[i] = 2.f * tile[threadIdx.x ^ 1];
    }
    extern "C" int kstui_test_entry(const float* a, float* b, int n, cudaStream_t stream) {
      scale<<<(n + 255) / 256, 256, 0, stream>>>(a, b, n);
      return (int)cudaGetLastError();
    }
    """
)

# 96 live floats per thread: at -maxrregcount=32 ptxas must spill to local memory.
SPILLING_KERNEL = textwrap.dedent(
    """\
    __global__ void pressure(float* out, int n) {
      float acc[96];
      #pragma unroll
      for (int j = 0; j < 96; ++j) acc[j] = out[j * n + threadIdx.x];
      #pragma unroll
      for (int r = 1; r < 4; ++r)
        #pragma unroll
        for (int j = 0; j < 96; ++j) acc[j] = acc[j] * acc[(j + r) % 96] + 1.f;
      float s = 0.f;
      #pragma unroll
      for (int j = 0; j < 96; ++j) s += acc[j];
      out[threadIdx.x] = s;
    }
    extern "C" int kstui_test_entry(float* out, int n) { pressure<<<1, 32>>>(out, n); return 0; }
    """
)

# Captured from `nvcc -Xptxas -v` (CUDA 13.0) on two kernels, one spilling, plus the older
# one-line format (CUDA 11/12: "bytes smem, bytes cmem[0]" on the "Used" line).
PTXAS_CAPTURED = """\
ptxas info    : Overriding maximum register limit 256 for '_Z3bigPfi' with  32 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z3bigPfi' for 'sm_90a'
ptxas info    : Function properties for _Z3bigPfi
    848 bytes stack frame, 2412 bytes spill stores, 2440 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 848 bytes cumulative stack size
ptxas info    : Compile time = 200.508 ms
ptxas info    : Compiling entry function '_Z3addPKfPfi' for 'sm_90a'
ptxas info    : Function properties for _Z3addPKfPfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem
ptxas info    : Compile time = 2.836 ms
"""
PTXAS_OLD_FORMAT = """\
ptxas info    : Compiling entry function '_Z4testPf' for 'sm_80'
ptxas info    : Function properties for _Z4testPf
    16 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 64 registers, 49152 bytes smem, 360 bytes cmem[0]
ptxas info    : Compiling entry function '_Z5otherPf' for 'sm_80'
ptxas info    : Function properties for _Z5otherPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 128 registers, 4096 bytes smem, 360 bytes cmem[0]
"""


def _write(tmp_path: Path, text: str, name: str = "kernel.cu") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _counting_nvcc(directory: Path) -> tuple[Path, Path]:
    """A shim that records every compile (an -o argument) and then runs the real nvcc."""
    log = directory / "compiles.log"
    shim = _executable(
        directory / "nvcc",
        f'#!/bin/sh\ncase " $* " in *" -o "*) echo compile >> "{log}";; esac\nexec "{NVCC}" "$@"\n',
    )
    return shim, log


def _compiles(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.fixture(scope="module", autouse=True)
def _unconfined_compiler():
    """The shims here write beside themselves and report their pids: the compiler runs unconfined
    (tests/test_build_confinement.py builds inside the sandbox)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KSTUI_WORKER_SANDBOX", "off")
        yield


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    """One real build of KERNEL through the counting shim, shared by the tests that only read it."""
    if NVCC is None:
        pytest.skip("nvcc not found")
    root = tmp_path_factory.mktemp("built")
    shim, log = _counting_nvcc(root)
    source = _write(root, KERNEL)
    options = BuildOptions(arch="sm_90a", cache_dir=root / "cache", nvcc=str(shim))
    report, library = build(source, ["kstui_test_entry"], options)
    return source, options, report, library, log


# ---------------------------------------------------------------------------------------------------
# Real builds


@needs_nvcc
def test_build_produces_library_and_ptxas_report(built):
    source, options, report, library, _ = built
    assert report.ok, report.log
    assert library is not None and library.is_file()
    assert library.is_relative_to(options.cache_dir)
    assert not report.cached
    assert report.registers is not None and 0 < report.registers <= 255
    assert report.smem_bytes == 256 * 4
    assert report.spills == 0 and report.stack_bytes == 0
    assert "ptxas info" in report.log
    assert report.nvcc == nvcc_version(NVCC)
    assert ("kstui_test_entry" in {name for kind, name in dynamic_symbols(library, defined=True) if kind == "T"})
    # Nothing was written next to the user's source but the source itself and the test's own files.
    assert sorted(p.name for p in source.parent.iterdir()) == ["cache", "compiles.log", "kernel.cu", "nvcc"]


@needs_nvcc
def test_flags_are_the_documented_ones(built):
    _, _, report, _, _ = built
    flags = report.flags
    for flag in ("-O3", "-std=c++17", "--shared", "-lineinfo", "-gencode=arch=compute_90a,code=sm_90a"):
        assert flag in flags
    assert flags[flags.index("-cudart") + 1] == "shared"
    assert flags[flags.index("-Xcompiler") + 1] == "-fPIC"
    assert flags[flags.index("-Xptxas") + 1] == "-v"
    assert "--use_fast_math" not in flags
    assert "--use_fast_math" in nvcc_flags("sm_90a", BuildOptions(fast_math=True))
    assert "-gencode=arch=compute_100a,code=sm_100a" in nvcc_flags("sm_100a", BuildOptions())


@needs_nvcc
def test_unchanged_kernel_is_never_rebuilt(built, tmp_path):
    source, options, first, library, log = built
    assert _compiles(log) == 1
    again, library2 = build(source, ["kstui_test_entry"], options)
    assert again.cached and again.ok
    assert library2 == library
    assert _compiles(log) == 1  # nvcc was not asked to compile
    assert again.registers == first.registers and again.smem_bytes == first.smem_bytes
    assert again.seconds < first.seconds
    # The same bytes under another directory are the same kernel.
    copy = tmp_path / source.name
    copy.write_bytes(source.read_bytes())
    assert build(copy, ["kstui_test_entry"], options)[0].cached
    assert _compiles(log) == 1


@needs_nvcc
def test_changed_source_is_rebuilt(built, tmp_path):
    source, options, _, library, log = built
    before = _compiles(log)
    changed = _write(tmp_path, KERNEL.replace("2.f *", "3.f *"))
    report, library2 = build(changed, ["kstui_test_entry"], options)
    assert report.ok and not report.cached
    assert library2 != library
    assert _compiles(log) == before + 1


def test_cache_key_covers_every_input():
    base = dict(source_bytes=b"k", source_name="k.cu", flags=["-O3"], version="V13.0.88", arch="sm_90a",
                entry_symbols=["e"])
    keys = {cache_key(**base)}
    for change in (
        {"source_bytes": b"k2"},
        {"source_name": "other.cu"},
        {"flags": ["-O3", "-maxrregcount=64"]},
        {"version": "V12.8.93"},
        {"arch": "sm_100a"},
        {"entry_symbols": ["f"]},
    ):
        keys.add(cache_key(**{**base, **change}))
    assert len(keys) == 7
    assert cache_key(**base) == cache_key(**base)
    # Flags come from the options, so fast math, extra flags and arch all reach the key.
    assert nvcc_flags("sm_90a", BuildOptions()) != nvcc_flags("sm_90a", BuildOptions(fast_math=True))
    assert nvcc_flags("sm_90a", BuildOptions()) != nvcc_flags("sm_90a", BuildOptions(extra_flags=["-DTILE=64"]))


@needs_nvcc
def test_corrupt_or_partial_cache_entry_is_rebuilt(built):
    source, options, _, library, log = built
    before = _compiles(log)
    library.write_bytes(library.read_bytes()[:100])  # a torn write
    report, library2 = build(source, ["kstui_test_entry"], options)
    assert report.ok and not report.cached
    assert _compiles(log) == before + 1
    assert library2.stat().st_size > 100
    (library2.parent / "report.json").write_text("{not json")
    assert not build(source, ["kstui_test_entry"], options)[0].cached
    assert build(source, ["kstui_test_entry"], options)[0].cached
    assert _compiles(log) == before + 2


@needs_nvcc
def test_concurrent_builds_of_one_key_are_safe(tmp_path):
    source = _write(tmp_path, KERNEL.replace("2.f *", "5.f *"))
    options = BuildOptions(arch="sm_90a", cache_dir=tmp_path / "cache")
    results: list = []

    def one() -> None:
        results.append(build(source, ["kstui_test_entry"], options))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and all(r.ok for r, _ in results)
    libraries = {lib for _, lib in results}
    assert len(libraries) == 1
    library = libraries.pop()
    assert "kstui_test_entry" in {n for _, n in dynamic_symbols(library, defined=True)}
    entries = [p for p in library.parent.parent.iterdir()]
    assert entries == [library.parent]  # no staging or trash left behind
    assert build(source, ["kstui_test_entry"], options)[0].cached


@needs_nvcc
def test_spilling_kernel_reports_spills(tmp_path):
    source = _write(tmp_path, SPILLING_KERNEL)
    options = BuildOptions(arch="sm_90a", cache_dir=tmp_path / "cache", extra_flags=["-maxrregcount=32"])
    report, library = build(source, ["kstui_test_entry"], options)
    assert report.ok, report.log
    assert report.registers is not None and report.registers <= 32
    assert report.spills > 0
    assert report.stack_bytes and report.stack_bytes > 0
    assert "-maxrregcount=32" in report.flags


# ---------------------------------------------------------------------------------------------------
# Errors


@needs_nvcc
@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("#include <cuda_runtime.h>\n__global__ void f(int* p) { p[0] = undefined_thing; }\n", 2, "undefined"),
        ("#include <cuda_runtime.h>\n#include \"beside_me.h\"\n", 2, "beside_me.h"),
        ("template <typename T> void q(T) { static_assert(sizeof(T) == 1, \"boom\"); }\nvoid z() { q(1.0); }\n",
         1, "static assertion"),
    ],
    ids=["front-end", "host-compiler", "template"],
)
def test_compile_errors_have_file_and_line(tmp_path, text, line, needle):
    (tmp_path / "beside_me.h").write_text("#pragma once\n")  # exists beside the source, yet not found
    source = _write(tmp_path, text, "my_kernel.cu")
    report, library = build(source, [], BuildOptions(arch="sm_90a", cache_dir=tmp_path / "cache"))
    assert not report.ok and library is None
    assert report.errors, report.log
    first = report.errors[0]
    assert first.file == str(source)
    assert first.line == line
    assert needle in first.message
    assert needle in report.log
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.so"))


@needs_nvcc
def test_link_error_and_missing_entry_point(tmp_path):
    source = _write(tmp_path, 'extern "C" int helper();\nextern "C" int kstui_test_entry() { return helper(); }\n')
    report, library = build(source, ["kstui_test_entry"], BuildOptions(arch="sm_90a", cache_dir=tmp_path / "c"))
    assert not report.ok and library is None
    assert any(e.file == "<link>" and "helper" in e.message for e in report.errors), report.errors

    mangled = _write(tmp_path, "int kstui_test_entry() { return 0; }\n", "mangled.cu")
    report, library = build(mangled, ["kstui_test_entry"], BuildOptions(arch="sm_90a", cache_dir=tmp_path / "c"))
    assert not report.ok and library is None
    assert "extern \"C\"" in report.errors[0].message and "kstui_test_entry" in report.errors[0].message


def test_parse_errors_on_captured_output():
    log = textwrap.dedent(
        """\
        k.cu(12): error: identifier "x" is undefined
          int y = x;
                  ^
        k.cu(30): catastrophic error: cannot open source file "foo.h"
        /usr/local/cuda/include/cuda_fp16.hpp(99): error #20: something in a header
        k.cu:7:5: error: 'z' was not declared in this scope
        k.cu:1:10: fatal error: nope.h: No such file or directory
        k.cu(40): warning #177-D: variable "w" was declared but never referenced
        /usr/bin/ld: /tmp/tmpxft_0-11_k.o: in function `entry':
        tmpxft_0-6_k.cudafe1.cpp:(.text+0x11): undefined reference to `helper'
        collect2: error: ld returned 1 exit status
        ptxas error   : Entry function '_Z1fPf' uses too much shared data (0x445c0 bytes, 0x38c00 max)
        nvcc fatal   : Unknown option '-bogus'
        """
    )
    errors = parse_errors(log, "k.cu", "/home/u/work/k.cu")
    got = [(e.file, e.line, e.message) for e in errors]
    assert got == [
        ("/home/u/work/k.cu", 12, 'identifier "x" is undefined'),
        ("/home/u/work/k.cu", 30, 'cannot open source file "foo.h"'),
        ("/usr/local/cuda/include/cuda_fp16.hpp", 99, "something in a header"),
        ("/home/u/work/k.cu", 7, "'z' was not declared in this scope"),
        ("/home/u/work/k.cu", 1, "nope.h: No such file or directory"),
        ("<link>", 0, "undefined reference to `helper'"),
        ("<ptxas>", 0, "Entry function '_Z1fPf' uses too much shared data (0x445c0 bytes, 0x38c00 max)"),
        ("<nvcc>", 0, "Unknown option '-bogus'"),
    ]


def test_timeout_kills_the_whole_compiler_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    fake = _executable(
        tmp_path / "slow-nvcc",
        textwrap.dedent(
            f"""\
            #!/bin/sh
            if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0; fi
            sleep 120 &
            echo $! > "{pidfile}"
            wait
            """
        ),
    )
    source = _write(tmp_path, KERNEL)
    started = time.monotonic()
    report, library = build(source, [], BuildOptions(arch="sm_90a", cache_dir=tmp_path / "c", nvcc=str(fake),
                                                     timeout_s=1.0))
    assert time.monotonic() - started < 30
    assert not report.ok and library is None
    assert report.errors[0].message == "compile timed out after 1 s"
    assert report.log.splitlines()[0] == "compile timed out after 1 s"
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the compiler's child process survived the timeout"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


# ---------------------------------------------------------------------------------------------------
# Parsing, flags, discovery


def test_parse_ptxas_captured_output():
    stats = parse_ptxas(PTXAS_CAPTURED)
    assert (stats.registers, stats.spills, stats.smem_bytes, stats.stack_bytes) == (32, 2412 + 2440, 1024, 848)
    old = parse_ptxas(PTXAS_OLD_FORMAT)
    assert (old.registers, old.spills, old.smem_bytes, old.stack_bytes) == (128, 12, 49152, 16)
    none = parse_ptxas("")
    assert (none.registers, none.spills, none.smem_bytes, none.stack_bytes) == (None, 0, None, None)
    no_smem = parse_ptxas("ptxas info    : Used 8 registers, used 0 barriers\n")
    assert (no_smem.registers, no_smem.smem_bytes) == (8, 0)


@pytest.mark.parametrize(
    "flags",
    [
        ["-maxrregcount=64"], ["--maxrregcount=128"], ["-maxrregcount", "96"], ["-DTILE"], ["-DTILE=128"],
        ["-DSCALE=0.5f"], ["-DX="], ["-Xptxas=-O3"], ["-Xptxas=-O3,-warn-spills"], ["-Xptxas", "-warn-spills"],
        ["--ptxas-options=-v"], ["-Xptxas", "--allow-expensive-optimizations=true"], ["--extra-device-vectorization"],
        ["--expt-relaxed-constexpr"], ["-Xptxas", "-dlcm=cg"],
    ],
)
def test_allowed_extra_flags(flags):
    assert validate_extra_flags(flags) == flags


@pytest.mark.parametrize(
    "flag",
    [
        "-lcublas", "-L/opt/lib", "-I/usr/include/cutlass", "-isystem/x", "-include", "-includedlfcn.h",
        "--pre-include=x.h", "-Xlinker", "-Xlinker=-ldl", "-Wl,-ldl", "-Xcompiler", "-Xcompiler=-include,x.h",
        "--compiler-options=-O0", "-ccbin=/tmp/evil", "--use_fast_math", "-use_fast_math", "--ftz=true",
        "--prec-div=false", "--prec-sqrt=false", "--fmad=true", "-o", "-o/tmp/x.so", "--output-file=x",
        "--keep", "-arch=sm_80", "-gencode=arch=compute_80,code=sm_80", "-DX=dlopen", "-D X", "-DX=1;-ldl",
        "-Xptxas=-O3,--foo", "-Xcicc", "-G", "--default-stream=per-thread", "-rdc=true", "-std=c++20",
        "-maxrregcount=64 -ldl",
    ],
)
def test_rejected_extra_flags_name_the_flag(flag):
    with pytest.raises(BuildInputError) as info:
        validate_extra_flags([flag])
    assert repr(flag) in str(info.value) or flag in str(info.value)
    assert "\n" not in str(info.value)


def test_extra_flags_must_be_a_list():
    with pytest.raises(BuildInputError, match="list of strings"):
        validate_extra_flags("-maxrregcount=64 -ldl")
    with pytest.raises(BuildInputError, match="not a string"):
        validate_extra_flags([64])


def test_ptxas_pair_is_checked():
    with pytest.raises(BuildInputError, match="-Xptxas --evil"):
        validate_extra_flags(["-Xptxas", "--evil"])
    with pytest.raises(BuildInputError, match="-maxrregcount"):
        validate_extra_flags(["-maxrregcount", "-ldl"])


def test_bad_input_is_one_line(tmp_path):
    with pytest.raises(BuildInputError, match="cannot read"):
        build(tmp_path / "missing.cu", [], BuildOptions(cache_dir=tmp_path))
    source = _write(tmp_path, KERNEL)
    with pytest.raises(BuildInputError, match="nvcc not found"):
        build(source, [], BuildOptions(nvcc=str(tmp_path / "no-nvcc"), cache_dir=tmp_path))
    with pytest.raises(BuildInputError, match="bad architecture"):
        build(source, [], BuildOptions(arch="compute_90", cache_dir=tmp_path, nvcc=sys.executable))


def test_arch_detection(tmp_path, monkeypatch):
    assert arch_from_compute_cap(9, 0) == "sm_90a"
    assert arch_from_compute_cap(10, 0) == "sm_100a"
    assert arch_from_compute_cap(8, 6) == "sm_86"
    assert arch_from_compute_cap(12, 0) == "sm_120"
    monkeypatch.setenv("KSTUI_ARCH", "sm_89")
    assert detect_arch() == "sm_89"
    monkeypatch.setenv("KSTUI_ARCH", "sm89; rm -rf /")
    with pytest.raises(BuildInputError):
        detect_arch()
    monkeypatch.delenv("KSTUI_ARCH")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_arch() == "sm_90a"  # no nvidia-smi: Hopper
    smi = _executable(tmp_path / "nvidia-smi", "#!/bin/sh\necho 10.0\necho 10.0\n")
    assert detect_arch() == "sm_100a"
    _executable(smi, "#!/bin/sh\necho 8.0\n")
    assert detect_arch() == "sm_80"
    _executable(smi, "#!/bin/sh\nexit 9\n")
    assert detect_arch() == "sm_90a"


def test_nvcc_discovery_order(tmp_path, monkeypatch):
    fake = _executable(tmp_path / "my-nvcc", "#!/bin/sh\necho 'Cuda compilation tools, release 1.2, V1.2.3'\n")
    monkeypatch.setenv("KSTUI_NVCC", str(fake))
    assert find_nvcc(None) == str(fake)
    assert nvcc_version(str(fake)) == "V1.2.3"
    assert find_nvcc(str(fake)) == str(fake)


def test_cap_log_keeps_head_and_tail():
    text = "first line\n" + "x" * 200_000 + "\nlast line"
    capped = cap_log(text)
    assert len(capped.encode()) < 70_000
    assert capped.startswith("first line") and capped.endswith("last line")
    assert "omitted" in capped
    assert cap_log("short") == "short"


def test_the_gpu_and_nvcc_are_asked_once_per_process(tmp_path, monkeypatch):
    """A serving harness builds and checks every request: the tools' answers are kept while the
    binaries stay the same, and a failed query is asked again."""
    log = tmp_path / "calls"
    monkeypatch.delenv("KSTUI_ARCH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    smi = _executable(tmp_path / "nvidia-smi", f"#!/bin/sh\necho smi >> {log}\nexit 3\n")
    assert detect_arch() == "sm_90a" and detect_arch() == "sm_90a"
    assert log.read_text().count("smi") == 2  # a failure is not kept
    _executable(smi, f"#!/bin/sh\necho smi >> {log}\necho 8.6\n")
    assert [detect_arch() for _ in range(3)] == ["sm_86"] * 3
    assert log.read_text().count("smi") == 3
    nvcc = _executable(tmp_path / "nvcc", f"#!/bin/sh\necho nvcc >> {log}\necho 'Cuda compilation tools, V13.0.88'\n")
    assert nvcc_version(str(nvcc)) == nvcc_version(str(nvcc)) == "V13.0.88"
    assert log.read_text().count("nvcc") == 1
    _executable(nvcc, f"#!/bin/sh\necho nvcc >> {log}\necho 'Cuda compilation tools, release 13.1, V13.1.2'\n")
    assert nvcc_version(str(nvcc)) == "V13.1.2"  # an upgraded nvcc is asked again
