"""What later evaluations trust (baseline timings, the Triton cache) is written by the parent only, from
what a worker reported before it loaded its candidate (harness.trusted, harness.baselines)."""

import hashlib
import json
import os
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from harness import baselines, confine, trusted
from harness.baselines import BaselineCache
from harness.started_worker import StartedWorker
from harness.tasks.base import Scenario
from harness.worker_files import sha256_file


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_cache_reports_only_what_was_measured_in_its_process_and_the_parent_merges_it(tmp_path):
    path = tmp_path / "judge" / "baselines.json"
    baselines.merge(path, "k", {"peaks": {"peak_gbps": 1.0}, "scenarios": {"a": {"cudnn": {"valid": True, "us": 5.0}}}})
    cache = BaselineCache(path, "k")
    assert cache.scenario("a")["cudnn"]["us"] == 5.0 and cache.peaks == {"peak_gbps": 1.0}
    cache.put("b", "fa3", False, None, "refused")
    cache.mark_warmed("c")
    assert cache.changes() == {"scenarios": {"b": {"fa3": {"valid": False, "us": None, "detail": "refused"}}},
                               "warmed": ["c"]}
    cache.clear()  # in memory only, and what this process measured stays
    assert cache.scenario("a") == {} and cache.scenario("b") and BaselineCache(path, "k").scenario("a")
    baselines.merge(path, "k", {"scenarios": {"d": {"cudnn": {"valid": True, "us": 2.0}}}})  # another worker's
    cache.reread()
    assert cache.scenario("a") and cache.scenario("b") and cache.scenario("d") and cache.warmed("c")
    baselines.merge(path, "k", cache.changes())
    again = BaselineCache(path, "k")
    assert again.scenario("a") and again.scenario("b")["fa3"]["valid"] is False and again.warmed("c")


def test_malformed_reports_leave_the_file_well_formed(tmp_path):
    path = tmp_path / "baselines.json"
    baselines.merge(path, "k", {"scenarios": {"a": {"x": {"valid": True, "us": 1.0}}}})
    for junk in ({"peaks": {"p": "fast"}}, {"scenarios": {"a": "x", "b": {"y": 3}}}, {"warmed": "all"},
                 {"scenarios": [1, 2]}):
        baselines.merge(path, "k", junk)
    data = json.loads(path.read_text())
    assert data == {"k": {"scenarios": {"a": {"x": {"valid": True, "us": 1.0}}}, "warmed": []}}


def test_the_report_pipe_is_closed_for_good_once_sent():
    read_fd, write_fd = os.pipe()
    trusted.send_report(write_fd, "k", {}, {})
    with pytest.raises(OSError):
        os.write(write_fd, b"forged")
    assert json.loads(os.read(read_fd, 1 << 16)) == {"key": "k", "baselines": {}, "triton": {}}
    os.close(read_fd)


def _entry(root: Path, name: str, files: dict[str, bytes]) -> dict[str, str]:
    (root / name).mkdir(parents=True)
    for f, data in files.items():
        (root / name / f).write_bytes(data)
    return {f: _sha(data) for f, data in files.items()}


def test_a_triton_entry_is_harvested_only_as_it_was_when_reported(tmp_path):
    private, kept = tmp_path / "private", tmp_path / "trusted"
    good = _entry(private, "AAAA", {"k.cubin": b"pre-load", "k.json": b"{}"})
    changed = _entry(private, "BBBB", {"k.cubin": b"pre-load"})
    (private / "BBBB" / "k.cubin").write_bytes(b"rewritten after the load")
    linked = _entry(private, "CCCC", {"k.cubin": b"x"})
    (private / "CCCC" / "k.cubin").unlink()
    (private / "CCCC" / "k.cubin").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_bytes(b"x")
    assert trusted.harvest(private, kept, "AAAA", good)
    assert not trusted.harvest(private, kept, "BBBB", changed)
    assert not trusted.harvest(private, kept, "CCCC", linked)
    assert not trusted.harvest(private, kept, "../escape", good) and not trusted.harvest(private, kept, "AAAA", {"../x": "0"})
    assert sorted(p.name for p in kept.iterdir()) == ["AAAA"]
    assert (kept / "AAAA" / "k.cubin").read_bytes() == b"pre-load"
    seeded = tmp_path / "next-worker"
    seeded.mkdir()
    trusted.seed(kept, seeded)
    assert (seeded / "AAAA" / "k.json").read_bytes() == b"{}"


