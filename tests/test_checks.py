"""harness.checks: the static source checks (every forbidden pattern, macro tricks) and the binary checks."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from nvcc_support import NVCC, needs_nvcc

from harness.build import BuildInputError, BuildOptions, build
from harness.checks import (
    SOURCE_CHECKS,
    binary_checks,
    imported_symbol_family,
    include_problem,
    lex,
    parse_preprocessed,
    source_checks,
    splice,
)

# The preprocessor pass only adds findings to the source-text pass, so patterns that need no macro
# expansion are tested on the source text alone (fast); macro tricks and includes use nvcc.
SOURCE_TEXT_ONLY = BuildOptions(nvcc="/nonexistent/nvcc")

CLEAN = textwrap.dedent(
    r"""
    // A realistic clean kernel. Comments may say dlopen, system("x"), #include "local.h" or cublasGemmEx.
    /* fopen(getenv("HOME")) in a block comment is fine too */
    #include <cuda_runtime.h>
    #include <cuda_bf16.h>
    #include <cuda_fp16.h>
    #include <cuda.h>
    #include <cooperative_groups.h>
    #include <mma.h>
    #include <cuda/std/limits>
    #include <cstdint>
    #include <cstdio>
    #include <cmath>
    #include <cassert>
    #include <functional>
    #include <type_traits>
    #include "cuda_pipeline.h"

    #define CHECK_CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) return (int)e_; } while (0)
    #define TILE 128

    namespace cg = cooperative_groups;
    static const char* kMessage = "if dlopen or system() fails, read the manual";
    static const char* kRaw = R"delim(a raw string with )" and "quotes" inside)delim";

    __device__ __forceinline__ float load_nc(const float* p) {
      float x;
      asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(x) : "l"(p));
      return x;
    }

    // Hopper-style PTX: none of it may look like host assembly.
    __device__ void ptx_zoo(unsigned smem, const void* gmem, unsigned long long* bar, float* acc) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(smem), "l"(gmem));
      asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %0, 0;\n @p mbarrier.arrive.expect_tx.shared::cta.b64 _, [%1], 128;\n}\n"
                   :: "r"(smem), "r"(smem));
      asm volatile("wgmma.fence.sync.aligned;\n" "wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("fence.proxy.async.shared::cta;\n" "elect.sync _|p, 0xffffffff;" ::: "memory");
      asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(acc[0]));
      (void)bar;
    }

    template <int N>
    __global__ void __launch_bounds__(256) scale(const float* __restrict__ a, float* b, int n) {
      __shared__ __align__(16) float tile[TILE];
      [[maybe_unused]] auto block = cg::this_thread_block();
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      const unsigned long long big = 1'000'000;
      const char quote = '\'';
      if (i < n) {
        tile[threadIdx.x % TILE] = load_nc(a + i);
        b[i] = tile[threadIdx.x % TILE] * N + (big > 0 ? 0.f : 1.f) + (quote == 'x');
      }
    }

    typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                    const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                    CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

    extern "C" int kstui_test_entry(const float* a, float* b, int n, cudaStream_t stream) {
      assert(n >= 0);
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult query;
      CHECK_CUDA(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &query));
      auto twice = std::bind(std::multiplies<int>(), 2, std::placeholders::_1);
      scale<2><<<(n + 255) / 256, 256, 0, stream>>>(a, b, twice(n) / 2);
      if (cudaGetLastError() != cudaSuccess) { fprintf(stderr, "launch failed: %s\n", kMessage); return 1; }
      (void)kRaw;
      return 0;
    }
    """
)

# dlopen spelled only by token pasting: the source text never says it.
HIDDEN_DLOPEN = textwrap.dedent(
    """\
    #include <cuda_runtime.h>
    #define CAT_(a, b) a##b
    #define CAT(a, b) CAT_(a, b)
    #define LOADER CAT(d, CAT(l, op##en))
    extern "C" void* LOADER(const char*, int);
    extern "C" int kstui_test_entry() {
      void* handle = LOADER(nullptr, 2);
      return handle ? 0 : 1;
    }
    """
)


# Exports a data symbol, resolves two symbols from whatever the process has loaded (weak imports) and
# defines the harness's own timing call.
IMPOSTOR = textwrap.dedent(
    """\
    extern "C" int kstui_data_symbol = 1;
    extern "C" __attribute__((weak)) int cudnnCreate(void**);
    extern "C" __attribute__((weak)) int kstui_mystery(void);
    extern "C" cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) { *ms = 1e-3f; return cudaSuccess; }
    extern "C" int kstui_second_entry() { return (cudnnCreate ? cudnnCreate(nullptr) : 0) + (kstui_mystery ? 1 : 0); }
    """
)


def _checks(tmp_path: Path, text: str, options: BuildOptions | None = None, name: str = "kernel.cu") -> dict:
    path = tmp_path / name
    path.write_text(text)
    checks = source_checks(path, options)
    assert [c.name for c in checks] == list(SOURCE_CHECKS)
    return {c.name: c for c in checks}


def _failed(checks: dict) -> set[str]:
    return {name for name, c in checks.items() if not c.ok}


# ---------------------------------------------------------------------------------------------------
# The clean kernel


@needs_nvcc
def test_clean_kernel_passes_every_source_check(tmp_path):
    checks = _checks(tmp_path, CLEAN)
    assert not _failed(checks), {n: c.detail for n, c in checks.items()}


# Small enough to build in a couple of seconds; uses the host-side calls a kernel legitimately makes.
CLEAN_SMALL = textwrap.dedent(
    """\
    #include <cuda_runtime.h>
    #include <cstdio>
    #include <cstring>
    __global__ void fill(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = i; }
    extern "C" int kstui_test_entry(float* p, int n, cudaStream_t stream) {
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult query;
      if (cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &query) != cudaSuccess) return 1;
      char note[32];
      std::memset(note, 0, sizeof note);
      std::snprintf(note, sizeof note, "n=%d", n);
      fill<<<(n + 255) / 256, 256, 0, stream>>>(p, n);
      cudaError_t err = cudaGetLastError();
      if (err != cudaSuccess) std::fprintf(stderr, "%s: %s\\n", note, cudaGetErrorString(err));
      return (int)err;
    }
    """
)


@needs_nvcc
def test_clean_kernel_builds_and_passes_binary_checks(tmp_path):
    (tmp_path / "kernel.cu").write_text(CLEAN_SMALL)
    assert not _failed(_checks(tmp_path, CLEAN_SMALL))
    report, library = build(tmp_path / "kernel.cu", ["kstui_test_entry"],
                            BuildOptions(arch="sm_90a", cache_dir=tmp_path / "cache"))
    assert report.ok, report.log
    checks = {c.name: c for c in binary_checks(library, ["kstui_test_entry"])}
    assert checks["entry-point"].ok, checks["entry-point"].detail
    assert checks["imported-symbols"].ok, checks["imported-symbols"].detail
    assert checks["exported-symbols"].ok, checks["exported-symbols"].detail


# ---------------------------------------------------------------------------------------------------
# Every forbidden pattern, each on a line of its own: the detail names file:line and the text.

FORBIDDEN_CALLS = {
    "dlopen": 'void* h = dlopen("libx.so", 2);',
    "dlsym": "void* f = dlsym((void*)0, nullptr);",
    "dlmopen": "void* h = dlmopen(0, nullptr, 2);",
    "system": 'int r = system("ls");',
    "std::system": 'int r = std::system("ls");',
    "global ::system": 'int r = ::system("ls");',
    "system by address": "auto p = &system;",
    "popen": 'auto f = popen("ls", "r");',
    "fork": "int pid = fork();",
    "vfork": "int pid = vfork();",
    "execve": "execve(nullptr, nullptr, nullptr);",
    "execlp": 'execlp("sh", "sh", nullptr);',
    "posix_spawn": "posix_spawn(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);",
    "posix_spawnp": "posix_spawnp(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);",
    "fopen": 'FILE* f = fopen("/tmp/x", "r");',
    "freopen": 'freopen("/tmp/x", "r", stdin);',
    "open": 'int fd = open("/tmp/x", 0);',
    "creat": 'int fd = creat("/tmp/x", 0);',
    "openat": 'int fd = openat(0, "/tmp/x", 0);',
    "ifstream": 'std::ifstream in("/tmp/x");',
    "ofstream": 'std::ofstream out("/tmp/x");',
    "fstream": "std::fstream io;",
    "filesystem": "auto p = std::filesystem::current_path();",
    "socket": "int s = socket(2, 1, 0);",
    "connect": "connect(0, nullptr, 0);",
    "bind": "::bind(0, nullptr, 0);",
    "getenv": 'const char* v = getenv("SEED");',
    "std::getenv": 'const char* v = std::getenv("SEED");',
    "secure_getenv": 'const char* v = secure_getenv("SEED");',
    "environ": "extern char** environ; char** e = environ;",
    "syscall": "long r = syscall(39);",
    "ptrace": "ptrace(0, 0, nullptr, nullptr);",
    "mprotect": "mprotect(nullptr, 4096, 7);",
    "kill the parent": "kill(getppid(), 9);",
    "signal handler": "signal(11, nullptr);",
    "sigaction": "struct sigaction sa; sigaction(11, &sa, nullptr);",
    "alarm": "alarm(1);",
    "setenv": 'setenv("CUDA_VISIBLE_DEVICES", "1", 1);',
    "remove a file": 'std::remove("/tmp/baselines.json");',
    "rename a file": 'rename("/tmp/a", "/tmp/b");',
    "hand-registered fatbin": "void** h = __cudaRegisterFatBinary(nullptr);",
    "entry point of cuGetProcAddress":
        'void* fn; cudaDriverEntryPointQueryResult q; '
        'cudaGetDriverEntryPoint("cuGetProcAddress", &fn, cudaEnableDefault, &q);',
    "entry point by version of a loader":
        'void* fn; cudaDriverEntryPointQueryResult q; '
        'cudaGetDriverEntryPointByVersion("cuLibraryLoadData", &fn, 12000, cudaEnableDefault, &q);',
    "entry point taken by address": "auto lookup = &cudaGetDriverEntryPoint;",
    "constructor attribute": "__attribute__((constructor)) static void early() {}",
    "destructor attribute": "__attribute__((destructor)) static void late() {}",
    "constructor with priority": "__attribute__ ((__constructor__(101))) static void early() {}",
    "gnu::constructor": "[[gnu::constructor]] static void early() {}",
    "section attribute": '__attribute__((section(".init_array"))) static void (*p)() = nullptr;',
    "ifunc": '__attribute__((ifunc("resolve"))) void f();',
    "asm syscall": 'static void s() { asm volatile("mov $39, %eax; syscall"); }',
    "asm incbin": 'asm(".incbin \\"/usr/lib/libcublas.so\\"");',
    "asm label": 'extern "C" void* my_loader(const char*, int) __asm__("dlopen");',
    "asm label split": 'extern "C" void* my_loader(const char*, int) __asm__("dl" "open");',
    "library name": 'const char* lib = "libcublasLt.so.13";',
    "cubin file": 'const char* bin = "/tmp/fa3.cubin";',
    "cuModuleLoad": "CUmodule m; cuModuleLoad(&m, nullptr);",
    "cuModuleLoadData": "CUmodule m; cuModuleLoadData(&m, nullptr);",
    "cudaLibraryLoadFromFile": "cudaLibrary_t l; cudaLibraryLoadFromFile(&l, nullptr, 0, 0, 0, 0, 0, 0);",
    "PFN typedef": "PFN_cuModuleLoadData_v2000 load = nullptr;",
    "entry point by computed name":
        "char n[8] = {}; void* fn; cudaDriverEntryPointQueryResult q; "
        "cudaGetDriverEntryPoint(n, &fn, cudaEnableDefault, &q);",
    "entry point of a loader":
        'void* fn; cudaDriverEntryPointQueryResult q; '
        'cudaGetDriverEntryPoint("cuModuleLoadData", &fn, cudaEnableDefault, &q);',
    "cuGetProcAddress by computed name": "char n[8] = {}; void* fn; cuGetProcAddress(n, &fn, 12000, 0, nullptr);",
}


@pytest.mark.parametrize("snippet", list(FORBIDDEN_CALLS.values()), ids=list(FORBIDDEN_CALLS))
def test_forbidden_call_is_rejected_with_its_line(tmp_path, snippet):
    text = f"#include <cuda_runtime.h>\n\n{snippet}\nint after = 0;\n"
    checks = _checks(tmp_path, text, SOURCE_TEXT_ONLY)
    assert "forbidden-call" in _failed(checks), checks
    detail = checks["forbidden-call"].detail
    assert f"{tmp_path / 'kernel.cu'}:3: " in detail
    assert snippet.split(";")[0][:40] in detail


# ---------------------------------------------------------------------------------------------------
# Macro and lexical tricks: the name never appears as one token in the source.

MACRO_TRICKS = {
    "token pasting": "#define X dl##open\nvoid* h = X(nullptr, 2);",
    "nested pasting": "#define CAT_(a, b) a##b\n#define CAT(a, b) CAT_(a, b)\n"
                      "#define L CAT(CAT(d, l), CAT(op, en))\nvoid* h = L(nullptr, 2);",
    "function-like pasting": "#define MK(p) p##open\nvoid* h = MK(dl)(nullptr, 2);",
    "system by pasting": "#define RUN(x) sys##x\nint r = RUN(tem)(\"ls\");",
    "getenv by pasting": "#define G(a, b) a##b\nconst char* s = G(get, env)(\"SEED\");",
    "line continuation": "void* h = dl\\\nopen(nullptr, 2);",
    "universal character name": "void* h = dl\\u006fpen(nullptr, 2);",
    "digraph directive": "%:define X dl%:%:open\nvoid* h = X(nullptr, 2);",
    "stringified asm label": '#define S(x) #x\n#define T(x) S(x)\n#define N dl##open\n'
                             'extern "C" void* f(const char*, int) __asm__(T(N));',
    "attribute by macro": "#define EARLY __attribute__((con##structor))\nEARLY static void early() {}",
    "asm by macro": '#define SC "sys" "call"\nstatic void s() { asm volatile(SC); }',
    "entry lookup by macro": '#define NAME "cuModule" "LoadData"\n'
                             'void* fn; cudaDriverEntryPointQueryResult q; '
                             "cudaGetDriverEntryPoint(NAME, &fn, cudaEnableDefault, &q);",
}


@needs_nvcc
@pytest.mark.parametrize("snippet", list(MACRO_TRICKS.values()), ids=list(MACRO_TRICKS))
def test_macro_tricks_are_caught(tmp_path, snippet):
    checks = _checks(tmp_path, f"#include <cuda_runtime.h>\n{snippet}\n")
    assert "forbidden-call" in _failed(checks), checks


@needs_nvcc
def test_branch_chosen_by_build_macros_is_seen(tmp_path):
    """The preprocessor pass uses the build's macros: an -O3-only branch cannot hide from it."""
    text = textwrap.dedent(
        """\
        #include <cuda_runtime.h>
        #define CAT(a, b) a##b
        #if defined(__OPTIMIZE__) && defined(__PIC__) && __CUDA_ARCH_LIST__ == 900 && defined(TILE)
        #define CALL CAT(po, pen)
        #else
        #define CALL puts
        #endif
        int f() { return CALL("x") != 0; }
        """
    )
    checks = _checks(tmp_path, text, BuildOptions(arch="sm_90a", extra_flags=["-DTILE=64"]))
    assert "forbidden-call" in _failed(checks)
    assert ":8: int f()" in checks["forbidden-call"].detail
    assert "popen" in checks["forbidden-call"].detail and "macro expansion" in checks["forbidden-call"].detail


