"""Static checks on a kernel: its source text, its host-preprocessed text, and the built library.

Three layers, because each alone can be fooled:
- the source text with comments and string literals removed (strings are checked where they matter:
  includes, asm, symbol names); this sees both sides of every #if;
- the host preprocessor's output, only the lines that come from the kernel file itself, so a name built
  by token pasting (`#define X dl##open`) or hidden behind macros is seen expanded;
- the library's dynamic symbols: what it imports is what its code can call, whatever the source says.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import secret_env
from harness.build import (
    EXPORTED_FUNCTION_KINDS,
    BuildInputError,
    BuildOptions,
    ToolError,
    valid_arch,
    build_name,
    confined_compiler,
    detect_arch,
    dynamic_symbols,
    find_nvcc,
    gencode_flag,
    toolkit_include_dirs,
    validate_extra_flags,
)
from harness.result import Check

_EXPANDED = " (after macro expansion)"
SOURCE_CHECKS = ("single-file", "vendor-library", "forbidden-call")
BINARY_CHECKS = ("entry-point", "imported-symbols", "exported-symbols")
MAX_FINDINGS = 12  # per check, in the detail

# ---------------------------------------------------------------------------------------------------
# What is forbidden

# name -> family, for identifiers in code and for imported symbols of the library.
_FAMILIES: dict[str, tuple[str, ...]] = {
    "dynamic loading": (
        "dlopen", "dlmopen", "dlsym", "dlvsym", "dlclose", "dlerror", "dlinfo", "dladdr", "dladdr1",
        "dl_iterate_phdr", "__libc_dlopen_mode", "__libc_dlsym", "__libc_dlclose", "_dl_open",
    ),
    "process creation": (
        "system", "popen", "pclose", "fork", "vfork", "clone", "clone3", "posix_spawn", "posix_spawnp",
        "execl", "execle", "execlp", "execv", "execve", "execvp", "execvpe", "execveat", "fexecve",
        "wordexp", "daemon", "__libc_system",
    ),
    # A kernel that signals or kills the harness, or hooks its signals, attacks the judge itself.
    "signals and other processes": (
        "kill", "killpg", "tgkill", "tkill", "getppid", "sigaction", "signal", "sigset", "alarm", "setitimer",
        "prctl",
    ),
    "file I/O": (
        "fopen", "fopen64", "freopen", "freopen64", "fdopen", "tmpfile", "tmpfile64", "open", "open64",
        "openat", "openat64", "__open_2", "__open64_2", "__openat_2", "creat", "creat64", "opendir",
        "fdopendir", "mkstemp", "mkostemp", "mkfifo", "unlink", "unlinkat", "truncate", "memfd_create",
        "ifstream", "ofstream", "fstream", "basic_ifstream", "basic_ofstream", "basic_fstream",
        "basic_filebuf", "filebuf", "wifstream", "wofstream", "wfstream", "filesystem", "remove", "rename",
        "renameat", "renameat2", "rmdir", "mkdir", "mkdirat", "symlink", "chmod", "chdir",
    ),
    "sockets": (
        "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4", "getaddrinfo",
        "gethostbyname", "sendto", "recvfrom", "sendmsg", "recvmsg",
    ),
    # The worker's result pipe is a file descriptor in the same process: a kernel that writes to, or
    # duplicates onto, a descriptor of its choice can forge the judge's messages.
    "file descriptors": (
        "write", "pwrite", "pwrite64", "writev", "pwritev", "pwritev2", "dprintf", "vdprintf", "dup", "dup2",
        "dup3", "fcntl", "fcntl64", "ioctl", "sendfile", "sendfile64", "splice", "tee", "vmsplice",
        "copy_file_range", "send",
    ),
    "environment": ("getenv", "secure_getenv", "__secure_getenv", "environ", "__environ", "_environ", "setenv",
                    "putenv", "unsetenv", "clearenv"),
    "raw system calls and code injection": (
        "syscall", "ptrace", "process_vm_readv", "process_vm_writev", "mprotect", "pkey_mprotect", "mmap",
        "mmap64",
    ),
    "runtime module loading": (
        "cudaLibraryLoadFromFile", "cudaLibraryLoadData", "cuLibraryLoadFromFile", "cuLibraryLoadData",
        "cuModuleLoad", "cuModuleLoadData", "cuModuleLoadDataEx", "cuModuleLoadFatBinary", "cuLinkCreate",
        "cuLinkAddData", "cuLinkAddFile", "cuLinkComplete",
    ),
}
_FORBIDDEN: dict[str, str] = {name: family for family, names in _FAMILIES.items() for name in names}
# Versioned variants of the module-loading API (cuModuleLoadDataEx_v2, PFN_cuLinkAddFile_v12000, ...).
_FORBIDDEN_PATTERN = re.compile(r"(?:PFN_)?(cu(?:da)?(?:ModuleLoad|LibraryLoad|Link(?:Create|Add|Complete))\w*)")
# The runtime's registration internals, in the source only (nvcc's own stub imports them): a fatbin
# registered by hand runs code that was not compiled from this file.
_REGISTRATION = re.compile(r"__cuda(?:Register|Unregister|InitModule|PushCallConfiguration|PopCallConfiguration)\w*"
                           r"|__fatbinwrap\w*|__nv_fatb\w*|__nv_module_id\w*")
# Names common enough as members or methods that `x.open(...)` is not a call of libc's open.
_GENERIC = frozenset({"open", "creat", "bind", "connect", "listen", "accept", "system", "fork", "clone",
                      "socket", "truncate", "unlink", "filesystem", "daemon", "environ", "remove", "rename",
                      "kill", "signal", "alarm", "mkdir", "chmod", "chdir", "write", "dup", "send", "tee", "splice"})
# Distinctive enough to reject when a string literal names them (asm labels, entry-point lookups).
_NAMED_IN_STRING = re.compile(
    r"\b(dl(?:m?open|v?sym|close|info|addr)|__libc_\w+|popen|posix_spawnp?|exec(?:[lv]p?e?|veat)|fexecve"
    r"|wordexp|secure_getenv|getenv|ptrace|syscall|mprotect|memfd_create"
    r"|cu(?:da)?(?:ModuleLoad|LibraryLoad|Link(?:Create|Add|Complete))\w*)\b"
)
_FILE_IN_STRING = re.compile(r"\w\.(?:so(?:\.\d+)*|cubin|fatbin|ptx|dll|dylib)\b|\blib\w+\.so\b")
# Host assembly that injects code or data, or enters the kernel directly: never needed in PTX.
_HOST_ASM = re.compile(
    r"\b(syscall|sysenter|int\s*\$?0x80|svc\s+#?0)\b|\.(?:incbin|include|section|pushsection|byte|2byte|4byte"
    r"|8byte|word|long|quad|ascii|asciz|string|init_array|fini_array|ctors|dtors|symver|text|data|rodata"
    r"|globl|weakref)\b"
)
_LOAD_TIME_ATTRIBUTES = frozenset({"constructor", "destructor", "ifunc", "section"})
_MANGLED_FILE_IO = ("basic_ifstream", "basic_ofstream", "basic_fstream", "basic_filebuf", "10filesystem")
# Driver functions a kernel may look up by name (TMA descriptors, attributes, launches); never a loader,
# and never cuGetProcAddress itself, which would hand out every other function.
_ENTRY_POINT_ALLOWED = re.compile(
    r"cu(?:TensorMap\w*|GetErrorString|GetErrorName|DriverGetVersion|DeviceGet\w*|DeviceCanAccessPeer"
    r"|DevicePrimaryCtxGetState|CtxGet\w*|CtxSynchronize|FuncSetAttribute|FuncGetAttribute|FuncSetCacheConfig"
    r"|FuncSetSharedMemConfig|FuncGetName|LaunchKernel(?:Ex)?|LaunchCooperativeKernel|PointerGetAttributes?"
    r"|StreamGet\w*|StreamSynchronize|StreamWaitEvent|EventRecord(?:WithFlags)?|OccupancyMax\w*"
    r"|OccupancyAvailableDynamicSMemPerBlock|KernelGetAttribute|KernelSetAttribute|KernelGetFunction"
    r"|MemsetD\w*|MemcpyAsync|MemcpyDtoDAsync)(?:_v\d+)?(?:_ptsz|_ptds)?"
)
_ENTRY_LOOKUP = re.compile(r"\b(cudaGetDriverEntryPoint(?:ByVersion)?|cuGetProcAddress(?:_v\d+)?)\b")

_VENDOR_IDENTIFIERS = re.compile(
    r"\b(?:(?i:cublas|cudnn|cufft|cusparse|cusolver|nvrtc|nvjitlink|nccl|nvshmem)\w*|cutensor\w*|CUTENSOR_\w*"
    r"|(?i:cutlass)\w*|cute|CUTE_\w+|(?i:torch)|ATen|c10|(?i:flash_attn)\w*|FLASH_NAMESPACE"
    r"|(?i:triton)\w*)\b"
)
# A symbol or library file name in a string: "cublasLtMatmul", "libcudnn.so.9", "/opt/libtorch_cuda.so".
_VENDOR_IN_STRING = re.compile(
    r"(?:\b|(?<=lib))(?:(?i:cublas|cudnn|cufft|cusparse|cusolver|nvrtc|nvjitlink|nccl|nvshmem|cutlass|torch|flash_attn"
    r"|triton)\w*|cutensor\w*|c10\w*|cute\b)"
)
_VENDOR_HEADER_DIRS = frozenset({"cutlass", "cute", "torch", "aten", "c10", "flash_attn", "triton", "cudnn",
                                 "cublas", "nvshmem", "nccl", "cutensor"})
_VENDOR_HEADER_FILE = re.compile(
    r"(?:(?i:cublas|cudnn|cufft|cusparse|cusolver|nvrtc|nvjitlink|nccl|nvshmem|nvblas|flash_attn|triton)|cutensor"
    r"|cutlass|torch)\w*(?:\.\w+)?"
)

# The standard C and C++ library headers (C++17, with C compatibility headers).
STANDARD_HEADERS = frozenset(
    """algorithm any array atomic bitset cassert ccomplex cctype cerrno cfenv cfloat charconv chrono cinttypes
    ciso646 climits clocale cmath codecvt complex condition_variable csetjmp csignal cstdalign cstdarg
    cstdbool cstddef cstdint cstdio cstdlib cstring ctgmath ctime cuchar cwchar cwctype deque exception
    execution forward_list functional future initializer_list iomanip ios iosfwd iostream istream iterator
    limits list locale map memory memory_resource mutex new numeric optional ostream queue random ratio
    regex scoped_allocator set shared_mutex sstream stack stdexcept streambuf string string_view
    system_error thread tuple type_traits typeindex typeinfo unordered_map unordered_set utility valarray
    variant vector bit numbers span concepts version
    assert.h complex.h ctype.h errno.h fenv.h float.h inttypes.h iso646.h limits.h locale.h math.h
    setjmp.h signal.h stdalign.h stdarg.h stdbool.h stddef.h stdint.h stdio.h stdlib.h string.h tgmath.h
    time.h uchar.h wchar.h wctype.h""".split()
)
# Used only when no toolkit is found: the CUDA headers a hand-written kernel includes.
FALLBACK_TOOLKIT_HEADERS = re.compile(
    r"cuda(?:_runtime(?:_api)?|_fp16|_bf16|_fp8|_fp6|_fp4|_pipeline(?:_primitives|_helpers)?"
    r"|_awbarrier(?:_primitives|_helpers)?|_occupancy|Typedefs|_device_runtime_api|_texture_types"
    r"|_surface_types)?\.h(?:pp)?"
    r"|mma\.h|math_constants\.h|math_functions\.h|device_functions\.h|device_launch_parameters\.h"
    r"|vector_types\.h|vector_functions\.h(?:pp)?|driver_types\.h|builtin_types\.h|host_defines\.h"
    r"|cooperative_groups\.h|curand_kernel\.h|sm_\d+_(?:intrinsics|atomic_functions)\.h(?:pp)?"
    r"|(?:cooperative_groups|crt|cuda|cub|thrust|nv)/[\w/.]+"
)


# ---------------------------------------------------------------------------------------------------
# Lexing: comments out, literals set aside, line numbers kept


@dataclass
class Literal:
    start: int
    end: int  # one past the closing quote
    value: str


@dataclass
class Lexed:
    code: str  # comments -> spaces, literal contents -> spaces; newlines kept everywhere
    with_strings: str  # comments -> spaces, literals intact
    literals: list[Literal] = field(default_factory=list)

    def line_of(self, pos: int) -> int:
        return self.code.count("\n", 0, pos) + 1


def splice(text: str) -> str:
    """Join backslash-newline continuations, keeping every later line on its own line number."""
    out: list[str] = []
    pending = 0
    for chunk in re.split(r"(\\[ \t]*\r?\n|\n)", text):
        if chunk.startswith("\\"):
            pending += 1
        elif chunk == "\n":
            out.append("\n" * (1 + pending))
            pending = 0
        else:
            out.append(chunk)
    out.append("\n" * pending)
    return "".join(out)


_PREFIX = re.compile(r"(?:u8|u|U|L)?R?$")


def lex(text: str) -> Lexed:
    """Split C++ source into code and literals (handles raw strings and digit separators)."""
    code: list[str] = []
    keep: list[str] = []
    literals: list[Literal] = []
    i, n = 0, len(text)

    def blank(s: str) -> str:
        return re.sub(r"[^\n]", " ", s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            code.append(blank(text[i:j]))
            keep.append(blank(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            code.append(blank(text[i:j]))
            keep.append(blank(text[i:j]))
            i = j
        elif c == '"' or (c == "'" and not _is_digit_separator(text, i)):
            start = i
            raw = c == '"' and _raw_prefix(text, i)
            if raw:
                m = re.match(r'"([^()\\\s]{0,16})\(', text[i:])
                if m:
                    close = ")" + m.group(1) + '"'
                    j = text.find(close, i + m.end())
                    j = n if j < 0 else j + len(close)
                    value = text[i + m.end() : j - len(close)]
                else:
                    raw = False
            if not raw:
                j = i + 1
                while j < n and text[j] != c and text[j] != "\n":
                    j += 2 if text[j] == "\\" else 1
                j = min(j + 1, n)
                value = text[i + 1 : j - 1]
            literal = text[start:j]
            code.append(c + blank(literal[1:-1]) + literal[-1:] if len(literal) > 1 else c)
            keep.append(literal)
            if c == '"':
                literals.append(Literal(start, j, _unescape(value) if not raw else value))
            i = j
        else:
            j = i + 1
            while j < n and text[j] not in "\"'/":
                j += 1
            code.append(text[i:j])
            keep.append(text[i:j])
            i = j
    return Lexed("".join(code), "".join(keep), literals)


def _raw_prefix(text: str, i: int) -> bool:
    m = re.search(r"(\w*)$", text[max(0, i - 3) : i])
    return bool(m and m.group(1).endswith("R") and _PREFIX.fullmatch(m.group(1)))


def _is_digit_separator(text: str, i: int) -> bool:
    """A `'` inside a number (1'000'000) is a digit separator, not a character literal."""
    m = re.search(r"[\w.]*$", text[max(0, i - 64) : i])
    return bool(m and m.group(0)[:1].isdigit()) and i + 1 < len(text) and text[i + 1].isalnum()


def _unescape(value: str) -> str:
    def one(m: re.Match[str]) -> str:
        esc = m.group(1)
        if esc[0] in "xX":
            return chr(int(esc[1:], 16))
        if esc[0] in "uU":
            return chr(int(esc[1:], 16))
        if esc[0].isdigit():
            return chr(int(esc, 8))
        return {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}.get(esc, esc)

    try:
        return re.sub(r"\\(x[0-9a-fA-F]{1,8}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{1,3}|.)", one, value)
    except (ValueError, OverflowError):
        return value


def _decode_ucn(code: str) -> str:
    """Universal character names in identifiers (dl\\u006fpen) spell the same identifier."""
    def one(m: re.Match[str]) -> str:
        try:
            return chr(int(m.group(1) or m.group(2), 16))
        except (ValueError, OverflowError):
            return m.group(0)

    return re.sub(r"\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})", one, code)


# ---------------------------------------------------------------------------------------------------
# Findings


@dataclass(frozen=True)
class Finding:
    check: str
    line: int
    reason: str


@dataclass
class Scan:
    """A lexed text plus how its positions map to the kernel file's line numbers."""

    lexed: Lexed
    lines: list[int]  # index = line in this text - 1 -> line in the kernel file
    via: str = ""  # "" for the source, "after macro expansion" for the preprocessed text

    def line(self, pos: int, text: str | None = None) -> int:
        """The kernel line of offset `pos` in the lexed code (or in `text`, a same-lines rewrite of it)."""
        index = (text if text is not None else self.lexed.code).count("\n", 0, pos)
        return self.lines[min(index, len(self.lines) - 1)]


