"""The spec tasks' wrong-kernel suite and the KernelBench examples' kernels, without a GPU.

Every attention case of tests/kernels has a counterpart on a spec example (or is named as attention's
own); every mutation applies to the example's kernel as it is now; every case builds except the one
that must not, and its task file validates; the check cases fail a check; the examples' kernels build
clean and pass every check. That the harness gives each case its verdict needs a GPU:
tests/test_spec_gpu.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from kernels.spec_suite import ATTENTION_ONLY, EXAMPLES, SPEC_MUTATIONS, SPEC_STANDALONE, SpecCase, example_files, spec_cases
from kernels.suite import STANDALONE, load_mutations, read_standalone
from test_kernel_suite import ARCH, Built, _failed_checks, _full_build, _quick_build

from harness.build import BuildInputError, BuildOptions, find_nvcc
from harness.taskfile import load_task_file

EXAMPLE_KERNELS = sorted(EXAMPLES.glob("*/*.cu"))


def _symbol(kernel: Path) -> str:
    spec = load_task_file(kernel).spec
    assert spec is not None
    return spec.symbol


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> list[SpecCase]:
    return spec_cases(tmp_path_factory.mktemp("spec-wrong-kernels"))


def test_every_attention_case_has_a_counterpart(cases: list[SpecCase]) -> None:
    attention = [m.name for m in load_mutations()] + [read_standalone(p).name for p in STANDALONE.glob("*.cu")]
    covered = {name for case in cases for name in case.counterparts}
    assert not covered - set(attention), f"counterparts of no attention case: {sorted(covered - set(attention))}"
    missing = [name for name in attention if name not in covered and name not in ATTENTION_ONLY]
    assert not missing, f"attention cases without a spec counterpart: {missing}"


def test_each_counterpart_expects_a_verdict_its_attention_case_allows(cases: list[SpecCase]) -> None:
    attention = {m.name: m.expect for m in load_mutations()}
    attention |= {read_standalone(p).name: read_standalone(p).expect for p in STANDALONE.glob("*.cu")}
    for case in cases:
        for name in case.counterparts:
            assert set(case.kernel.expect) & set(attention[name]), (case.kernel.name, name)


def test_every_case_is_materialised_with_a_valid_task_file(cases: list[SpecCase]) -> None:
    assert {c.example for c in cases} == {"softmax", "argmax"}
    for case in cases:
        kernel, _, _ = example_files(case.example)
        tf = load_task_file(case.kernel.path)
        assert tf.spec is not None and tf.spec.symbol == _symbol(kernel)
        assert tf.spec.symbol in case.kernel.path.read_text(), case.kernel.name


def test_every_mutation_changes_its_example(cases: list[SpecCase]) -> None:
    mutated = {m.name for m in load_mutations(SPEC_MUTATIONS)}
    for case in cases:
        if case.kernel.name in mutated:
            kernel, _, _ = example_files(case.example)
            assert case.kernel.path.read_text() != kernel.read_text(), case.kernel.name


@pytest.fixture(scope="module")
def builds(cases: list[SpecCase], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[Built]]]:
    try:
        nvcc = find_nvcc()
    except BuildInputError as exc:
        pytest.skip(str(exc))
    options = BuildOptions(arch=ARCH, cache_dir=tmp_path_factory.mktemp("spec-build-cache"))
    out = tmp_path_factory.mktemp("spec-quick-builds")
    mutants = {m.name for m in load_mutations(SPEC_MUTATIONS)}
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {k.stem: pool.submit(_full_build, k, _symbol(k), options) for k in EXAMPLE_KERNELS}
        for case in cases:
            symbol = _symbol(case.kernel.path)
            if case.kernel.name in mutants:
                futures[case.kernel.name] = pool.submit(_quick_build, nvcc, case.kernel.path, out / f"{case.kernel.name}.so")
            else:
                futures[case.kernel.name] = pool.submit(_full_build, case.kernel.path, symbol, options)
        yield futures
        for future in futures.values():
            future.cancel()


@pytest.mark.parametrize("kernel", EXAMPLE_KERNELS, ids=lambda k: k.stem)
def test_example_kernel_builds_clean_and_passes_every_check(builds, kernel: Path) -> None:
    built = builds[kernel.stem].result()
    assert built.ok and built.report is not None, built.log
    assert built.report.spills == 0 and not built.report.stack_bytes, built.log
    assert "warning" not in built.log.lower(), built.log
    assert _failed_checks(kernel, built.library, _symbol(kernel)) == set()


@pytest.mark.parametrize("name", [m.name for m in load_mutations(SPEC_MUTATIONS)]
                         + [read_standalone(p).name for p in sorted(SPEC_STANDALONE.glob("*.cu"))])
def test_case_builds_unless_it_must_not(builds, cases: list[SpecCase], name: str) -> None:
    case = next(c for c in cases if c.kernel.name == name)
    built = builds[name].result()
    if case.kernel.expect == ["build"]:
        assert not built.ok and built.report is not None
        assert any(e.line > 0 and Path(e.file).name == f"{name}.cu" for e in built.report.errors), built.report.errors
    else:
        assert built.ok, f"{name} should build:\n{built.log}"


def test_check_cases_fail_an_expected_check(cases: list[SpecCase], builds) -> None:
    check_cases = [c for c in cases if all(e.startswith("check:") for e in c.kernel.expect)]
    assert len(check_cases) == 3
    for case in check_cases:
        failed = _failed_checks(case.kernel.path, builds[case.kernel.name].result().library, _symbol(case.kernel.path))
        expected = {e.removeprefix("check:") for e in case.kernel.expect}
        assert failed & expected, f"{case.kernel.name}: failed {sorted(failed)}, expected one of {sorted(expected)}"