@needs_nvcc
def test_line_directive_cannot_disguise_kernel_lines(tmp_path):
    text = '#include <cuda_runtime.h>\n#line 1 "/usr/local/cuda/include/cuda.h"\n#define X dl##open\nvoid* h = X(0, 2);\n'
    checks = _checks(tmp_path, text)
    assert "single-file" in _failed(checks)
    assert "#line" in checks["single-file"].detail
    text = '# 1 "/usr/local/cuda/include/cuda.h"\nint x;\n'
    assert "single-file" in _failed(_checks(tmp_path, text))


# ---------------------------------------------------------------------------------------------------
# Includes

BAD_INCLUDES = {
    "local header": ('#include "helper.h"', "single-file"),
    "local header beside it": ('#include "beside.h"', "single-file"),
    "system non-standard": ("#include <dlfcn.h>", "single-file"),
    "posix header": ("#include <unistd.h>", "single-file"),
    "socket header": ("#include <sys/socket.h>", "single-file"),
    "absolute path": ("#include </etc/hostname>", "single-file"),
    "escape the toolkit": ("#include <../../../etc/hostname>", "single-file"),
    "computed include": ('#define H "beside.h"\n#include H', "single-file"),
    "digraph include": ('%:include "beside.h"', "single-file"),
    "spliced include": ('#inc\\\nlude "beside.h"', "single-file"),
    "include_next": ("#include_next <beside.h>", "single-file"),
    "embed": ('#embed "beside.h"', "single-file"),
    "pragma dependency": ('#pragma GCC dependency "beside.h"', "single-file"),
    "_Pragma dependency": ('_Pragma("GCC dependency \\"beside.h\\"")', "single-file"),
    "cublas": ("#include <cublas_v2.h>", "vendor-library"),
    "cublasLt": ("#include <cublasLt.h>", "vendor-library"),
    "cudnn": ("#include <cudnn.h>", "vendor-library"),
    "cutlass": ("#include <cutlass/gemm/device/gemm.h>", "vendor-library"),
    "cute": ("#include <cute/tensor.hpp>", "vendor-library"),
    "cufft": ("#include <cufft.h>", "vendor-library"),
    "cusparse": ("#include <cusparse.h>", "vendor-library"),
    "cusolver": ("#include <cusolverDn.h>", "vendor-library"),
    "nvrtc": ("#include <nvrtc.h>", "vendor-library"),
    "nvJitLink": ("#include <nvJitLink.h>", "vendor-library"),
    "torch": ("#include <torch/extension.h>", "vendor-library"),
    "ATen": ("#include <ATen/ATen.h>", "vendor-library"),
    "c10": ("#include <c10/util/Half.h>", "vendor-library"),
    "flash_attn": ('#include "flash_attn/flash_api.h"', "vendor-library"),
    "triton": ("#include <triton/core.h>", "vendor-library"),
}