def _identifier_findings(scan: Scan) -> Iterable[Finding]:
    code = _decode_ucn(scan.lexed.code)
    for m in re.finditer(r"[A-Za-z_$][\w$]*", code):
        name = m.group(0)
        before = code[max(0, m.start() - 64) : m.start()].rstrip()
        family = _FORBIDDEN.get(name)
        if family is None and (p := _FORBIDDEN_PATTERN.fullmatch(name)) is not None:
            family, name = "runtime module loading", p.group(1)
        if family is None and _REGISTRATION.fullmatch(name):
            family = "runtime module loading"
        if family is not None and not _is_member_use(name, before):
            yield Finding("forbidden-call", scan.line(m.start(), code), f"{family}: {name}{scan.via}")
        if re.search(r"(?:\.|->|\w\s*::)$", before):
            continue  # a member or a nested name: only the outermost namespace says whose library it is
        if _VENDOR_IDENTIFIERS.fullmatch(name) or (name == "at" and re.match(r"\s*::", code[m.end():m.end() + 16])):
            yield Finding("vendor-library", scan.line(m.start(), code), f"vendor library identifier {name}{scan.via}")


def _is_member_use(name: str, before: str) -> bool:
    if name not in _GENERIC:
        return False
    if before.endswith((".", "->")):
        return True
    return name == "bind" and re.search(r"\bstd\s*::$", before) is not None  # std::bind, not the socket call


