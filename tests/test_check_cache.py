"""harness.check_cache: an unchanged kernel's static checks are kept, and nothing else is."""

from __future__ import annotations

import hashlib
import json
import textwrap

import pytest
from nvcc_support import needs_nvcc

from harness import check_cache, checks
from harness.build import BuildOptions, build
from harness.runner import EvalOptions, evaluate

CLEAN = textwrap.dedent(
    r"""
    #include <cuda_runtime.h>
    __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }
    extern "C" int kstui_test_entry(float* x, void* stream) {
      k<<<1, 32, 0, (cudaStream_t)stream>>>(x);
      return (int)cudaGetLastError();
    }
    """
)
DIRTY = CLEAN.replace("#include <cuda_runtime.h>", "#include <cuda_runtime.h>\n#include <dlfcn.h>").replace(
    "return (int)cudaGetLastError();", 'dlopen("libcudnn.so", 1);\n  return (int)cudaGetLastError();')


@pytest.fixture
def counted(monkeypatch):
    """How often the preprocessor and nm really ran."""
    calls = {"preprocess": 0, "nm": 0}
    real_pre, real_nm = checks.preprocess, checks.dynamic_symbols

    def preprocess(*args, **kwargs):
        calls["preprocess"] += 1
        return real_pre(*args, **kwargs)

    def dynamic_symbols(*args, **kwargs):
        calls["nm"] += 1
        return real_nm(*args, **kwargs)

    monkeypatch.setattr(checks, "preprocess", preprocess)
    monkeypatch.setattr(checks, "dynamic_symbols", dynamic_symbols)
    return calls


def _options(tmp_path):
    return BuildOptions(arch="sm_90a", cache_dir=tmp_path / "cache")


@needs_nvcc
def test_unchanged_source_is_checked_once(tmp_path, counted):
    src = tmp_path / "kernel.cu"
    src.write_text(CLEAN)
    first = check_cache.source_checks(src, _options(tmp_path), src.read_bytes())
    again = check_cache.source_checks(src, _options(tmp_path), src.read_bytes())
    assert all(c.ok for c in first) and again == first
    assert counted["preprocess"] == 1


@needs_nvcc
def test_changed_bytes_path_flags_or_code_are_checked_afresh(tmp_path, counted, monkeypatch):
    src = tmp_path / "kernel.cu"
    src.write_text(CLEAN)
    check_cache.source_checks(src, _options(tmp_path), src.read_bytes())
    check_cache.source_checks(src, _options(tmp_path), (CLEAN + "\n// edited\n").encode())
    assert counted["preprocess"] == 2
    other = tmp_path / "other.cu"
    other.write_text(CLEAN)
    check_cache.source_checks(other, _options(tmp_path), other.read_bytes())
    assert counted["preprocess"] == 3
    flagged = BuildOptions(arch="sm_90a", cache_dir=tmp_path / "cache", extra_flags=("-DFOO=1",))
    check_cache.source_checks(src, flagged, src.read_bytes())
    assert counted["preprocess"] == 4
    monkeypatch.setattr(check_cache, "_code_hash", lambda: "a newer checker")
    check_cache.source_checks(src, _options(tmp_path), src.read_bytes())
    assert counted["preprocess"] == 5


@needs_nvcc
def test_failures_are_not_kept_and_damaged_entries_are_checked_again(tmp_path, counted):
    src = tmp_path / "kernel.cu"
    src.write_text(DIRTY)
    for _ in range(2):
        found = {c.name: c for c in check_cache.source_checks(src, _options(tmp_path), src.read_bytes())}
        assert not found["forbidden-call"].ok and "dlopen" in found["forbidden-call"].detail
    assert counted["preprocess"] == 2
    assert not (tmp_path / "cache" / "checks").exists()

    src.write_text(CLEAN)
    check_cache.source_checks(src, _options(tmp_path), src.read_bytes())
    (entry,) = (tmp_path / "cache" / "checks").iterdir()
    entry.write_text("{not json")
    assert all(c.ok for c in check_cache.source_checks(src, _options(tmp_path), src.read_bytes()))
    assert counted["preprocess"] == 4
    assert [c["ok"] for c in json.loads(entry.read_text())] == [True] * len(checks.SOURCE_CHECKS)


@needs_nvcc
def test_the_bytes_given_are_checked_not_the_file(tmp_path):
    src = tmp_path / "kernel.cu"
    src.write_text(CLEAN)
    found = {c.name: c for c in checks.source_checks(src, _options(tmp_path), DIRTY.encode())}
    assert not found["forbidden-call"].ok


@needs_nvcc
def test_binary_checks_are_kept_per_library_content(tmp_path, counted):
    src = tmp_path / "kernel.cu"
    src.write_text(CLEAN)
    report, library = build(src, ["kstui_test_entry"], _options(tmp_path))
    assert report.ok, report.log
    first = check_cache.binary_checks(library, ["kstui_test_entry"], _options(tmp_path))
    assert all(c.ok for c in first)
    assert check_cache.binary_checks(library, ["kstui_test_entry"], _options(tmp_path)) == first
    assert counted["nm"] == 2  # defined and imported symbols, once
    missing = check_cache.binary_checks(library, ["kstui_other_entry"], _options(tmp_path))
    assert not {c.name: c for c in missing}["entry-point"].ok
    assert counted["nm"] == 4


@needs_nvcc
def test_an_evaluation_checks_and_builds_the_bytes_it_read(tmp_path, monkeypatch):
    """A kernel rewritten clean while its evaluation runs is still judged by what was read first."""
    kernel = tmp_path / "flash_fwd.cu"
    dirty = DIRTY.replace("kstui_test_entry", "kstui_attention_fwd")
    kernel.write_text(dirty)
    (tmp_path / "flash_fwd.toml").write_text('task = "attention"\n')
    real = check_cache.source_checks

    def rewrite_then_check(source, options, source_bytes):
        kernel.write_text(CLEAN.replace("kstui_test_entry", "kstui_attention_fwd"))
        return real(source, options, source_bytes)

    monkeypatch.setattr(check_cache, "source_checks", rewrite_then_check)
    result = evaluate(kernel, EvalOptions(check_only=True, cache_dir=tmp_path / "cache"))
    found = {c.name: c for c in result.checks}
    assert not found["forbidden-call"].ok
    assert not found["imported-symbols"].ok and "dlopen" in found["imported-symbols"].detail  # built dirty too
    assert result.kernel_sha256 == hashlib.sha256(dirty.encode()).hexdigest()
