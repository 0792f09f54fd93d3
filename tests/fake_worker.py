"""A stand-in worker: a small Python program run in place of `python -m harness.worker`.

It speaks the real protocol (preparation line, "device", "warm", "ready", job line, the correctness
pass, "checked" and the decision line, the timing pass of the timed scenarios) and misbehaves on the
scenario named "bad" in its job, in the way its mode says: the preparation's "mode", or, where
FAKE_WORKER_LOG names a file, the mode in FILE.mode.<device index> or FILE.mode when the job arrives
(misbehaving on the first scenario; line N of the file for the worker started N-th, the last line for
any after); it appends its pid to FILE then. A hang announces the call with the job's "call_budget_s"
(or FILE.budget's), as the real worker sends each call's budget. Its device info carries its pid, so tests can tell which
process judged.
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
    log = os.environ.get("FAKE_WORKER_LOG")
    if log:  # mode and pid through files, for workers started by a server or an evaluation
        started = len(open(log).read().split()) if os.path.exists(log) else 0
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\\n")
        mode_file = f"{log}.mode.{prep.get('device_index')}"
        with open(mode_file if os.path.exists(mode_file) else log + ".mode") as f:
            modes = f.read().split() or [mode]
        mode = modes[min(started, len(modes) - 1)]  # line N for the worker started N-th (the last line after)
        if os.path.exists(log + ".budget"):
            with open(log + ".budget") as f:
                job["call_budget_s"] = float(f.read())
        job.setdefault("bad", job["scenarios"][0]["id"])
    def result(s, phase, **fields):
        scenario = {"id": s["id"], "timed": s["timed"], "correct": True, "verdict": "ok",
                    "gpu": prep.get("device_index"), **fields}
        out.write(json.dumps({"kind": "result", "scenario": scenario, "phase": phase, "timing_s": 0.01}) + "\\n")

    ok = True
    for s in job["scenarios"]:
        out.write(json.dumps({"kind": "start", "id": s["id"], "phase": "correctness"}) + "\\n")
        if s["id"] == job.get("bad"):
            if mode == "segfault":
                os.kill(os.getpid(), signal.SIGSEGV)
            if mode == "abort":
                os.abort()
            if mode == "hang":
                out.write(json.dumps({"kind": "call", "id": s["id"], "budget_s": job.get("call_budget_s", 3600),
                                      "expected_us": 1000.0}) + "\\n")
                time.sleep(3600)
            if mode == "garbage":
                out.write("this is not json\\n")
                time.sleep(3600)
            if mode == "hang-child":
                os.system("sleep 3600")
            if mode == "wrong":
                result(s, "correctness", correct=False, verdict="wrong", detail="o: max abs error 1 > tolerance 0.01")
                ok = False
                continue
        if mode == "hang-all":  # every scenario hangs in its call: each costs a worker
            out.write(json.dumps({"kind": "call", "id": s["id"], "budget_s": job.get("call_budget_s", 3600),
                                  "expected_us": 1000.0}) + "\\n")
            time.sleep(3600)
        result(s, "correctness")
    out.write(json.dumps({"kind": "checked", "ok": ok}) + "\\n")
    if job.get("time"):
        decision = json.loads(readline() or "{}")
        for s in [s for s in job["scenarios"] if s["timed"] and decision.get("time")]:
            if select.select([0], [], [], 0)[0]:
                break  # {"stop": true}
            out.write(json.dumps({"kind": "start", "id": s["id"], "phase": "timing", "budget_s": job.get("timing_budget_s", 3600),
                                  "predicted_s": 0.01}) + "\\n")
            if s["id"] == job.get("bad") and mode == "hang-timing":
                time.sleep(3600)
            if mode == "too-fast":  # the first timed scenario
                result(s, "timing", correct=False, verdict="too-fast", detail="below the physical floor")
                break
            if mode == "slow-timing":
                time.sleep(0.5)
            result(s, "timing", speedup=1.0, time_us=1.0, baseline="fake", baseline_us=1.0)
    out.write(json.dumps({"kind": "done", "profile": {}}) + "\\n")
''')


@pytest.fixture
def fake_python(tmp_path, monkeypatch):
    """An executable that runs the stand-in whatever arguments it is given (the worker's boot).

    It runs unconfined (its files and its log sit in the test's directory, which a sandboxed worker
    could not write) and is given FAKE_WORKER_LOG, which the worker's environment otherwise drops;
    tests/test_worker_confinement.py runs workers inside the sandbox."""
    monkeypatch.setenv("KSTUI_WORKER_SANDBOX", "off")
    monkeypatch.setenv("KSTUI_WORKER_ENV", "FAKE_WORKER_LOG")
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE)
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
    exe.chmod(0o755)
    return str(exe)