def _string_runs(lexed: Lexed) -> list[tuple[int, str]]:
    """Adjacent string literals concatenated ("dl" "open" is one string), with their start offsets."""
    runs: list[tuple[int, str]] = []
    last_end = -1
    for lit in lexed.literals:
        prefix_gap = lexed.code[last_end:lit.start]
        if runs and last_end >= 0 and re.fullmatch(r"\s*(?:u8|u|U|L)?R?", prefix_gap):
            runs[-1] = (runs[-1][0], runs[-1][1] + lit.value)
        else:
            runs.append((lit.start, lit.value))
        last_end = lit.end
    return runs


def _string_findings(scan: Scan) -> Iterable[Finding]:
    lexed = scan.lexed
    include_lines = {i for i, text in enumerate(lexed.code.split("\n"), 1)
                     if re.match(r"\s*(?:#|%:)\s*(?:include|include_next|import)\b", text)}
    for start, value in _string_runs(lexed):
        if lexed.line_of(start) in include_lines:
            continue  # include names are judged by single-file
        line = scan.line(start)
        symbol = value.strip()
        # Only a string that is a bare symbol name: that is what asm labels and by-name lookups take.
        bare = re.fullmatch(r"[\w$@.]+", symbol) is not None
        if bare and (_NAMED_IN_STRING.fullmatch(symbol.split("@")[0]) or symbol in _FORBIDDEN):
            yield Finding("forbidden-call", line, f"a string names {symbol}{scan.via}")
        if (m := _FILE_IN_STRING.search(value)) is not None:
            yield Finding("forbidden-call", line, f"a string names a library or binary file ({m.group(0)}){scan.via}")
        if (v := _VENDOR_IN_STRING.search(value)) is not None and re.fullmatch(r"[\w.:/+-]+", value.strip()):
            yield Finding("vendor-library", line, f"a string names {v.group(0)}{scan.via}")


