"""The evaluation worker inside bubblewrap: native code loaded the way a candidate is tries to escape.

A small shared library (built here with gcc) is staged and loaded through ctypes by a stand-in worker
started exactly as the real one is (harness.started_worker, harness.worker_launch), and tries what a
hostile kernel would: read a key in the user's home, read the workspace, write outside its private
directory, overwrite the baseline cache, reach the network, read the API key from its environment or
from its parent's, keep a process alive after the worker is killed. Confined, every attempt fails;
unconfined (no bubblewrap), the EvalResult says so.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from harness import confine
from harness.started_worker import StartedWorker
from harness.tasks.base import Scenario
from harness.worker_files import sha256_file

API_KEY = "sk-ant-api03-confinement-test-" + "q" * 40
needs_bwrap = pytest.mark.skipif(confine.detect()[0] is None or os.environ.get("KSTUI_WORKER_SANDBOX") == "off",
                                 reason="bubblewrap does not work here")

ESCAPES_C = r"""
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int try_read(const char* path) {  /* 0: read a byte; -1000: opened but empty (a masked file) */
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -errno;
    char c;
    ssize_t n = read(fd, &c, 1);
    close(fd);
    return n == 1 ? 0 : -1000;
}
int try_write(const char* path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return -errno;
    ssize_t n = write(fd, "x", 1);
    close(fd);
    return n == 1 ? 0 : -errno;
}
int try_connect(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return -errno;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int r = connect(s, (struct sockaddr*)&a, sizeof a);
    int e = errno;
    close(s);
    return r == 0 ? 0 : -e;
}
int try_getenv(const char* name) { return getenv(name) ? 0 : -1; }
int try_spawn_survivor(const char* marker) {  /* a grandchild in its own session, outliving the worker */
    pid_t pid = fork();
    if (pid != 0) return pid > 0 ? 0 : -errno;
    setsid();
    if (fork() != 0) _exit(0);
    for (int i = 0; i < 40; i++) {
        int fd = open(marker, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) { write(fd, "alive\n", 6); close(fd); }
        usleep(100000);
    }
    _exit(0);
}
"""

# A worker that speaks the protocol, loads the staged library and runs the probes its preparation
# names; the results come back as the scenario's detail.
ESCAPE_WORKER = textwrap.dedent('''
    import ctypes, json, os, sys
    prep = json.loads(sys.stdin.readline())
    out = os.fdopen(prep["fd"], "w", buffering=1)
    os.close(prep["report_fd"])
    out.write(json.dumps({"kind": "device", "device": {"name": "escape"}}) + "\\n")
    out.write(json.dumps({"kind": "ready"}) + "\\n")
    job = json.loads(sys.stdin.readline())
    lib = ctypes.CDLL(job["library"])
    found = {}
    for name, kind, arg in prep["probes"]:
        if kind == "contains":
            try:
                found[name] = arg[1].encode() in open(arg[0], "rb").read()
            except OSError as exc:
                found[name] = -exc.errno
        elif kind == "capeff":
            found[name] = [l for l in open("/proc/self/status") if l.startswith("CapEff")][0].split()[1]
        else:
            found[name] = getattr(lib, "try_" + kind)(arg.encode() if isinstance(arg, str) else arg)
    out.write(json.dumps({"kind": "start", "id": "s"}) + "\\n")
    out.write(json.dumps({"kind": "result", "scenario": {"id": "s", "timed": False, "correct": True,
                                                         "verdict": "ok", "detail": json.dumps(found)}}) + "\\n")
    out.write(json.dumps({"kind": "done", "profile": {}}) + "\\n")
''')


@pytest.fixture(scope="module")
def escape_library(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found")
    d = tmp_path_factory.mktemp("escape-lib")
    (d / "escapes.c").write_text(ESCAPES_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(d / "libescapes.so"), str(d / "escapes.c")], check=True)
    return d / "libescapes.so"


@pytest.fixture
def home_secret():
    """A private key planted in the real home directory (removed after)."""
    d = Path.home() / f".kstui-confine-test-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    (d / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    yield d / "id_rsa"
    shutil.rmtree(d)


@pytest.fixture
def listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield s.getsockname()[1]
    s.close()


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """The stand-in's Python wrapper in tools/ (bound read-only, as a worker Python is), a workspace
    inside that directory (so hiding it must cover a bound path), a cache, and an API key around."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "escape_worker.py").write_text(ESCAPE_WORKER)
    python = tools / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {tools / 'escape_worker.py'}\n")
    python.chmod(0o755)
    ws = tools / "workspace"
    ws.mkdir()
    (ws / "kernel.cu").write_text("// the agent's kernel\n")
    cache = tmp_path / "cache" / "judge"
    cache.mkdir(parents=True)
    (cache / "baselines.json").write_text("{}")
    (tmp_path / "outside").mkdir()
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.delenv("KSTUI_WORKER_SANDBOX", raising=False)
    return {"python": str(python), "tools": tools, "ws": ws, "cache": cache, "outside": tmp_path / "outside"}


