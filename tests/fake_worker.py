"""A stand-in worker: a small Python program run in place of `python -m harness.worker`.

It speaks the real protocol (preparation line, "device", "warm", "ready", job line, results) and
misbehaves on the scenario named "bad" in its job, in the way its mode says: the preparation's "mode",
or, where FAKE_WORKER_LOG names a file, the mode in FILE.mode when the job arrives (misbehaving on the
first scenario); it appends its pid to FILE then. Its device info carries its pid, so tests can tell
which process judged.
"""

import sys
import textwrap

import pytest

FAKE = textwrap.dedent('''
    import json, os, select, signal, sys, time
    from harness.orphan import die_with_parent
    die_with_parent()

    def readline():  # byte by byte from fd 0, so select() sees what is still unread
        line = b""
        while not line.endswith(b"\\n"):
            c = os.read(0, 1)
            if not c:
                break
            line += c
        return line.decode()

    prep = json.loads(readline())
    out = os.fdopen(prep["fd"], "w", buffering=1)
    mode = prep.get("mode", "none")
    if mode == "die-at-start":
        print("ImportError: no torch here", file=sys.stderr)
        sys.exit(1)
    out.write(json.dumps({"kind": "device", "device": {"name": "fake", "index": prep.get("device_index"),
                                                       "pid": os.getpid()}}) + "\\n")
    for s in prep.get("warm", []):
        out.write(json.dumps({"kind": "warm", "id": s["id"]}) + "\\n")
        if mode == "hang-warm":
            time.sleep(3600)
        if mode == "warm-until-job":  # as the real worker: the job's arrival cuts the warm-up short
            select.select([0], [], [])
            break
    out.write(json.dumps({"kind": "ready"}) + "\\n")
    line = readline()
    if not line:
        sys.exit(0)
    job = json.loads(line)
    if os.environ.get("FAKE_WORKER_LOG"):  # mode and pid through files, for workers started by a server
        with open(os.environ["FAKE_WORKER_LOG"], "a") as f:
            f.write(f"{os.getpid()}\\n")
        with open(os.environ["FAKE_WORKER_LOG"] + ".mode") as f:
            mode = f.read().strip() or mode
        job.setdefault("bad", job["scenarios"][0]["id"])
    for s in job["scenarios"]:
        out.write(json.dumps({"kind": "start", "id": s["id"]}) + "\\n")
        if s["id"] == job.get("bad"):
            if mode == "segfault":
                os.kill(os.getpid(), signal.SIGSEGV)
            if mode == "abort":
                os.abort()
            if mode == "hang":
                time.sleep(3600)
            if mode == "garbage":
                out.write("this is not json\\n")
                time.sleep(3600)
            if mode == "hang-child":
                os.system("sleep 3600")
        out.write(json.dumps({"kind": "result", "scenario": {"id": s["id"], "timed": s["timed"], "correct": True,
                                                             "verdict": "ok", "gpu": prep.get("device_index"),
                                                             "speedup": 1.0, "time_us": 1.0}}) + "\\n")
    out.write(json.dumps({"kind": "done", "profile": {}}) + "\\n")
''')


@pytest.fixture
def fake_python(tmp_path):
    """An executable that runs the stand-in whatever arguments it is given (`-m harness.worker`)."""
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE)
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
    exe.chmod(0o755)
    return str(exe)