@needs_nvcc
@pytest.mark.parametrize(("directive", "check"), list(BAD_INCLUDES.values()), ids=list(BAD_INCLUDES))
def test_bad_include_is_rejected(tmp_path, directive, check):
    (tmp_path / "beside.h").write_text("int beside;\n")
    checks = _checks(tmp_path, f"#include <cuda_runtime.h>\n{directive}\nint x;\n")
    assert check in _failed(checks), checks
    line = 2 + directive.count("\n") - directive.count("\\\n")
    assert f"{tmp_path / 'kernel.cu'}:{line}: " in checks[check].detail


VENDOR_IDENTIFIERS = {
    "cublas": "cublasHandle_t handle;",
    "cublas call": "int r = ::cublasCreate_v2(nullptr);",
    "CUBLAS macro": "int s = CUBLAS_STATUS_SUCCESS;",
    "cudnn": "cudnnHandle_t handle;",
    "cutlass": "cutlass::half_t x;",
    "CUTLASS macro": "CUTLASS_DEVICE void f();",
    "cute": "using namespace cute;",
    "cufft": "cufftHandle plan;",
    "cusparse": "cusparseHandle_t h;",
    "cusolver": "cusolverDnHandle_t h;",
    "nvrtc": "nvrtcProgram prog;",
    "nvJitLink": "nvJitLinkHandle h;",
    "torch": "torch::Tensor t;",
    "ATen": "at::Tensor t;",
    "c10": "c10::Half h;",
    "flash_attn": "void flash_attn_fwd();",
    "triton": "namespace triton {}",
    "pasted cutlass": "#define NS cut##lass\nNS::half_t x;",
    "vendor library name in a string": 'const char* n = "cublasGemmEx";',
}


