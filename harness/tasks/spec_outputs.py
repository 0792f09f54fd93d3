"""Output buffers of any dtype on harness.poison's guarded buffers.

harness.poison fills 2- and 4-byte elements with its NaN pattern. A 2- or 4-byte output is its own
buffer; an 8-byte one (fp64, int64) lives in an int32 buffer of twice the length and a 1-byte one
(int8, uint8, bool, fp8) in an int16 buffer of half the length, rounded up: the kernel gets the same
pointer and writes its own dtype. For an fp64 element the pattern's high word is a NaN no computation
gives; for integers and 1-byte floats any value is legitimate, so the pattern only explains a
mismatch (an element left as the pattern that differs from the reference is "unwritten").
"""

from __future__ import annotations

import math

import torch

from harness.poison import guarded_empty, is_poison
from harness.tasks.spec import DTYPES

_PATTERN_BYTES: dict[str, torch.Tensor] = {}  # by device: the 2 bytes of the 2-byte pattern


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, DTYPES[name][0])


def carrier(shape: tuple[int, ...], name: str) -> tuple[tuple[int, ...], torch.dtype]:
    """The (shape, dtype) of the guarded buffer that holds an output of this shape and dtype."""
    size, n = DTYPES[name][1], math.prod(shape)
    if size == 8:
        return (2 * n,), torch.int32
    if size == 1:
        return ((n + 1) // 2,), torch.int16
    return shape, torch_dtype(name)


def declared(t: torch.Tensor, shape: tuple[int, ...], name: str) -> torch.Tensor:
    """The output as the kernel wrote it: a carrier viewed in its dtype and shape (a plain tensor as is)."""
    dtype = torch_dtype(name)
    if t.dtype == dtype:
        return t.reshape(shape)
    n = math.prod(shape)
    return t.reshape(-1).view(torch.uint8)[: n * DTYPES[name][1]].view(dtype).reshape(shape)


def _pattern_bytes(device: torch.device) -> torch.Tensor:
    key = str(device)
    if key not in _PATTERN_BYTES:
        _PATTERN_BYTES[key] = guarded_empty((1,), torch.int16, device).tensor.view(torch.uint8).clone()
    return _PATTERN_BYTES[key]


def unwritten(t: torch.Tensor, shape: tuple[int, ...], name: str) -> torch.Tensor:
    """Per element of the declared output: does it still hold the poison pattern?"""
    size, kind = DTYPES[name][1], DTYPES[name][2]
    if t.dtype == torch_dtype(name):
        return is_poison(t).reshape(shape) if size in (2, 4) else torch.zeros(shape, dtype=torch.bool, device=t.device)
    if size == 8:
        words = is_poison(t.reshape(-1, 2))
        return (words[:, 1] if kind == "float" else words.any(1)).reshape(shape)
    n = math.prod(shape)
    pattern = _pattern_bytes(t.device)
    data = t.reshape(-1).view(torch.uint8)[:n]
    return (data == pattern[torch.arange(n, device=t.device) % 2]).reshape(shape)


def padding_written(t: torch.Tensor, shape: tuple[int, ...], name: str) -> bool:
    """A 1-byte output of odd length leaves one byte of its carrier unused: was it written?"""
    n = math.prod(shape)
    if t.dtype == torch_dtype(name) or DTYPES[name][1] != 1 or n % 2 == 0:
        return False
    return bool(t.reshape(-1).view(torch.uint8)[n] != _pattern_bytes(t.device)[1])


def is_reliable(name: str) -> bool:
    """Whether the poison pattern is a value no computation gives (a NaN with our payload)."""
    return DTYPES[name][2] == "float" and DTYPES[name][1] >= 2
