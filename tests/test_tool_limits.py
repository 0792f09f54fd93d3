"""The file tools refuse a huge file in one line, without reading it (a 3 GB sparse file: seconds and
gigabytes before)."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
from test_tools import make_box

from kstui.engine.tools import FILE_LIMIT


@pytest.mark.parametrize("tool, args, what", [
    ("edit_file", {"old_string": "a", "new_string": "b"}, "editing"),
    ("read_file", {"start_line": 2, "end_line": 3}, "reading by lines"),
])
async def test_a_huge_sparse_file_is_refused_in_one_line_without_reading_it(tmp_path: Path, tool: str,
                                                                             args: dict, what: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    huge = ws / "huge.cu"
    with huge.open("wb") as f:
        f.truncate(3 * 1024**3)
    box = make_box(ws)
    tracemalloc.start()
    started = time.monotonic()
    out = await box.run(tool, {"path": "huge.cu", **args})
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert out.is_error and out.text == (f"{tool}: huge.cu has 3,221,225,472 bytes: {what} takes files up to "
                                         f"{FILE_LIMIT // 2**20} MiB (read_file without lines shows its start)")
    assert time.monotonic() - started < 1.0 and peak < 10 * 2**20
