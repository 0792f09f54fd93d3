"""Build one kernel file into a shared library with nvcc, through a content-addressed cache.

The build never happens next to the user's source: the file's bytes are copied into a private temp
dir, so a local header beside it can neither be found nor change the result without changing the key.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from harness import confine, secret_env
from harness.result import BuildReport, CompileError

LIBRARY_NAME = "kernel.so"
REPORT_NAME = "report.json"
LOG_CAP = 64 * 1024  # bytes of compiler output kept in the report (head and tail)
CACHE_FORMAT = 1  # bump when the layout or the flags' meaning changes

# -cudart shared: the library then imports libc only for what the kernel's own code calls, which the
# binary checks inspect. --no-undefined: a missing symbol is a link error now, not a load failure later.
BASE_FLAGS = (
    "-O3",
    "-std=c++17",
    "--shared",
    "-Xcompiler",
    "-fPIC",
    "-cudart",
    "shared",
    "-lineinfo",
    "-Xptxas",
    "-v",
    "-Xlinker",
    "--no-undefined",
)


class BuildInputError(Exception):
    """Bad input to the build (nvcc missing, unreadable source, a disallowed flag): one line."""


@dataclass
class BuildOptions:
    arch: str | None = None  # "sm_90a"; None = detect
    fast_math: bool = False  # only if the task file allows it
    extra_flags: Sequence[str] = ()  # from the task file; validated against an allowlist
    timeout_s: float = 300.0
    cache_dir: Path | None = None
    nvcc: str | None = None


# ---------------------------------------------------------------------------------------------------
# Tool discovery


def find_nvcc(explicit: str | None = None) -> str:
    """The nvcc to use: the explicit one, $KSTUI_NVCC, nvcc on PATH, $CUDA_HOME/bin, /usr/local/cuda."""
    if explicit:
        found = shutil.which(explicit)
        if found is None:
            raise BuildInputError(f"nvcc not found at {explicit!r}")
        return found
    candidates = [os.environ.get("KSTUI_NVCC"), shutil.which("nvcc")]
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc"))
    candidates.append("/usr/local/cuda/bin/nvcc")
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise BuildInputError("nvcc not found: put it on PATH, or set KSTUI_NVCC or CUDA_HOME")


def _stamp(path: str) -> tuple[str, int, int]:
    """A tool's identity for a per-process memo: an upgraded or replaced binary is asked again."""
    try:
        st = os.stat(path)
    except OSError:
        return (path, 0, 0)
    return (path, st.st_mtime_ns, st.st_size)


def nvcc_version(nvcc: str) -> str:
    """nvcc's version, e.g. 'V13.0.88 cuda_13.0.r13.0/compiler.36424714_0' (part of the cache key).

    Asked once per nvcc binary and process: a serving harness builds and checks every request."""
    return _nvcc_version(_stamp(nvcc))


@functools.lru_cache(maxsize=8)
def _nvcc_version(stamp: tuple[str, int, int]) -> str:
    nvcc = stamp[0]
    try:
        proc = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildInputError(f"cannot run {nvcc} --version: {exc}") from None
    if proc.returncode != 0:
        raise BuildInputError(f"{nvcc} --version failed: {_first_line(proc.stderr or proc.stdout)}")
    release = re.search(r"\bV(\d+\.\d+\.\d+)", proc.stdout)
    build_id = re.search(r"^Build (\S+)", proc.stdout, re.M)
    if release is None:
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        if not lines:
            raise BuildInputError(f"{nvcc} --version printed nothing")
        return lines[-1].strip()
    return f"V{release.group(1)}" + (f" {build_id.group(1)}" if build_id else "")


_ARCHS: dict[tuple[str, int, int], str] = {}  # per nvidia-smi binary: a call costs tens of ms