def _asm_findings(scan: Scan) -> Iterable[Finding]:
    lexed = scan.lexed
    for m in re.finditer(r"\b(?:asm|__asm|__asm__)\b", lexed.code):
        close = _matching_paren(lexed.code, m.end())
        if close is None:
            continue
        text = "".join(lit.value for lit in lexed.literals if m.end() <= lit.start < close)
        if (h := _HOST_ASM.search(text)) is not None:
            yield Finding("forbidden-call", scan.line(m.start()), f"host assembly {h.group(0).strip()!r}{scan.via}")


def _matching_paren(code: str, pos: int) -> int | None:
    """The offset of the ')' closing the first '(' after pos (skipping qualifiers like volatile)."""
    m = re.compile(r"\s*(?:(?:volatile|__volatile__|goto|inline)\s*)*\(").match(code, pos)
    if m is None:
        return None
    depth, i = 1, m.end()
    while i < len(code) and depth:
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        i += 1
    return i if depth == 0 else None


def _attribute_findings(scan: Scan) -> Iterable[Finding]:
    code = scan.lexed.code
    contexts = [(m.start(), m.end()) for m in re.finditer(r"\[\[.*?\]\]", code, re.S)]
    for m in re.finditer(r"\b(?:__attribute__|__attribute|__declspec)\s*\(", code):
        close = _matching_paren(code, m.end() - 1)
        contexts.append((m.start(), close or len(code)))
    for start, end in contexts:
        for word in re.findall(r"[A-Za-z_]\w*", code[start:end]):
            bare = word.strip("_")
            if bare in _LOAD_TIME_ATTRIBUTES:
                reason = f"attribute {bare} (code or data placed to run at load time){scan.via}"
                yield Finding("forbidden-call", scan.line(start), reason)


