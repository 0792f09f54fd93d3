"""The worker's first steps inside its isolated Python, before torch or the harness's worker module.

Started by harness.worker_launch's BOOT with a JSON configuration: the process's resource limits are
lowered for good (soft and hard, so the kernel cannot raise them again: no core dump of the judged
process, no file past FSIZE, no more than NPROC tasks in the sandbox's own user namespace), the extra
site directories are added after the worker Python's own, and harness.worker runs as __main__.
"""

from __future__ import annotations

import json
import resource
import runpy
import site
import sys


def _limit(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (value, value))


def boot(config_json: str) -> None:
    config = json.loads(config_json)
    _limit(resource.RLIMIT_CORE, 0)
    if config.get("fsize"):
        _limit(resource.RLIMIT_FSIZE, int(config["fsize"]))
    if config.get("nproc"):  # unconfined, the count would be the user's processes on the whole machine
        _limit(resource.RLIMIT_NPROC, int(config["nproc"]))
    for directory in config.get("sites", []):
        site.addsitedir(directory)
    sys.argv = [sys.argv[0]]
    runpy.run_module("harness.worker", run_name="__main__", alter_sys=True)
