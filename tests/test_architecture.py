"""The folders' rules, checked: who may import whom, no import circles, and what `kstui --help` costs.

- Only the TUI (kstui/app.py, kstui/screens/, kstui/widgets/, kstui/collector.py and the Textual compat
  module) imports Textual; nothing under kstui/engine/, kstui/executors/ or kstui/views/ does.
- The harness never imports kstui; the engine never imports a view; the executors know only the harness.
- No module imports itself through others (TYPE_CHECKING imports aside).
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import kstui

ROOT = Path(__file__).resolve().parent.parent
UI = ("kstui.app", "kstui.screens", "kstui.widgets", "kstui.collector", "kstui.compat.textual_private")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth, except under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def _graph() -> dict[str, set[str]]:
    """Our modules (kstui, harness) and which of our modules each imports."""
    files = {_module_name(p): p for top in ("kstui", "harness") for p in (ROOT / top).rglob("*.py")}
    modules = {m for m, p in files.items() if p.name != "__init__.py"}
    return {m: {i for i in _imports(files[m]) if i in modules and i != m} for m in modules}


def test_the_harness_never_imports_kstui() -> None:
    for path in (ROOT / "harness").rglob("*.py"):
        bad = sorted(i for i in _imports(path) if i == "kstui" or i.startswith("kstui."))
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_folder_rules() -> None:
    rules = {  # a module under this prefix may not import these
        "kstui.engine": ("textual", "kstui.app", "kstui.screens", "kstui.widgets", "kstui.views", "kstui.cli",
                         "kstui.compat.textual_private"),
        "kstui.executors": ("textual", "kstui.engine", "kstui.app", "kstui.screens", "kstui.widgets", "kstui.views"),
        "kstui.views": ("textual", "kstui.app", "kstui.screens", "kstui.widgets", "kstui.compat.textual_private"),
        "kstui.compat.anthropic_private": ("textual",),
    }
    for path in (ROOT / "kstui").rglob("*.py"):
        name = _module_name(path)
        for prefix, banned in rules.items():
            if name == prefix or name.startswith(prefix + "."):
                bad = sorted(i for i in _imports(path) if i.startswith(banned))
                assert not bad, f"{name} imports {bad}"


def test_no_import_circles() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def strongconnect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    assert not circles, f"import circles: {circles}"


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
