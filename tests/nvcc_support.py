"""Whether nvcc is here, found the way the harness finds it (KSTUI_NVCC, PATH, CUDA_HOME, /usr/local/cuda)."""

from __future__ import annotations

import pytest

from harness.build import BuildInputError, find_nvcc


def _nvcc() -> str | None:
    try:
        return find_nvcc(None)
    except BuildInputError:
        return None


NVCC = _nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (set KSTUI_NVCC or CUDA_HOME)")