@needs_nvcc
@pytest.mark.parametrize("snippet", list(VENDOR_IDENTIFIERS.values()), ids=list(VENDOR_IDENTIFIERS))
def test_vendor_identifier_is_rejected(tmp_path, snippet):
    checks = _checks(tmp_path, f"#include <cuda_runtime.h>\n{snippet}\n", None if "##" in snippet else SOURCE_TEXT_ONLY)
    assert "vendor-library" in _failed(checks), checks


def test_include_allowlist_with_and_without_a_toolkit(tmp_path):
    fake_toolkit = tmp_path / "include"
    (fake_toolkit / "cuda").mkdir(parents=True)
    (fake_toolkit / "cuda_runtime.h").write_text("")
    (fake_toolkit / "cuda" / "barrier").write_text("")
    (tmp_path / "outside.h").write_text("")
    (fake_toolkit / "link.h").symlink_to(tmp_path / "outside.h")
    toolkit = [fake_toolkit]
    assert include_problem("cuda_runtime.h", toolkit) is None
    assert include_problem("cuda/barrier", toolkit) is None
    assert include_problem("vector", toolkit) is None and include_problem("stdio.h", toolkit) is None
    assert include_problem("cuda_bf16.h", toolkit) is not None  # not in this toolkit
    assert include_problem("link.h", toolkit) is not None  # resolves outside the toolkit
    assert include_problem("../outside.h", toolkit) is not None
    assert include_problem("unistd.h", toolkit) is not None
    # No toolkit found: the built-in list of CUDA headers.
    for name in ("cuda_runtime.h", "cuda_bf16.h", "mma.h", "cuda/pipeline", "cooperative_groups/reduce.h"):
        assert include_problem(name, None) is None, name
    for name in ("helper.h", "dlfcn.h", "cublas_v2.h", "/etc/passwd"):
        assert include_problem(name, None) is not None, name