def _entry_lookup_findings(scan: Scan) -> Iterable[Finding]:
    """Driver entry points may be looked up only by a literal name, and never a loader's."""
    lexed = scan.lexed
    starts = {lit.start: lit for lit in lexed.literals}
    runs = dict(_string_runs(lexed))
    for m in _ENTRY_LOOKUP.finditer(lexed.code):
        after = re.compile(r"\s*\(\s*").match(lexed.code, m.end())
        lit = starts.get(after.end()) if after else None
        if lit is None:
            yield Finding("forbidden-call", scan.line(m.start()),
                          f"{m.group(1)} without a string literal name (a name built at run time could load code)"
                          f"{scan.via}")
        elif not _ENTRY_POINT_ALLOWED.fullmatch(name := runs.get(lit.start, lit.value)):
            yield Finding("forbidden-call", scan.line(m.start()),
                          f"{m.group(1)}({name!r}): not a driver function a kernel may look up{scan.via}")


def _directive_findings(scan: Scan, toolkit: list[Path] | None) -> Iterable[Finding]:
    lines = scan.lexed.with_strings.split("\n")
    for idx, text in enumerate(lines):
        m = re.match(r"\s*(?:#|%:)\s*(\w*)\s*(.*)$", text)
        pragma = re.search(r"\b_Pragma\s*\(\s*\"(.*)\"\s*\)", text)
        line = scan.lines[min(idx, len(scan.lines) - 1)]
        if pragma is not None and re.search(r"\bdependency\b", pragma.group(1)):
            yield Finding("single-file", line, "#pragma GCC dependency reads another file")
        if m is None:
            continue
        directive, rest = m.group(1), m.group(2).strip()
        if directive in ("include", "include_next", "import"):
            yield from _include_findings(line, rest, toolkit)
        elif directive == "embed":
            yield Finding("single-file", line, "#embed reads another file")
        elif directive == "line" or directive.isdigit():
            yield Finding("single-file", line, "#line directives are not allowed (they disguise where code comes from)")
        elif directive == "pragma" and re.search(r"\bdependency\b", rest):
            yield Finding("single-file", line, "#pragma GCC dependency reads another file")