def _run_escapes(layout, library, probes):
    prep = {"cache_path": str(layout["cache"] / "baselines.json"), "hide": [str(layout["ws"])], "probes": probes}
    worker = StartedWorker(prep, layout["python"])
    staged = worker.stage(library, sha256_file(library))
    out = worker.run({"library": staged}, [Scenario("s", False, {})], 20.0, 60.0)
    assert out.results[0].verdict == "ok", (out.error, out.results[0].detail)
    return worker.sandbox, json.loads(out.results[0].detail), staged


def _probes(layout, home_secret, port):
    return [
        ["home key", "read", str(home_secret)],
        ["workspace", "read", str(layout["ws"] / "kernel.cu")],
        ["write outside", "write", str(layout["outside"] / "x")],
        ["write into the worker's Python", "write", str(layout["tools"] / "x")],
        ["write the baseline cache", "write", str(layout["cache"] / "baselines.json")],
        ["write a trusted Triton entry", "write", str(layout["cache"] / "triton-x")],
        ["shadow", "read", "/etc/shadow"],
        ["network", "connect", port],
        ["API key in the environment", "getenv", "ANTHROPIC_API_KEY"],
        ["API key in the parent's environment", "contains", [f"/proc/{os.getpid()}/environ", API_KEY]],
        ["capabilities", "capeff", ""],
        ["own temporary file (sanity)", "write", "/tmp/own-file"],
    ]


@needs_bwrap
def test_confined_every_escape_fails(layout, escape_library, home_secret, listener, monkeypatch):
    monkeypatch.setenv("PATH", f"{Path.home()}:{os.environ['PATH']}")  # a home on PATH is still not shown
    sandbox, found, _ = _run_escapes(layout, escape_library, _probes(layout, home_secret, listener))
    assert sandbox == "bubblewrap"
    assert found["own temporary file (sanity)"] == 0
    for name in ("home key", "workspace", "write outside", "write into the worker's Python", "write the baseline cache",
                 "write a trusted Triton entry", "network", "API key in the environment"):
        assert found[name] != 0, f"{name}: the sandbox let it through"
    assert found["shadow"] in (-1000, -13)  # masked (reads empty) or refused
    assert _refused(found["API key in the parent's environment"])  # no /proc of ours in its pid namespace
    assert found["capabilities"] == "0000000000000000"
    assert json.loads((layout["cache"] / "baselines.json").read_text()) == {}
    assert not (layout["outside"] / "x").exists()


def test_unconfined_the_fallback_says_so_and_only_the_environment_is_scrubbed(layout, escape_library, home_secret,
                                                                             listener, monkeypatch):
    monkeypatch.setenv("KSTUI_WORKER_SANDBOX", "off")
    sandbox, found, _ = _run_escapes(layout, escape_library, _probes(layout, home_secret, listener))
    assert sandbox.startswith("none: ") and "KSTUI_WORKER_SANDBOX=off" in sandbox
    assert found["home key"] == 0 and found["write outside"] == 0 and found["network"] == 0
    assert found["API key in the environment"] != 0  # the environment is scrubbed, confined or not