def test_without_nvcc_the_source_text_is_still_checked(tmp_path):
    options = BuildOptions(nvcc=str(tmp_path / "no-such-nvcc"))
    clean = _checks(tmp_path, CLEAN, options)
    assert not _failed(clean), clean
    assert "no nvcc" in clean["forbidden-call"].detail
    bad = _checks(tmp_path, '#include <cuda_runtime.h>\n#include "x.h"\nint r = system("ls");\n', options)
    assert _failed(bad) == {"single-file", "forbidden-call"}


def test_line_numbers_survive_rewrites(tmp_path):
    """Universal character names, splices, form feeds and CRLF do not shift the reported line."""
    text = "int a;\r\n\f int b = 1 + \\\r\n 2;\r\nvoid* h = dl\\u006fpen(0, 2); int c;\r\nint r = system(0);\r\n"
    detail = _checks(tmp_path, text, SOURCE_TEXT_ONLY)["forbidden-call"].detail
    assert f"{tmp_path / 'kernel.cu'}:4: void* h" in detail
    assert f"{tmp_path / 'kernel.cu'}:5: int r = system(0);" in detail


@needs_nvcc
def test_a_file_the_preprocessor_rejects_is_not_passed(tmp_path):
    checks = _checks(tmp_path, "#include <cuda_runtime.h>\n#error not today\n")
    assert not checks["forbidden-call"].ok
    assert "the preprocessor failed" in checks["forbidden-call"].detail
    assert "not today" in checks["forbidden-call"].detail