def _include_findings(line: int, rest: str, toolkit: list[Path] | None) -> Iterable[Finding]:
    m = re.match(r'<([^>]*)>|"([^"]*)"', rest)
    if m is None:
        yield Finding("single-file", line, "computed #include (the name must be written as <...>)")
        return
    name = m.group(1) if m.group(1) is not None else m.group(2)
    if _is_vendor_header(name):
        yield Finding("vendor-library", line, f"includes vendor library header {name}")
    problem = include_problem(name, toolkit)
    if problem:
        yield Finding("single-file", line, problem)


def _is_vendor_header(path: str) -> bool:
    parts = [p for p in re.split(r"[/\\]", path) if p]
    if any(p.lower() in _VENDOR_HEADER_DIRS for p in parts[:-1]):
        return True
    return bool(parts) and _VENDOR_HEADER_FILE.fullmatch(parts[-1]) is not None


def include_problem(name: str, toolkit: list[Path] | None) -> str | None:
    """Why `#include <name>` is not allowed, or None: standard headers and the toolkit's own only."""
    if name in STANDARD_HEADERS:
        return None
    if not name or name.startswith(("/", "\\")) or ".." in re.split(r"[/\\]", name):
        return f"includes {name!r}: only the CUDA toolkit's and the standard library's headers"
    if toolkit is None:
        if FALLBACK_TOOLKIT_HEADERS.fullmatch(name):
            return None
    else:
        for root in toolkit:
            candidate = root / name
            if candidate.is_file() and _inside(candidate, root):
                return None
    return f"includes {name!r}, which is neither a CUDA toolkit header nor a standard one (one file only)"


def _inside(path: Path, root: Path) -> bool:
    real = os.path.realpath(path)
    return real.startswith(os.path.realpath(root) + os.sep)


# ---------------------------------------------------------------------------------------------------
# The host preprocessor's view


@dataclass
class Preprocessed:
    scan: Scan | None
    includes: list[tuple[int, str]]  # (kernel line, resolved path) of each file the kernel includes
    note: str = ""  # why there is no preprocessed view, when there is none


def preprocess(source_bytes: bytes, name: str, nvcc: str, options: BuildOptions) -> Preprocessed:
    """nvcc -E for the host side with the build's own macros; keep only lines from the kernel file."""
    arch = valid_arch(options.arch) if options.arch else detect_arch()
    flags = ["-E", "-x", "cu", "-std=c++17", "-O3", "-Xcompiler", "-fPIC", gencode_flag(arch)]
    if options.fast_math:
        flags.append("--use_fast_math")
    flags += validate_extra_flags(options.extra_flags)
    with tempfile.TemporaryDirectory(prefix="kstui-check-") as work:
        (Path(work) / name).write_bytes(source_bytes)
        try:
            proc = subprocess.run(confined_compiler([nvcc, *flags, name], Path(work)), cwd=work, capture_output=True,
                                  timeout=120, env=secret_env.scrubbed())
        except subprocess.TimeoutExpired:
            return Preprocessed(None, [], "the preprocessor timed out")
        except OSError as exc:
            return Preprocessed(None, [], f"cannot run the preprocessor: {exc.strerror or exc}")
    if proc.returncode != 0:
        first = next((ln for ln in proc.stderr.decode("utf-8", "replace").splitlines() if ln.strip()), "")
        return Preprocessed(None, [], f"the preprocessor failed: {first.strip()}")
    return parse_preprocessed(proc.stdout.decode("utf-8", "replace"), name)


