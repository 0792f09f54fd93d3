"""A whole harness worker whose Judge runs a library kernel in place of the candidate (bench/stand_in.py).

For end-to-end figures of a fast kernel: `harness eval` and `harness serve` start it through
`--worker-python`, given a script made by `wrapper()` (the runner starts `PYTHON -m harness.worker`,
which the script replaces with this file). The kernel is still built and checked as usual.
Usage (by the runner): stand_in_worker.py flash|cudnn
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]


def wrapper(kind: str, folder: Path) -> Path:
    """An executable that `--worker-python` can name: it runs this worker with the `kind` stand-in."""
    path = folder / f"stand-in-{kind}-python"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" {kind}\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def main() -> int:
    from stand_in import stand_in_judge

    import harness.worker

    harness.worker.Judge = stand_in_judge(sys.argv[1])
    return harness.worker.main()


if __name__ == "__main__":
    sys.exit(main())