def test_unreadable_source_is_bad_input(tmp_path):
    with pytest.raises(BuildInputError, match="cannot read"):
        source_checks(tmp_path / "missing.cu")


# ---------------------------------------------------------------------------------------------------
# The lexer and the preprocessor reader


def test_lexer_blanks_comments_and_literals_keeping_lines():
    text = 'a = "x // y"; // dlopen\nb = \'"\'; /* system\n */ c = R"(q)";\nd = 1\'000;\n'
    lexed = lex(text)
    assert lexed.code.count("\n") == text.count("\n")
    assert "dlopen" not in lexed.code and "system" not in lexed.code and "x // y" not in lexed.code
    assert [lit.value for lit in lexed.literals] == ["x // y", "q"]
    assert "d = 1'000;" in lexed.code
    assert lexed.line_of(lexed.code.index("c =")) == 3


def test_splice_joins_continuations_and_keeps_line_numbers():
    assert splice("a\\\nb\nc\n") == "ab\n\nc\n"
    assert splice("x\\  \ny").startswith("xy")


def test_parse_preprocessed_keeps_only_the_kernel_lines():
    text = textwrap.dedent(
        """\
        # 0 "k.cu"
        # 0 "<command-line>"
        # 1 "/usr/local/cuda/include/cuda_runtime.h" 1
        int from_header_system;
        # 0 "<command-line>" 2
        # 1 "k.cu"
        int a;
        # 1 "/usr/include/c++/13/cstdio" 1 3
        int popen_decl;
        # 3 "k.cu" 2

        void* h = dlopen;
        """
    )
    pre = parse_preprocessed(text, "k.cu")
    assert pre.includes == [(1, "/usr/include/c++/13/cstdio")]
    code = pre.scan.lexed.code
    assert "from_header_system" not in code and "popen_decl" not in code
    assert pre.scan.line(code.index("dlopen")) == 4