def test_without_bubblewrap_the_worker_runs_unconfined_and_says_why(layout, escape_library, monkeypatch):
    monkeypatch.setenv("KSTUI_BWRAP", str(layout["outside"] / "no-bwrap"))
    monkeypatch.setenv("PATH", "/nonexistent")
    sandbox, found, _ = _run_escapes(layout, escape_library, [["sanity", "write", "/tmp/kstui-x-" + uuid.uuid4().hex]])
    assert sandbox == "none: bubblewrap (bwrap) is not installed: the kernel runs unconfined"
    assert found["sanity"] == 0


@needs_bwrap
def test_nothing_the_kernel_starts_outlives_the_confined_worker(layout, escape_library, tmp_path):
    marker = "/tmp/survivor"  # the private /tmp: the worker's own directory is bound below it
    prep_probes = [["spawn", "spawn_survivor", marker]]
    sandbox, found, staged = _run_escapes(layout, escape_library, prep_probes)
    assert sandbox == "bubblewrap" and found["spawn"] == 0
    time.sleep(0.5)
    # The pid namespace died with the worker: no process of ours runs the library any more.
    users = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _maps(p, staged)]
    assert users == []
    assert not Path(staged).exists()  # the private directory is gone


def _refused(result) -> bool:
    return type(result) is int and result < 0


def _maps(proc: Path, library: str) -> bool:
    try:
        return library in (proc / "maps").read_text()
    except OSError:
        return False


@needs_bwrap
def test_the_workspace_is_hidden_even_inside_a_bound_directory(layout):
    args = confine.mount_args(confine.Mounts(ro=(layout["tools"],), hide=(layout["ws"],)))
    pairs = list(zip(args, args[1:]))
    assert ("--tmpfs", str(layout["ws"])) in pairs
    assert args.index(str(layout["ws"])) > args.index(str(layout["tools"]))  # on top of the bind


@needs_bwrap
def test_a_toolchain_named_by_a_link_inside_a_bound_directory_is_reachable(tmp_path):
    # As on the GPU image: /usr/local/cuda, a link to /usr/local/cuda-13.0, inside the bound /usr.
    real = tmp_path / "cuda-13.0" / "bin"
    real.mkdir(parents=True)
    (real / "nvcc").write_text("found\n")
    (tmp_path / "cuda").symlink_to(tmp_path / "cuda-13.0")
    mounts = confine.Mounts(ro=(tmp_path, tmp_path / "cuda"))
    argv = confine.detect()[0].wrap(["cat", str(tmp_path / "cuda" / "bin" / "nvcc")], mounts, Path("/"))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (0, "found\n"), done.stderr


@needs_bwrap
def test_the_compiler_cc_names_is_bound_with_its_installation(tmp_path):
    # As on the GPU image: CC=/opt/gcc/bin/gcc, which runs cc1 from /opt/gcc/libexec (Triton compiles
    # its launcher with $CC inside the worker).
    from harness.worker_launch import _tool_dirs

    prefix = tmp_path / "opt" / "gcc"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "libexec").mkdir()
    (prefix / "libexec" / "cc1").write_text("cc1 ran\n")
    gcc = prefix / "bin" / "gcc"
    gcc.write_text(f"#!/bin/sh\nexec cat {prefix / 'libexec' / 'cc1'}\n")
    gcc.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "CC": str(gcc)}
    mounts = confine.Mounts(ro=tuple(_tool_dirs(env)))
    done = subprocess.run(confine.detect()[0].wrap([str(gcc)], mounts, Path("/")), capture_output=True, text=True,
                          timeout=30)
    assert (done.returncode, done.stdout) == (0, "cc1 ran\n"), done.stderr