# A worker that reports, then behaves as a loaded candidate would: rewrites what it reported, compiles
# more, writes to the report pipe it closed, and writes the baseline cache directly.
TAMPERING_WORKER = textwrap.dedent('''
    import hashlib, json, os, sys, time
    from pathlib import Path
    prep = json.loads(sys.stdin.readline())
    out = os.fdopen(prep["fd"], "w", buffering=1)
    triton = Path(os.environ["TRITON_CACHE_DIR"])
    (triton / "PRE").mkdir()
    (triton / "PRE" / "k.cubin").write_bytes(b"compiled before the load")
    report = {"key": "key", "baselines": {"scenarios": {"s": {"cudnn": {"valid": True, "us": 10.0}}}},
              "triton": {"PRE": {"k.cubin": hashlib.sha256(b"compiled before the load").hexdigest()}}}
    with os.fdopen(prep["report_fd"], "w") as r:  # as harness.trusted.send_report does
        r.write(json.dumps(report) + "\\n")
    out.write(json.dumps({"kind": "device", "device": {"name": "tamper"}}) + "\\n")
    out.write(json.dumps({"kind": "ready"}) + "\\n")
    job = json.loads(sys.stdin.readline())
    attempts = {}
    (triton / "PRE" / "k.cubin").write_bytes(b"rewritten by the candidate")
    (triton / "POST").mkdir()
    (triton / "POST" / "k.cubin").write_bytes(b"compiled after the load")
    try:
        os.write(prep["report_fd"], b'{"key": "key", "baselines": {"scenarios": {"s": {"cudnn": {"valid": false}}}}}')
        attempts["report"] = "written"
    except OSError as exc:
        attempts["report"] = exc.errno
    try:
        Path(prep["cache_path"]).write_text('{"key": {"scenarios": {"s": {"cudnn": {"valid": false, "us": null}}}}}')
        attempts["cache"] = "written"
    except OSError as exc:
        attempts["cache"] = exc.errno
    time.sleep(0.3)
    out.write(json.dumps({"kind": "start", "id": "s"}) + "\\n")
    out.write(json.dumps({"kind": "result", "scenario": {"id": "s", "timed": False, "correct": True, "verdict": "ok",
                                                         "detail": json.dumps(attempts)}}) + "\\n")
    out.write(json.dumps({"kind": "done", "profile": {}}) + "\\n")
''')


@pytest.mark.skipif(confine.detect()[0] is None, reason="bubblewrap does not work here")
def test_what_a_loaded_candidate_does_never_reaches_the_trusted_state(tmp_path, monkeypatch):
    monkeypatch.delenv("KSTUI_WORKER_SANDBOX", raising=False)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "worker.py").write_text(TAMPERING_WORKER)
    python = tools / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {tools / 'worker.py'}\n")
    python.chmod(0o755)
    cache = tmp_path / "cache" / "judge"
    library = tmp_path / "lib.so"
    library.write_bytes(b"not really a library")
    worker = StartedWorker({"cache_path": str(cache / "baselines.json")}, str(python))
    out = worker.run({"library": worker.stage(library, sha256_file(library))}, [Scenario("s", False, {})], 20, 60)
    attempts = json.loads(out.results[0].detail)
    assert attempts["report"] != "written" and attempts["cache"] != "written", attempts
    assert BaselineCache(cache / "baselines.json", "key").scenario("s") == {"cudnn": {"valid": True, "us": 10.0}}
    assert sorted(p.name for p in (cache / "triton").iterdir() if not p.name.startswith(".")) in (["PRE"], [])
    if (cache / "triton" / "PRE").exists():
        assert (cache / "triton" / "PRE" / "k.cubin").read_bytes() == b"compiled before the load"