# ---------------------------------------------------------------------------------------------------
# Binary checks


@pytest.fixture(scope="module")
def hidden_dlopen_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if NVCC is None:
        pytest.skip("nvcc not found")
    root = tmp_path_factory.mktemp("hidden")
    source = root / "kernel.cu"
    source.write_text(HIDDEN_DLOPEN + IMPOSTOR)
    report, library = build(source, ["kstui_test_entry"], BuildOptions(arch="sm_90a", cache_dir=root / "cache"))
    assert report.ok, report.log
    return library


@needs_nvcc
def test_binary_checks_catch_dlopen_hidden_behind_macros(tmp_path, hidden_dlopen_library):
    checks = {c.name: c for c in binary_checks(hidden_dlopen_library, ["kstui_test_entry"])}
    assert checks["entry-point"].ok
    assert not checks["imported-symbols"].ok
    assert "dlopen" in checks["imported-symbols"].detail
    assert "cudnnCreate (vendor library)" in checks["imported-symbols"].detail
    assert "kstui_mystery (weak import" in checks["imported-symbols"].detail
    assert not checks["exported-symbols"].ok
    assert "cudaEventElapsedTime" in checks["exported-symbols"].detail
    assert "kstui_second_entry" not in checks["exported-symbols"].detail
    # The source check sees it too, after macro expansion.
    (tmp_path / "kernel.cu").write_text(HIDDEN_DLOPEN)
    detail = {c.name: c for c in source_checks(tmp_path / "kernel.cu")}["forbidden-call"].detail
    assert "dlopen" in detail and ":7: void* handle = LOADER(nullptr, 2);" in detail


@needs_nvcc
def test_entry_point_must_be_a_c_function(hidden_dlopen_library):
    checks = {c.name: c for c in binary_checks(hidden_dlopen_library, ["kstui_missing", "kstui_data_symbol"])}
    assert not checks["entry-point"].ok
    assert "kstui_missing is not exported" in checks["entry-point"].detail
    assert "kstui_data_symbol is exported as nm type" in checks["entry-point"].detail


@needs_nvcc
def test_without_nm_the_binary_checks_fail_and_say_why(hidden_dlopen_library, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    checks = binary_checks(hidden_dlopen_library, ["kstui_test_entry"])
    assert [c.name for c in checks] == ["entry-point", "imported-symbols", "exported-symbols"]
    assert [c.ok for c in checks] == [False, False, False]
    assert all("nm (binutils) not found" in c.detail for c in checks)


@pytest.mark.parametrize(
    ("symbol", "family"),
    [
        ("dlopen", "dynamic loading"), ("dlsym", "dynamic loading"), ("system", "process creation"),
        ("popen", "process creation"), ("execve", "process creation"), ("posix_spawnp", "process creation"),
        ("fopen64", "file I/O"), ("__open_2", "file I/O"), ("socket", "sockets"), ("getenv", "environment"),
        ("syscall", "raw system calls and code injection"), ("cudaLibraryLoadFromFile", "runtime module loading"),
        ("cuModuleLoadDataEx_v2", "runtime module loading"),
        ("_ZNSt14basic_ifstreamIcSt11char_traitsIcEEC1EPKcSt13_Ios_Openmode", "file I/O"),
        ("_ZNSt10filesystem12current_pathB5cxx11Ev", "file I/O"),
        ("cudaGetLastError", None), ("__cudaRegisterFatBinary", None), ("__cxa_atexit", None),
        ("memcpy", None), ("printf", None), ("_ZNSt8ios_base4InitC1Ev", None), ("cudaGetDriverEntryPoint", None),
        ("cudnnCreate", "vendor library"), ("cublasLtMatmul", "vendor library"), ("kill", "signals and other processes"),
        ("__cudaRegisterFatBinary", None),
    ],
)
def test_imported_symbol_families(symbol, family):
    assert imported_symbol_family(symbol) == family


def test_weak_imports_are_allowed_only_for_the_usual_few():
    assert imported_symbol_family("__gmon_start__", weak=True) is None
    assert imported_symbol_family("__cxa_finalize", weak=True) is None
    assert imported_symbol_family("__pthread_key_create", weak=True) is None
    assert imported_symbol_family("flash_fwd_kernel", weak=True) is not None
    assert imported_symbol_family("flash_fwd_kernel", weak=False) is None
