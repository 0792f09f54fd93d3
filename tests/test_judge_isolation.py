"""The judge cannot be replaced from the workspace: what the agent plants there is never imported.

The workspace gets a `harness/` package, `sitecustomize.py`, `usercustomize.py`, `.pth` files,
`torch.py` and a PYTHONSTARTUP file, and the caller's environment points PYTHONPATH, PYTHONSTARTUP,
PYTHONUSERBASE and PYTHONHOME there. Each planted module records itself and ends the process with
code 97 when imported. The real worker (torch on the CPU here) starts, imports torch and the
harness, and stops at its CUDA check: the evaluation ends with "no CUDA GPU here (CPU build of
torch)", which only a worker that imported nothing planted reaches. Cold workers, a worker prepared
by harness.pool, `harness eval` and `harness serve`, confined and not.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from nvcc_support import needs_nvcc

from harness import confine
from harness.pool import WorkerPool
from harness.runner import BadInput, EvalOptions, evaluate, judged, preparation, resolve
from harness.taskfile import judge_layout

ROOT = Path(__file__).resolve().parents[1]
NO_GPU = "no CUDA GPU here (CPU build of torch)"
pytestmark = [needs_nvcc, pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch") is None or __import__("torch").cuda.is_available(),
    reason="the real worker stops at its CUDA check only where torch has no GPU")]
SANDBOX = ["", pytest.param("off", id="unconfined")]
if confine.detect()[0] is None:
    SANDBOX = SANDBOX[1:]


def _plant(path: Path, markers: Path, name: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"import os\nopen(os.path.join({str(markers)!r}, {name!r}), 'w').close()\nos._exit(97)\n")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")  # one build of the kernel for the module


@pytest.fixture
def planted(tmp_path, monkeypatch, cache):
    ws, markers = tmp_path / "ws", tmp_path / "markers"
    markers.mkdir()
    for rel in ("harness/__init__.py", "harness/worker.py", "harness/worker_boot.py", "sitecustomize.py",
                "usercustomize.py", "torch.py", "startup.py"):
        _plant(ws / rel, markers, rel.replace("/", "."))
    site = ws / "userbase" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    _plant(site / "usercustomize.py", markers, "user-usercustomize")
    for where in (ws, site):
        (where / "planted.pth").write_text(f"import os; open(os.path.join({str(markers)!r}, 'pth'), 'w').close(); os._exit(97)\n")
    shutil.copy(ROOT / "workspace" / "rmsnorm.cu", ws / "rmsnorm.cu")
    shutil.copy(ROOT / "workspace" / "rmsnorm.toml", ws / "rmsnorm.toml")
    env = {"PYTHONPATH": str(ws), "PYTHONSTARTUP": str(ws / "startup.py"), "PYTHONUSERBASE": str(ws / "userbase")}
    # The plants work: a Python that honours its surroundings imports them.
    sanity = subprocess.run([sys.executable, "-c", "import torch"], cwd=ws, env={**os.environ, **env})
    assert sanity.returncode == 97 and list(markers.iterdir())
    for m in markers.iterdir():
        m.unlink()
    env["PYTHONHOME"] = str(ws)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("KSTUI_CACHE_DIR", str(cache))
    return ws, markers


def _no_marker(markers: Path) -> None:
    assert sorted(p.name for p in markers.iterdir()) == []


@pytest.mark.parametrize("sandbox", SANDBOX)
def test_a_cold_worker_imports_nothing_planted(planted, monkeypatch, sandbox):
    ws, markers = planted
    monkeypatch.setenv("KSTUI_WORKER_SANDBOX", sandbox)
    monkeypatch.chdir(ws)
    with pytest.raises(BadInput, match=r"no CUDA GPU here \(CPU build of torch\)"):
        evaluate(ws / "rmsnorm.cu", EvalOptions(selection="quick", workspace=ws, cache_dir=Path(os.environ["KSTUI_CACHE_DIR"])))
    _no_marker(markers)


@pytest.mark.parametrize("sandbox", SANDBOX)
def test_a_worker_prepared_by_the_pool_imports_nothing_planted(planted, monkeypatch, sandbox):
    ws, markers = planted
    monkeypatch.setenv("KSTUI_WORKER_SANDBOX", sandbox)
    kernel = ws / "rmsnorm.cu"
    opts = EvalOptions(selection="quick", workspace=ws)
    task, tf, scenarios = resolve(kernel, opts)
    prep = preparation(task, tf.options, None, None, scenarios, hide=[ws],
                       judge=judged(judge_layout(kernel)))
    pool = WorkerPool()
    try:
        pool.prepare(prep, sys.executable)
        worker = pool.take(prep, sys.executable)
        assert worker.proc.wait(timeout=120) == 4  # EXIT_NO_CUDA: stopped at its CUDA check
    finally:
        pool.close()
    _no_marker(markers)


def _harness(*args, cwd, stdin=None):
    return subprocess.run([sys.executable, "-I", "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          input=stdin, timeout=300)


@pytest.mark.parametrize("sandbox", SANDBOX)
def test_harness_eval_and_serve_started_in_the_workspace_import_nothing_planted(planted, monkeypatch, sandbox):
    ws, markers = planted
    monkeypatch.setenv("KSTUI_WORKER_SANDBOX", sandbox)
    proc = _harness("eval", "rmsnorm.cu", "--scenarios", "quick", "--workspace", str(ws), cwd=ws)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [f"kstui eval: {NO_GPU}: use --check-only, "
                                                                         "or --gpu ssh://… / --eval-cmd"], proc.stderr
    request = {"id": 1, "argv": [str(ws / "rmsnorm.cu"), "--scenarios", "quick", "--workspace", str(ws)]}
    t0 = time.monotonic()
    served = _harness("serve", cwd=ws, stdin=json.dumps(request) + "\n" + json.dumps({**request, "id": 2}) + "\n")
    replies = [json.loads(line) for line in served.stdout.splitlines()]
    assert sorted(r["id"] for r in replies) == [1, 2] and time.monotonic() - t0 < 300
    assert all(r["rc"] == 2 and NO_GPU in r["stderr"] for r in replies), replies
    _no_marker(markers)