_MARKER = re.compile(r'#\s*(?:line\s+)?(\d+)\s+"((?:[^"\\]|\\.)*)"((?:\s+\d)*)\s*$')


def parse_preprocessed(text: str, name: str) -> Preprocessed:
    """The kernel file's own lines of `nvcc -E` output, and what it includes directly."""
    kept: list[str] = []
    numbers: list[int] = []
    includes: list[tuple[int, str]] = []
    current, line, last_kernel_line = "", 0, 0
    for raw in text.split("\n"):
        m = _MARKER.match(raw)
        if m is not None:
            file = re.sub(r"\\(.)", r"\1", m.group(2))
            flags = m.group(3).split()
            if "1" in flags and current == name:
                includes.append((last_kernel_line, file))
            current, line = file, int(m.group(1))
            continue
        if current == name:
            kept.append(raw)
            numbers.append(line)
            last_kernel_line = line
        line += 1
    return Preprocessed(Scan(lex(splice("\n".join(kept))), numbers or [1], _EXPANDED), includes)


def _resolved_include_findings(pre: Preprocessed, toolkit: list[Path] | None) -> Iterable[Finding]:
    for line, path in pre.includes:
        if _is_vendor_header(path):
            yield Finding("vendor-library", line, f"includes vendor library header {path}")
        if toolkit is not None and any(_inside(Path(path), root) for root in toolkit):
            continue
        if os.path.isabs(path) and any(path.endswith("/" + h) for h in STANDARD_HEADERS):
            continue
        if toolkit is None and FALLBACK_TOOLKIT_HEADERS.search(path):
            continue
        yield Finding("single-file", line,
                      f"includes {path}, which is neither a CUDA toolkit header nor a standard one")


# ---------------------------------------------------------------------------------------------------
# The checks


def source_checks(source: Path, options: BuildOptions | None = None, source_bytes: bytes | None = None) -> list[Check]:
    """single-file, vendor-library and forbidden-call, each failing with file:line: text.

    `options` gives the preprocessor pass the build's own macros (arch, fast math, -D flags), so code
    cannot select a clean branch for the check and another for the build; `source_bytes`, the bytes
    the build compiles, so a file rewritten in between cannot be checked clean and built dirty.
    """
    options = options or BuildOptions()
    source = Path(source)
    if source_bytes is None:
        try:
            source_bytes = source.read_bytes()
        except OSError as exc:
            raise BuildInputError(f"cannot read {source}: {exc.strerror or exc}") from None
    text = source_bytes.decode("utf-8", "replace")
    original_lines = text.split("\n")
    spliced = splice(text)
    raw = Scan(lex(spliced), list(range(1, spliced.count("\n") + 2)))

    try:
        nvcc: str | None = find_nvcc(options.nvcc)
    except BuildInputError:
        nvcc = None
    toolkit = (toolkit_include_dirs(nvcc) or None) if nvcc else None

    findings = list(_findings(raw, toolkit))
    if nvcc is None:
        note = "source text only: no nvcc for the preprocessor pass"
    else:
        pre = preprocess(source_bytes, build_name(source), nvcc, options)
        note = ""
        findings += _resolved_include_findings(pre, toolkit)
        if pre.scan is not None:
            findings += _findings(pre.scan, None, directives=False)
        else:
            # Not accepted unseen: a file the preprocessor rejects here must not pass on the build's word.
            findings.append(Finding("forbidden-call", 0, f"{pre.note}; the macro-expanded source was not checked"))
    return _to_checks(findings, source, original_lines, note)


def _findings(scan: Scan, toolkit: list[Path] | None, *, directives: bool = True) -> Iterable[Finding]:
    if directives:  # the preprocessor has consumed the directives; its markers are judged separately
        yield from _directive_findings(scan, toolkit)
    yield from _identifier_findings(scan)
    yield from _string_findings(scan)
    yield from _asm_findings(scan)
    yield from _attribute_findings(scan)
    yield from _entry_lookup_findings(scan)


