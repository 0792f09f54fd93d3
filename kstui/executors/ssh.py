"""`--gpu ssh://[user@]host[:port][/path/to/python-or-venv]`: evaluate on a GPU host over SSH.

The system `ssh` client does the talking, so ~/.ssh/config, agents and jump hosts work as the user
expects. One master connection (ControlMaster) is opened per executor and every later command is
multiplexed over it: no new handshake per evaluation. Evaluations go to one long-lived agent on the
host (one ssh session), so they pay no login shell either. The kernel and the task's judge files
(kstui.executors.bundle) are sent content-addressed into a cache on the host, only when the host
lacks them, and laid out there as the spec names them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import kstui
from harness.result import SCHEMA_VERSION, EvalResult
from kstui.executors import ssh_scripts as scripts
from kstui.executors.bundle import read_bundle
from kstui.executors.devices import pool_for
from kstui.executors.process import Completed, last_line, run_process
from kstui.executors.protocol import DEFAULT_TIMEOUT_S, ExecutorError, ProgressCallback
from kstui.executors.results import annotate, harness_args, parse_result
from kstui.executors.ssh_session import SshSession, failure_line

_SSH_FAILED = 255  # what ssh exits with when it, not the remote command, failed
_UNREACHABLE = (
    "Connection refused",
    "Could not resolve hostname",
    "No route to host",
    "Network is unreachable",
    "Connection timed out",
    "Operation timed out",
    "Connection closed by",
    "Connection reset",
)


@dataclass(frozen=True)
class SshTarget:
    host: str
    user: str | None = None
    port: int | None = None
    python: str | None = None  # interpreter or venv directory on the host; None: find kstui's

    @classmethod
    def parse(cls, url: str) -> SshTarget:
        bad = f"--gpu {url!r}: expected ssh://[user@]host[:port][/path/to/python-or-venv]"
        parts = urlsplit(url)
        if parts.scheme != "ssh" or not parts.hostname or parts.query or parts.fragment or parts.password:
            raise ExecutorError(bad)
        try:
            port = parts.port
        except ValueError:
            raise ExecutorError(bad) from None
        return cls(host=parts.hostname, user=parts.username, port=port, python=unquote(parts.path) or None)

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def __str__(self) -> str:
        return f"ssh://{self.destination}" + (f":{self.port}" if self.port else "")


@dataclass
class HostInfo:
    python: str
    cache: str
    hostname: str


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class SshExecutor:
    """Runs `python -m harness eval` (== `kstui eval`) on an SSH host, one multiplexed connection."""

    def __init__(
        self,
        target: SshTarget,
        *,
        devices: Sequence[int] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        ssh_options: Sequence[str] = (),
        remote_cache: str | None = None,
        connect_timeout_s: float = 15.0,
        require_idle_gpu: bool = True,
        control_persist_s: int = 300,
    ) -> None:
        self.target = target
        self.devices = list(devices) if devices else None
        self.timeout_s = timeout_s
        self.ssh_options = list(ssh_options)
        self.remote_cache = remote_cache
        self.connect_timeout_s = connect_timeout_s
        self.require_idle_gpu = require_idle_gpu
        # How long the master outlives us if we die without close(): it then leaves by itself.
        self.control_persist_s = control_persist_s
        self._pool = pool_for(self.devices)
        self._connect_lock = asyncio.Lock()
        self._control_dir: str | None = None
        self._master_open = False
        self._agent: SshSession | None = None
        self._host: HostInfo | None = None
        self._present: set[str] = set()  # objects known to be in the host's cache
        self.sent: list[str] = []  # sha256 of every object sent, in order (what a test or log can check)

    @classmethod
    def from_url(cls, url: str, **kwargs: object) -> SshExecutor:
        return cls(SshTarget.parse(url), **kwargs)  # type: ignore[arg-type]

    @property
    def parallelism(self) -> int:
        return self._pool.size

    def describe(self) -> str:
        return str(self.target) + (f" GPUs {','.join(map(str, self.devices))}" if self.devices else "")

    # --- the connection --------------------------------------------------------------------------

    def _ssh(self, *args: str) -> list[str]:
        assert self._control_dir is not None
        argv = [
            "ssh",
            "-o", "BatchMode=yes",  # never prompt: a prompt would hang an evaluation
            "-o", f"ConnectTimeout={max(1, round(self.connect_timeout_s))}",
            "-o", "ServerAliveInterval=15",
            "-o", "ServerAliveCountMax=4",
            "-o", f"ControlPath={self._control_dir}/%C",
            *self.ssh_options,
        ]
        if self.target.port:
            argv += ["-p", str(self.target.port)]
        return argv + list(args)

    def _command(self, remote_argv: Sequence[str]) -> list[str]:
        """ssh over the master connection, running remote_argv (quoted for the host's login shell)."""
        return self._ssh("-o", "ControlMaster=no", "--", self.target.destination, shlex.join(remote_argv))

    async def _run(self, remote_argv: Sequence[str], *, what: str, timeout_s: float,
                   stdin: bytes | None = None) -> Completed:
        done = await run_process(self._command(remote_argv), timeout_s=timeout_s, what=what, stdin=stdin)
        if done.returncode == _SSH_FAILED:
            raise ExecutorError(self._ssh_failure(done.stderr))
        return done

    def _ssh_failure(self, stderr: bytes) -> str:
        text = stderr.decode("utf-8", "replace")
        reason = last_line(stderr) or "ssh exited with status 255"
        if "Permission denied" in text or "Too many authentication failures" in text:
            return (
                f"{self.target} refused authentication for {self.target.user or 'your user'}: install your "
                f"public key there (ssh-copy-id {self.target.destination}) or name it with IdentityFile in ~/.ssh/config"
            )
        if "Host key verification failed" in text or "IDENTIFICATION HAS CHANGED" in text:
            return f"{self.target}: its host key is unknown or changed: connect once with `ssh {self.target.destination}` to check it"
        if any(marker in text for marker in _UNREACHABLE):
            return f"{self.target} is unreachable ({reason}): check the host, the port and that sshd runs there"
        return f"{self.target}: ssh failed: {reason}"

    def _agent_failure(self, stderr: bytes) -> str:
        text = stderr.decode("utf-8", "replace")
        if any(m in text for m in ("Permission denied", "Host key verification failed", *_UNREACHABLE)):
            return self._ssh_failure(stderr)
        return failure_line(str(self.target), stderr)

    async def _connect(self) -> HostInfo:
        async with self._connect_lock:
            if self._control_dir is None:
                self._control_dir = tempfile.mkdtemp(prefix="kstui-ssh-", dir=_short_tmp())
            if not self._master_open:
                await self._open_master()
                self._master_open = True
            if self._host is None:
                self._host = await self._probe()
            if self._agent is None or not self._agent.alive:
                if self._agent is not None:
                    await self._agent.close()
                # -S: the agent needs only the standard library, so it skips site-packages' start-up.
                argv = self._command([self._host.python, "-S", "-c", scripts.AGENT_PY, self._host.python, self._host.cache])
                self._agent = await SshSession.start(argv, timeout_s=self.connect_timeout_s + 60,
                                                describe_failure=self._agent_failure)
            return self._host

    async def _open_master(self) -> None:
        # -f backgrounds the master after authentication; its stderr goes to a file, not a pipe,
        # because the background master keeps it open for as long as it lives.
        assert self._control_dir is not None
        log = Path(self._control_dir) / "master.log"
        argv = self._ssh("-M", "-N", "-f", "-o", f"ControlPersist={self.control_persist_s}", "--", self.target.destination)
        with log.open("wb") as err:
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=err
                )
            except OSError as exc:
                raise ExecutorError(f"{self.target}: cannot run ssh: {exc.strerror or exc}") from None
            try:
                code = await asyncio.wait_for(proc.wait(), self.connect_timeout_s + 10)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
                raise ExecutorError(f"{self.target} is unreachable (no answer in {self.connect_timeout_s:g} s)") from None
        if code != 0:
            raise ExecutorError(self._ssh_failure(log.read_bytes()))

    async def _probe(self) -> HostInfo:
        done = await self._run(
            ["sh", "-c", scripts.PROBE_SH, "kstui-probe", self.target.python or "", scripts.PROBE_PY,
             self.remote_cache or ""],
            what=f"probe of {self.target}",
            timeout_s=self.connect_timeout_s + 60,
        )
        if done.returncode == 96:
            raise ExecutorError(
                f"{self.target}: {last_line(done.stderr).removeprefix('kstui-remote: ')}: "
                "name the interpreter or venv in the URL (ssh://host/path/to/venv)"
            )
        found = re.search(r"^kstui-probe (\{.*\})$", done.stdout.decode("utf-8", "replace"), re.MULTILINE)
        if done.returncode != 0 or not found:
            raise ExecutorError(f"{self.target}: the probe failed ({last_line(done.stderr) or f'exit status {done.returncode}'})")
        info = json.loads(found.group(1))
        python = info["python"]
        if "missing" in info:
            raise ExecutorError(
                f"{self.target}: kstui is not installed for {python} there ({info['missing']}); "
                f"on the host run: {python} -m pip install kstui"
            )
        if info.get("schema") != SCHEMA_VERSION:
            raise ExecutorError(
                f"{self.target}: its harness (kstui {info.get('kstui') or '?'}) writes result schema "
                f"{info.get('schema')}, this kstui ({kstui.__version__}) reads schema {SCHEMA_VERSION}: "
                f"install the same version on both sides ({python} -m pip install kstui=={kstui.__version__})"
            )
        return HostInfo(python=python, cache=info["cache"], hostname=info["hostname"])

    # --- files -----------------------------------------------------------------------------------

    async def _ensure_sent(self, host: HostInfo, files: dict[str, bytes]) -> None:
        unknown = [h for h in files if h not in self._present]
        if not unknown:
            return
        objects = f"{host.cache}/objects"
        done = await self._run(["sh", "-c", scripts.HAVE_SH, "kstui-have", objects, *unknown],
                               what=f"cache check on {self.target}", timeout_s=60)
        missing = set(done.stdout.decode().split())
        for h in unknown:
            if h in missing:
                sent = await self._run(["sh", "-c", scripts.SEND_SH, "kstui-send", objects, h],
                                       what=f"upload to {self.target}", timeout_s=300, stdin=files[h])
                if sent.returncode != 0:
                    raise ExecutorError(f"{self.target}: upload failed: {last_line(sent.stderr) or sent.returncode}")
                self.sent.append(h)
            self._present.add(h)

    # --- evaluating ------------------------------------------------------------------------------

    async def evaluate(
        self, kernel: Path, *, scenarios: str = "full", extra_args: Sequence[str] = (),
        progress: ProgressCallback | None = None,  # unused: the host agent protocol carries none
    ) -> EvalResult:
        kernel = Path(kernel)
        bundle = read_bundle(kernel)
        files = {sha256(data): data for data in bundle.files.values()}
        ksha = sha256(bundle.source)

        host = await self._connect()
        await self._ensure_sent(host, files)
        check_gpu = self.require_idle_gpu and "--check-only" not in extra_args
        asked = time.monotonic()
        async with self._pool.lease() as devices:
            waited = time.monotonic() - asked
            request = {
                "kernel": bundle.kernel, "files": {name: sha256(data) for name, data in bundle.files.items()},
                "work": bundle.digest()[:40], "check_gpu": check_gpu, "devices": devices,
                "args": harness_args("", scenarios, extra_args, devices)[2:],
            }
            what = f"harness on {self.target}"
            done = await self._request(request, what)
            if done.returncode == scripts.MISSING_EXIT:  # the host's cache was cleaned meanwhile
                self._present.difference_update(files)
                await self._ensure_sent(host, files)
                done = await self._request(request, what)
        if done.returncode == scripts.REFUSED_EXIT:
            raise ExecutorError(f"{self.target}: {last_line(done.stderr).removeprefix('kstui-remote: ')}")
        result = parse_result(done, what)
        if result.kernel_sha256 != ksha:
            raise ExecutorError(f"{what} evaluated other content (sha256 {result.kernel_sha256[:12]}, sent {ksha[:12]})")
        result.kernel = str(kernel)
        return annotate(result, host=self.target.host, queue_wait_s=waited)

    async def _request(self, request: dict[str, object], what: str) -> Completed:
        await self._connect()  # restarts the agent if its session ended
        assert self._agent is not None
        return await self._agent.request(request, timeout_s=self.timeout_s, what=what)

    async def close(self) -> None:
        """Stop the agent and the master connection, remove the socket directory (idempotent)."""
        agent, self._agent = self._agent, None
        if agent is not None:
            await agent.close()
        control = self._control_dir
        self._host = None
        self._present.clear()
        if control is None:
            return
        try:
            if self._master_open:
                argv = self._ssh("-O", "exit", "--", self.target.destination)
                await run_process(argv, timeout_s=10, what="closing the ssh connection")
        except ExecutorError:
            pass  # the master is gone already, or leaves by itself after ControlPersist
        finally:
            self._master_open = False
            self._control_dir = None
            shutil.rmtree(control, ignore_errors=True)


def _short_tmp() -> str | None:
    # A control socket path must fit in sun_path (about 100 bytes); macOS's $TMPDIR is too long.
    return "/tmp" if Path("/tmp").is_dir() else None