def detect_arch() -> str:
    """$KSTUI_ARCH, else the first GPU's compute capability (9.0 -> sm_90a), else sm_90a.

    A GPU's answer is kept for the process (a serving harness builds and checks every request); a
    failed query is not, so it is asked again next time."""
    env = os.environ.get("KSTUI_ARCH")
    if env:
        return valid_arch(env.strip())
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "sm_90a"
    stamp = _stamp(smi)
    if stamp in _ARCHS:
        return _ARCHS[stamp]
    try:
        proc = subprocess.run(
            [smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return "sm_90a"
    match = re.match(r"\s*(\d+)\.(\d+)", proc.stdout) if proc.returncode == 0 else None
    if match is None:
        return "sm_90a"
    _ARCHS[stamp] = arch_from_compute_cap(int(match.group(1)), int(match.group(2)))
    return _ARCHS[stamp]


def arch_from_compute_cap(major: int, minor: int) -> str:
    # 9.0 and 10.0 get the arch-specific 'a' variant: wgmma, tcgen05 and setmaxnreg need it.
    if (major, minor) in ((9, 0), (10, 0)):
        return f"sm_{major}{minor}a"
    return f"sm_{major}{minor}"


def valid_arch(arch: str) -> str:
    if not re.fullmatch(r"sm_\d{2,3}[af]?", arch):
        raise BuildInputError(f"bad architecture {arch!r}: expected e.g. sm_90a")
    return arch


def gencode_flag(arch: str) -> str:
    arch = valid_arch(arch)
    return f"-gencode=arch=compute_{arch[3:]},code={arch}"


class ToolError(Exception):
    """A helper tool (nm) is missing or failed: one line."""


EXPORTED_FUNCTION_KINDS = frozenset("TW")  # nm's letters for a defined (possibly weak) function


def dynamic_symbols(library: Path, *, defined: bool) -> list[tuple[str, str]]:
    """(nm type letter, name without @version) of the library's dynamic symbols, defined or imported."""
    nm = shutil.which("nm")
    if nm is None:
        raise ToolError("nm (binutils) not found")
    which = "--defined-only" if defined else "--undefined-only"
    try:
        proc = subprocess.run([nm, "-D", which, str(library)], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(f"nm failed: {exc}") from None
    if proc.returncode != 0:
        raise ToolError(f"nm failed on {library.name}: {_first_line(proc.stderr)}")
    symbols = []
    for line in proc.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 2 and len(fields[-2]) == 1:
            symbols.append((fields[-2], fields[-1].split("@", 1)[0]))
    return symbols


def toolkit_include_dirs(nvcc: str) -> list[Path]:
    """The include dirs nvcc itself passes to its compilers (from --dryrun), else <toolkit>/include."""
    dirs: list[Path] = []
    try:
        proc = subprocess.run([nvcc, "--dryrun", "-E", "-x", "cu", os.devnull], capture_output=True, text=True,
                              timeout=60)
        text = proc.stdout + proc.stderr
    except (OSError, subprocess.TimeoutExpired):
        text = ""
    for line in text.splitlines():
        if re.match(r"#\$ (?:SYSTEM_)?INCLUDES=", line):
            for a, b in re.findall(r'"-I([^"]+)"|"-isystem" "([^"]+)"', line):
                dirs.append(Path(a or b))
    if not dirs:
        root = Path(os.path.realpath(nvcc)).parent.parent
        dirs = [root / "include", *sorted((root / "targets").glob("*/include"))]
    return [Path(os.path.realpath(d)) for d in dirs if d.is_dir()]


# ---------------------------------------------------------------------------------------------------
# Extra flags: an allowlist, because a flag can link, include or rewrite anything.

_NUMBER = r"[+-]?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)[uUlLfF]*"
_PTXAS_OPTION = re.compile(
    r"-O[0-3]|--?v(?:erbose)?|--?warn-spills|--warn-on-spills|--?warn-lmem-usage|--warn-on-local-memory-usage"
    r"|--?warn-double-usage|--warn-on-double-precision-use|--?allow-expensive-optimizations(?:=(?:true|false))?"
    r"|--?(?:dlcm|def-load-cache)=(?:ca|cg|cv|cs)|--?(?:dscm|def-store-cache)=(?:wb|cg|cs|wt)"
    r"|--?maxrregcount=\d+|--?disable-optimizer-constants"
)
_SINGLE_FLAGS = re.compile(
    r"--?maxrregcount=\d+"
    r"|-D[A-Za-z_]\w*(?:=(?:" + _NUMBER + r")?)?"
    r"|--?extra-device-vectorization|--?restrict|--?expt-relaxed-constexpr|--?expt-extended-lambda"
    r"|--?extended-lambda|--?resource-usage|-Wno-deprecated-gpu-targets|-Wno-deprecated-declarations"
    r"|-w|--disable-warnings"
)
_PAIR_FLAGS = {"-maxrregcount": re.compile(r"\d+"), "--maxrregcount": re.compile(r"\d+")}
_PTXAS_PREFIXES = ("-Xptxas=", "--ptxas-options=")
_PTXAS_PAIRS = ("-Xptxas", "--ptxas-options")

_REJECT_REASONS = (
    (re.compile(r"--use[_-]fast[_-]math|--?ftz.*|--?prec[_-](?:div|sqrt).*|--?fmad.*|-ffast-math"),
     "fast math is set only by the task file's fast_math option"),
    (re.compile(r"-l.*|-L.*|--library.*|-Xlinker.*|--linker-options.*|-Wl,.*|-Xnvlink.*|--?lib.*"),
     "linking other libraries is not allowed"),
    (re.compile(r"-I.*|-isystem.*|-include.*|--pre-include.*|--include-path.*|-iquote.*|-idirafter.*"),
     "the kernel must be one file: no include paths or forced includes"),
    (re.compile(r"-Xcompiler.*|--compiler-options.*|-ccbin.*|--compiler-bindir.*|-Xcicc.*|-Xarchive.*"),
     "host compiler options are not allowed"),
    (re.compile(r"-o|--output-file.*|-o.+|--keep.*|-odir.*|--output-directory.*|-MF.*|-M.*"),
     "the harness chooses the outputs"),
    (re.compile(r"-arch.*|--gpu-architecture.*|-gencode.*|--generate-code.*|-code.*|--gpu-code.*"),
     "the architecture comes from the harness (KSTUI_ARCH or the detected GPU)"),
)


def validate_extra_flags(flags: Sequence[str]) -> list[str]:
    """The flags as nvcc arguments, or BuildInputError naming the first disallowed one."""
    if isinstance(flags, str) or not isinstance(flags, Sequence):
        raise BuildInputError("extra flags must be a list of strings, e.g. [\"-maxrregcount=128\"]")
    out: list[str] = []
    i = 0
    while i < len(flags):
        flag = flags[i]
        if not isinstance(flag, str):
            raise BuildInputError(f"extra flag {flag!r} is not a string")
        nxt = flags[i + 1] if i + 1 < len(flags) else None
        if _SINGLE_FLAGS.fullmatch(flag):
            out.append(flag)
        elif flag in _PAIR_FLAGS and isinstance(nxt, str) and _PAIR_FLAGS[flag].fullmatch(nxt):
            out += [flag, nxt]
            i += 1
        elif flag.startswith(_PTXAS_PREFIXES):
            _check_ptxas(flag, flag.split("=", 1)[1])
            out.append(flag)
        elif flag in _PTXAS_PAIRS and isinstance(nxt, str):
            _check_ptxas(f"{flag} {nxt}", nxt)
            out += [flag, nxt]
            i += 1
        else:
            raise BuildInputError(f"extra flag {flag!r} is not allowed: {_reject_reason(flag)}")
        i += 1
    return out


def _check_ptxas(shown: str, options: str) -> None:
    for option in options.split(","):
        if not _PTXAS_OPTION.fullmatch(option):
            raise BuildInputError(
                f"extra flag {shown!r} is not allowed: ptxas option {option!r} is not on the allowlist"
            )


def _reject_reason(flag: str) -> str:
    for pattern, reason in _REJECT_REASONS:
        if pattern.fullmatch(flag):
            return reason
    if flag.startswith("-D"):
        return "-D takes an identifier and an optional numeric value"
    return "not on the allowlist (-maxrregcount=N, -DNAME[=NUMBER], -Xptxas=OPTIONS, --extra-device-vectorization, ...)"


def nvcc_flags(arch: str, options: BuildOptions) -> list[str]:
    """Every nvcc flag of a build except the input and output paths."""
    flags = [*BASE_FLAGS, gencode_flag(arch)]
    if options.fast_math:
        flags.append("--use_fast_math")
    return flags + validate_extra_flags(options.extra_flags)


# ---------------------------------------------------------------------------------------------------
# Reading nvcc's output


@dataclass
class PtxasStats:
    registers: int | None = None
    spills: int = 0
    smem_bytes: int | None = None
    stack_bytes: int | None = None


_REGISTERS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_STACK = re.compile(r"(\d+) bytes stack frame")
_SPILLS = re.compile(r"(\d+) bytes spill (?:stores|loads)")


def parse_ptxas(log: str) -> PtxasStats:
    """Registers, shared memory and stack frame: the max over functions; spills: summed, in bytes."""
    stats = PtxasStats()
    for line in log.splitlines():
        if (m := _REGISTERS.search(line)) is not None:
            stats.registers = max(stats.registers or 0, int(m.group(1)))
        if (m := _SMEM.search(line)) is not None:
            stats.smem_bytes = max(stats.smem_bytes or 0, int(m.group(1)))
        if (m := _STACK.search(line)) is not None:
            stats.stack_bytes = max(stats.stack_bytes or 0, int(m.group(1)))
        stats.spills += sum(int(x) for x in _SPILLS.findall(line))
    if stats.registers is not None and stats.smem_bytes is None:
        stats.smem_bytes = 0  # ptxas omits "bytes smem" when a kernel uses none
    return stats


_NVCC_ERROR = re.compile(
    r"^(?P<file>[^\s(][^(]*?)\((?P<line>\d+)\): (?:catastrophic )?error(?: #[\w-]+)?: (?P<msg>.*)$"
)
_GCC_ERROR = re.compile(r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<msg>.*)$")
_LD_ERROR = re.compile(r"(?:undefined reference to|multiple definition of|cannot find) .*")
_TOOL_ERROR = re.compile(r"^(?P<tool>ptxas|nvcc|nvlink|fatbinary)(?: \S+)?\s*(?:error|fatal)\s*: (?P<msg>.*)$")


def parse_errors(log: str, source_name: str, shown_as: str) -> list[CompileError]:
    """Compile errors from nvcc's front end, the host compiler, the linker and ptxas.

    Errors in the build copy (`source_name`) are reported against the user's path (`shown_as`).
    """
    errors: list[CompileError] = []

    def where(file: str) -> str:
        return shown_as if os.path.basename(file) == source_name else file

    for raw in log.splitlines():
        line = raw.rstrip()
        if (m := _NVCC_ERROR.match(line)) or (m := _GCC_ERROR.match(line)):
            errors.append(CompileError(where(m.group("file")), int(m.group("line")), m.group("msg").strip()))
        elif (m := _TOOL_ERROR.match(line)) is not None:
            errors.append(CompileError(f"<{m.group('tool')}>", 0, m.group("msg").strip()))
        elif line.startswith(("/usr/bin/ld", "ld:", "ld.lld")) or ": undefined reference to" in line:
            if (m := _LD_ERROR.search(line)) is not None:
                errors.append(CompileError("<link>", 0, m.group(0).strip()))
    return errors


def cap_log(text: str, limit: int = LOG_CAP) -> str:
    """The head and tail of a long log, with a note of what was cut."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    head, tail = data[: limit * 3 // 4], data[-(limit // 4) :]
    cut = len(data) - len(head) - len(tail)
    note = f"\n... [{cut} bytes of compiler output omitted] ...\n"
    return head.decode("utf-8", "ignore") + note + tail.decode("utf-8", "ignore")


# ---------------------------------------------------------------------------------------------------
# The cache


def default_cache_dir() -> Path:
    if os.environ.get("KSTUI_CACHE_DIR"):
        return Path(os.environ["KSTUI_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kstui" / "build"


def cache_key(source_bytes: bytes, source_name: str, flags: Sequence[str], version: str, arch: str,
              entry_symbols: Sequence[str]) -> str:
    # The name matters too: __FILE__ and the compiler's messages carry it.
    parts = {
        "format": CACHE_FORMAT,
        "source": hashlib.sha256(source_bytes).hexdigest(),
        "name": source_name,
        "flags": list(flags),
        "nvcc": version,
        "arch": arch,
        "entry": list(entry_symbols),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _load_entry(entry: Path) -> BuildReport | None:
    """The saved report of a complete, intact entry; None for a missing, partial or corrupt one."""
    try:
        saved = json.loads((entry / REPORT_NAME).read_text())
        if saved.get("library_sha256") != file_sha256(entry / LIBRARY_NAME):
            return None
        report = dict(saved["report"])
        report["errors"] = [CompileError(**e) for e in report.get("errors", [])]
        return BuildReport(**report)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def private_copy(library: Path, into: Path) -> tuple[Path, str]:
    """A copy of a built library in `into` (a directory only the caller writes) and its SHA-256,
    checked against the hash its cache entry recorded when it was built: an entry changed since
    (a cache another process could write) is refused, and what is checked and run is this copy."""
    target = into / LIBRARY_NAME
    try:
        recorded = json.loads((library.parent / REPORT_NAME).read_text()).get("library_sha256")
        shutil.copyfile(library, target)
    except (OSError, ValueError, AttributeError) as exc:
        raise BuildInputError(f"cannot read the built library {library}: {getattr(exc, 'strerror', None) or exc}") from None
    digest = file_sha256(target)
    if digest != recorded:
        _discard(library.parent)
        raise BuildInputError(f"the build cache entry {library.parent} changed after it was written: "
                              "discarded; evaluate again to rebuild")
    return target, digest


def _discard(entry: Path) -> None:
    """Move a bad entry out of the way atomically, then delete it (a concurrent reader sees all or none)."""
    trash = entry.with_name(f"{entry.name}.trash-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.rename(entry, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def _store(cache_dir: Path, entry: Path, library: Path, report: BuildReport) -> Path:
    """Publish library + report under `entry` with one rename; returns the entry's library path."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    try:
        shutil.copyfile(library, staging / LIBRARY_NAME)
        saved = {"library_sha256": file_sha256(staging / LIBRARY_NAME), "report": asdict(report)}
        (staging / REPORT_NAME).write_text(json.dumps(saved))
        try:
            os.rename(staging, entry)
        except OSError:
            # A concurrent build of the same key won; its entry is as good as ours.
            if _load_entry(entry) is None:
                _discard(entry)
                os.rename(staging, entry)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return entry / LIBRARY_NAME


# ---------------------------------------------------------------------------------------------------
# The build


def build(source: Path, entry_symbols: Sequence[str], options: BuildOptions,
          source_bytes: bytes | None = None) -> tuple[BuildReport, Path | None]:
    """Build `source` (or fetch it from the cache): the report and the library's path (None on failure).

    `source_bytes`, when given, are compiled in place of the file's current bytes (the ones checked).
    """
    started = time.monotonic()
    source = Path(source)
    if source_bytes is None:
        try:
            source_bytes = source.read_bytes()
        except OSError as exc:
            raise BuildInputError(f"cannot read {source}: {exc.strerror or exc}") from None
    for symbol in entry_symbols:
        if not re.fullmatch(r"[A-Za-z_]\w*", symbol):
            raise BuildInputError(f"bad entry symbol {symbol!r}")
    nvcc = find_nvcc(options.nvcc)
    version = nvcc_version(nvcc)
    arch = valid_arch(options.arch) if options.arch else detect_arch()
    flags = nvcc_flags(arch, options)
    name = build_name(source)
    key = cache_key(source_bytes, name, flags, version, arch, entry_symbols)
    cache_dir = Path(options.cache_dir) if options.cache_dir else default_cache_dir()
    entry = cache_dir / key[:2] / key

    cached = _load_entry(entry)
    if cached is not None:
        cached.cached = True
        cached.seconds = time.monotonic() - started
        return cached, entry / LIBRARY_NAME
    if entry.exists():
        _discard(entry)

    with tempfile.TemporaryDirectory(prefix="kstui-build-") as work:
        workdir = Path(work)
        (workdir / name).write_bytes(source_bytes)
        output = workdir / LIBRARY_NAME
        report = _compile(nvcc, version, flags, workdir, name, output, str(source), options.timeout_s)
        if report.ok:
            missing = _missing_entry_symbols(output, entry_symbols)
            if missing:
                report.ok = False
                report.errors = [
                    CompileError(str(source), 0, f"entry point {s!r} is not defined; declare it extern \"C\"")
                    for s in missing
                ]
        report.seconds = time.monotonic() - started
        if not report.ok:
            return report, None
        try:
            library = _store(cache_dir, entry, output, report)
        except OSError as exc:
            raise BuildInputError(f"cannot write the build cache {cache_dir}: {exc.strerror or exc}") from None
    return report, library


def build_name(source: Path) -> str:
    """The file name the build copy gets: the user's own when it is tame (messages then match)."""
    name = source.name
    if re.fullmatch(r"[A-Za-z0-9_][\w.+-]*", name):
        return name
    return "kernel.cu"


def confined_compiler(argv: list[str], workdir: Path) -> list[str]:
    """nvcc's command line inside bubblewrap where it works: the kernel's #include then reaches only
    the system's and the toolkit's files and the work directory, never a key in a home directory (a
    compile error quotes the lines of what it includes, and the log goes back to the agent)."""
    box, _ = confine.detect()
    if box is None:
        return argv
    toolkit = [Path(os.path.realpath(argv[0])).parent.parent]
    toolkit += [Path(os.environ[n]) for n in ("CUDA_HOME", "CUDA_PATH") if os.path.isabs(os.environ.get(n, ""))]
    return box.wrap(argv, confine.Mounts(ro=tuple(toolkit), rw=(workdir,)), workdir)


def _compile(nvcc: str, version: str, flags: list[str], workdir: Path, name: str, output: Path,
             shown_as: str, timeout_s: float) -> BuildReport:
    cmd = confined_compiler([nvcc, *flags, "-x", "cu", "-o", str(output), name], workdir)
    report = BuildReport(ok=False, flags=list(flags), nvcc=version)
    try:
        proc = subprocess.Popen(
            cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            env=secret_env.scrubbed(),  # the compiler reads the agent's code: no secret within its reach
        )
    except OSError as exc:
        raise BuildInputError(f"cannot run {nvcc}: {exc.strerror or exc}") from None
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a compiler that left the group still holds the pipe
            out = b""
        message = f"compile timed out after {timeout_s:g} s"
        report.log = cap_log(message + "\n" + out.decode("utf-8", "replace"))
        report.errors = [CompileError(shown_as, 0, message)]
        return report
    log = out.decode("utf-8", "replace")
    report.log = cap_log(log)
    stats = parse_ptxas(log)
    report.registers, report.spills = stats.registers, stats.spills
    report.smem_bytes, report.stack_bytes = stats.smem_bytes, stats.stack_bytes
    report.ok = proc.returncode == 0 and output.is_file()
    if not report.ok:
        report.errors = parse_errors(log, name, shown_as) or [
            CompileError(shown_as, 0, f"nvcc exited with status {proc.returncode}: {_first_line(log)}")
        ]
    return report


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL nvcc and every compiler it started (they share its session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _missing_entry_symbols(library: Path, entry_symbols: Sequence[str]) -> list[str]:
    try:
        exported = {name for kind, name in dynamic_symbols(library, defined=True) if kind in EXPORTED_FUNCTION_KINDS}
    except ToolError:
        return []  # binary_checks reports the missing nm as a failed check
    return [s for s in entry_symbols if s not in exported]


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""
