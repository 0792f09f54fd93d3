"""A kernel may not write to or duplicate file descriptors: the worker's result pipe is one of them, in
the same process, and a line written there would be read as the judge's own (docs/SECURITY.md)."""

from pathlib import Path

import pytest

from harness.build import BuildOptions
from harness.checks import imported_symbol_family, source_checks

TEXT_ONLY = BuildOptions(nvcc="/nonexistent/nvcc")
FORGERIES = {
    "write": 'write(3, "{\\"kind\\": \\"done\\"}\\n", 17);',
    "dup2 onto stdout": "dup2(3, 1);",
    "dprintf": 'dprintf(3, "%s\\n", "forged");',
    "writev": "writev(3, nullptr, 0);",
    "fcntl": "int fd = fcntl(3, 0, 10);",
    "send": "send(3, nullptr, 0, 0);",
}


@pytest.mark.parametrize("snippet", list(FORGERIES.values()), ids=list(FORGERIES))
def test_writing_to_a_descriptor_is_a_forbidden_call(tmp_path, snippet):
    path = tmp_path / "kernel.cu"
    path.write_text(f"#include <unistd.h>\n#include <fcntl.h>\n\n{snippet}\n")
    checks = {c.name: c for c in source_checks(path, TEXT_ONLY)}
    assert not checks["forbidden-call"].ok and "file descriptors" in checks["forbidden-call"].detail


def test_a_member_call_named_write_is_not_a_call_of_libc(tmp_path):
    path = tmp_path / "kernel.cu"
    path.write_text("template <class T> void f(T& o, T* p) { o.write(1); p->write(2); }\n")
    assert all(c.ok for c in source_checks(path, TEXT_ONLY) if c.name == "forbidden-call")


@pytest.mark.parametrize("symbol", ["write", "dup2", "dprintf", "pwrite64", "ioctl"])
def test_importing_a_descriptor_writer_fails_the_binary_check(symbol):
    assert imported_symbol_family(symbol) == "file descriptors"
