"""The wrong-kernel suite and the starting kernels, without a GPU.

Every mutation applies to the starting kernel as it is now; every case builds with the harness's own
nvcc flags except the one that must not; the starting kernels build with no warning and no spill.
(That the harness gives each case its verdict needs a GPU: the lead's GPU test runs them.)
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from kernels.suite import (
    STANDALONE,
    STARTING_KERNEL,
    Mutation,
    Replacement,
    SuiteError,
    WrongKernel,
    apply_mutation,
    load_mutations,
    read_standalone,
    wrong_kernels,
)

from harness.build import BuildInputError, BuildOptions, build, find_nvcc, gencode_flag, nvcc_flags
from harness.checks import binary_checks, source_checks
from harness.result import BuildReport

WORKSPACE = STARTING_KERNEL.parent
STARTING = {"flash_fwd": "kstui_attention_fwd", "rmsnorm": "kstui_rmsnorm_fwd"}
ARCH = "sm_90a"  # the H200's; nvcc compiles for it without a device

# The cases issue 2 names; a rename or removal must be deliberate.
REQUIRED = {
    "unwritten-tail-rows": "verdict:unwritten",
    "lse-unwritten": "verdict:unwritten",
    "top-left-causal": "verdict:wrong",
    "zeros-for-awkward-shapes": "verdict:wrong",
    "no-running-max": "verdict:nan",
    "writes-into-q": "verdict:input-mutated",
    "cached-by-pointer": "verdict:stale-result",
    "private-stream": "verdict:hidden-work",
    "dlopen-vendor-library": "check:vendor-library",
    "illegal-address": "verdict:crash",
    "trap": "verdict:crash",
    "infinite-loop": "verdict:timeout",
    "compile-error": "build",
    "unsupported-head-dims": "verdict:error",
}


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> list[WrongKernel]:
    return wrong_kernels(tmp_path_factory.mktemp("wrong-kernels"))


def test_every_mutation_applies_and_changes_the_kernel() -> None:
    base = STARTING_KERNEL.read_text()
    mutations = load_mutations()
    assert mutations
    for mutation in mutations:
        mutated = apply_mutation(base, mutation)  # raises unless each old text occurs exactly once
        assert mutated != base, mutation.name
        for r in mutation.replace:
            assert r.new in mutated, mutation.name


def test_apply_rejects_an_old_text_that_is_missing_or_ambiguous() -> None:
    missing = Mutation("m", ["verdict:wrong"], "why", [Replacement("absent", "x")])
    twice = Mutation("m", ["verdict:wrong"], "why", [Replacement("a", "b")])
    with pytest.raises(SuiteError, match="occurs 0 times"):
        apply_mutation("abc", missing)
    with pytest.raises(SuiteError, match="occurs 2 times"):
        apply_mutation("a a", twice)


def test_the_suite_covers_every_required_case(cases) -> None:
    by_name = {c.name: c for c in cases}
    for name, verdict in REQUIRED.items():
        assert name in by_name, f"the suite lost {name!r}"
        assert verdict in by_name[name].expect, f"{name}: expects {by_name[name].expect}, not {verdict}"
    for case in cases:
        assert case.path.is_file() and case.why
        assert "kstui_attention_fwd" in case.path.read_text(), case.name


def test_bad_expectations_and_headers_are_rejected(tmp_path: Path) -> None:
    toml = tmp_path / "m.toml"
    toml.write_text('[[mutation]]\nname = "x"\nexpect = ["verdict:slow"]\nwhy = "w"\n'
                    '[[mutation.replace]]\nold = "a"\nnew = "b"\n')
    with pytest.raises(SuiteError, match="unknown expectation 'verdict:slow'"):
        load_mutations(toml)
    toml.write_text('[[mutation]]\nname = "x"\nexpect = ["verdict:ok"]\nwhy = "w"\n'
                    '[[mutation.replace]]\nold = "a"\nnew = "b"\n')
    with pytest.raises(SuiteError, match="unknown expectation 'verdict:ok'"):
        load_mutations(toml)
    headless = tmp_path / "headless.cu"
    headless.write_text("// a kernel\nint x;\n")
    with pytest.raises(SuiteError, match="should start with"):
        read_standalone(headless)


def test_standalone_headers_parse() -> None:
    files = sorted(STANDALONE.glob("*.cu"))
    assert files
    for path in files:
        case = read_standalone(path)
        assert case.expect and case.why, path.name


# ---------------------------------------------------------------------------------------------------
# Builds (nvcc needed, no GPU), two at a time on a pool; each test waits only for its own build.
#
# The starting kernels and the small standalone files get the harness's full build. The mutants of the
# starting kernel get its flags with NVVM optimisation off and PTX embedded instead of ptxas: the
# C++ front end, code generation, the host compile and the --no-undefined link all still run, at a
# third of the CPU time (a mutation changes a few lines; optimisation cannot make them uncompilable).


@dataclass
class Built:
    ok: bool
    library: Path | None
    log: str
    report: BuildReport | None = None  # where the harness's own build() did it


def _quick_flags(arch: str) -> list[str]:
    full = gencode_flag(arch)
    virtual = f"-gencode=arch=compute_{arch[3:]},code=compute_{arch[3:]}"
    return [virtual if f == full else f for f in nvcc_flags(arch, BuildOptions())] + ["-Xcicc", "-O0"]


def _quick_build(nvcc: str, source: Path, output: Path) -> Built:
    cmd = [nvcc, *_quick_flags(ARCH), "-x", "cu", "-o", str(output), str(source)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    ok = proc.returncode == 0
    return Built(ok, output if ok else None, proc.stdout + proc.stderr)


def _full_build(source: Path, entry: str, options: BuildOptions) -> Built:
    report, library = build(source, [entry], options)
    return Built(report.ok, library, report.log, report)


@pytest.fixture(scope="module")
def builds(cases: list[WrongKernel], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[Built]]]:
    try:
        nvcc = find_nvcc()
    except BuildInputError as exc:
        pytest.skip(str(exc))
    options = BuildOptions(arch=ARCH, cache_dir=tmp_path_factory.mktemp("build-cache"))
    out = tmp_path_factory.mktemp("quick-builds")
    mutants = {m.name for m in load_mutations()}
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            name: pool.submit(_full_build, WORKSPACE / f"{name}.cu", entry, options) for name, entry in STARTING.items()
        }
        for case in cases:
            if case.name in mutants:
                futures[case.name] = pool.submit(_quick_build, nvcc, case.path, out / f"{case.name}.so")
            else:
                futures[case.name] = pool.submit(_full_build, case.path, "kstui_attention_fwd", options)
        yield futures
        for future in futures.values():
            future.cancel()


@pytest.mark.parametrize("name", sorted(STARTING))
def test_starting_kernel_builds_clean(builds, name: str) -> None:
    built = builds[name].result()
    assert built.ok and built.report is not None, built.log
    assert built.report.spills == 0, built.log
    assert not built.report.stack_bytes, built.log
    assert "warning" not in built.log.lower(), built.log


@pytest.mark.parametrize("mutation", [m.name for m in load_mutations()])
def test_mutant_builds(builds, mutation: str) -> None:
    built = builds[mutation].result()
    assert built.ok, built.log


@pytest.mark.parametrize("path", sorted(STANDALONE.glob("*.cu")), ids=lambda p: p.stem)
def test_standalone_builds_unless_it_must_not(builds, path: Path) -> None:
    case = read_standalone(path)
    built = builds[case.name].result()
    if case.expect == ["build"]:
        assert not built.ok and built.report is not None, f"{case.name} should not build"
        errors = built.report.errors
        assert any(e.line > 0 and Path(e.file).name == f"{case.name}.cu" for e in errors), errors
    else:
        assert "build" not in case.expect, f"{case.name}: 'build' must be its only expectation"
        assert built.ok, f"{case.name} should build:\n{built.log}"


# ---------------------------------------------------------------------------------------------------
# Static and binary checks need no GPU: the cases that expect a failed check must get one of them, and
# the starting kernels must pass every check.


def _failed_checks(source: Path, library: Path | None, entry: str) -> set[str]:
    checks = source_checks(source, BuildOptions(arch=ARCH))
    if library is not None:
        checks += binary_checks(library, [entry])
    return {c.name for c in checks if not c.ok}


@pytest.mark.parametrize("name", sorted(STARTING))
def test_starting_kernel_passes_every_check(builds, name: str) -> None:
    built = builds[name].result()
    assert built.library is not None, built.log
    assert _failed_checks(WORKSPACE / f"{name}.cu", built.library, STARTING[name]) == set()


def test_check_cases_fail_an_expected_check(cases, builds) -> None:
    check_cases = [c for c in cases if all(e.startswith("check:") for e in c.expect)]
    assert check_cases
    for case in check_cases:
        failed = _failed_checks(case.path, builds[case.name].result().library, "kstui_attention_fwd")
        expected = {e.removeprefix("check:") for e in case.expect}
        assert failed & expected, f"{case.name}: failed checks {sorted(failed)}, expected one of {sorted(expected)}"