def _to_checks(findings: list[Finding], source: Path, lines: list[str], note: str) -> list[Check]:
    checks = []
    for name in SOURCE_CHECKS:
        # A finding seen in the source and again after macro expansion is reported once.
        first: dict[tuple[int, str], Finding] = {}
        for f in findings:
            if f.check == name:
                first.setdefault((f.line, f.reason.removesuffix(_EXPANDED)), f)
        unique = list(first.values())
        unique.sort(key=lambda f: f.line)
        details = [f"{source}:{f.line}: {_snippet(lines, f.line)}  [{f.reason}]" if f.line else f"{source}: {f.reason}"
                   for f in unique[:MAX_FINDINGS]]
        if len(unique) > MAX_FINDINGS:
            details.append(f"... and {len(unique) - MAX_FINDINGS} more")
        if not unique and note:
            details.append(note)
        checks.append(Check(name, not unique, "\n".join(details)))
    return checks


def _snippet(lines: list[str], line: int) -> str:
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return text if len(text) <= 120 else text[:117] + "..."


def binary_checks(library: Path, entry_symbols: Sequence[str]) -> list[Check]:
    """entry-point, imported-symbols and exported-symbols, from the library's dynamic symbol table.

    Without nm both checks fail, saying so: a library the judge could not inspect is not accepted.
    """
    library = Path(library)
    try:
        defined = dynamic_symbols(library, defined=True)
        imported = dynamic_symbols(library, defined=False)
    except ToolError as exc:
        detail = f"{exc}: the library's symbols could not be inspected, so it is not accepted"
        return [Check(name, False, detail) for name in BINARY_CHECKS]

    functions = {name for kind, name in defined if kind in EXPORTED_FUNCTION_KINDS}
    others = {name: kind for kind, name in defined if kind not in EXPORTED_FUNCTION_KINDS}
    problems = []
    for symbol in entry_symbols:
        if symbol in functions:
            continue
        if symbol in others:
            problems.append(f"{symbol} is exported as nm type {others[symbol]!r}, not as a function")
        else:
            problems.append(f"{symbol} is not exported with C linkage (declare it extern \"C\")")
    entry = Check("entry-point", not problems, "; ".join(problems))

    bad = sorted({f"{name} ({family})" for kind, name in imported
                  if (family := imported_symbol_family(name, weak=kind in "wv")) is not None})
    imports = Check("imported-symbols", not bad, ("imports " + ", ".join(bad)) if bad else "")

    shadowing = sorted(name for kind, name in defined if name not in entry_symbols and _shadows_a_library(name))
    exports = Check("exported-symbols", not shadowing,
                    ("defines " + ", ".join(shadowing) + ", which belong to the CUDA or system libraries")
                    if shadowing else "")
    return [entry, imports, exports]


# Weak imports resolve to whatever the process has loaded (torch brings cuBLAS and cuDNN along), so
# only the ones every C++ shared library carries are allowed.
_ALLOWED_WEAK = re.compile(r"_ITM_deregisterTMCloneTable|_ITM_registerTMCloneTable|__gmon_start__|__cxa_finalize"
                           r"|_Jv_RegisterClasses|__?pthread_\w+")
# An export with one of these names could stand in for the real function (the harness's timing calls,
# the allocator, the clock) wherever the library is loaded with global symbols.
_SHADOWED = re.compile(r"cuda\w+|cu[A-Z]\w*|__cuda\w+|nccl\w+|cublas\w*|cudnn\w*|(?:malloc|calloc|realloc|free"
                       r"|memcpy|memmove|memset|clock_gettime|gettimeofday|time|clock|nanosleep|usleep|sleep"
                       r"|sched_yield|pthread_\w+|dlopen|dlsym|abort|exit|_exit|atexit|__cxa_\w+|__libc_\w+)")


def _shadows_a_library(name: str) -> bool:
    return _SHADOWED.fullmatch(name) is not None or name in _FORBIDDEN


def imported_symbol_family(name: str, *, weak: bool = False) -> str | None:
    """The forbidden family an imported symbol belongs to, or None."""
    if name in _FORBIDDEN:
        return _FORBIDDEN[name]
    if _FORBIDDEN_PATTERN.fullmatch(name):
        return "runtime module loading"
    if name.startswith("_Z") and any(part in name for part in _MANGLED_FILE_IO):
        return "file I/O"
    if _VENDOR_IN_STRING.match(name):
        return "vendor library"
    if weak and not _ALLOWED_WEAK.fullmatch(name):
        return "weak import, resolved from whatever the process has loaded"
    return None
