"""Only kstui/app.py, kstui/screens/ and kstui/widgets/ may import Textual; `kstui --help` imports neither torch nor Textual."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import kstui

ROOT = Path(__file__).resolve().parent.parent
UI = ("kstui.app", "kstui.screens", "kstui.widgets")


def _engine_modules() -> list[str]:
    names = [m.name for m in pkgutil.walk_packages(kstui.__path__, "kstui.")]
    return sorted(n for n in names if not n.startswith(UI) and n != "kstui.__main__")


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_engine_modules_never_import_textual() -> None:
    modules = _engine_modules()
    assert {"kstui.engine.session", "kstui.cli", "kstui.views.headless", "kstui.engine.config", "kstui.engine.watcher"} <= set(modules)
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))))\n"
    )
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_help_imports_neither_torch_nor_textual() -> None:
    code = (
        "import sys\n"
        "from kstui.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "heavy = [m for m in ('torch', 'textual') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert "usage: kstui" in done.stdout and "HEAVY []" in done.stdout


def test_console_script_help_exits_zero() -> None:
    done = subprocess.run([sys.executable, "-m", "kstui", "run", "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0 and "--max-evals" in done.stdout and "--eval-cmd" in done.stdout
