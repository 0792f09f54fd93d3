"""A real OpenSSH server on 127.0.0.1 for the SSH executor tests, with generated keys.

It runs `sshd -D` as the current user on a free port with a config of its own (StrictModes no, keys
only, LogLevel VERBOSE into a log the tests read to count TCP connections). Tests skip with a reason
where sshd or the ssh client is not installed (.ci/setup-system.sh installs them).
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from kstui.executors.ssh import SshExecutor, SshTarget


def _tool(name: str) -> str | None:
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@dataclass
class SshServer:
    port: int
    root: Path
    user: str

    @property
    def log(self) -> Path:
        return self.root / "sshd.log"

    def url(self, python: str | os.PathLike[str] | None = None, port: int | None = None) -> str:
        return f"ssh://{self.user}@127.0.0.1:{port or self.port}{python or ''}"

    def connections(self) -> int:
        """TCP connections sshd has accepted so far."""
        return self.log.read_text(errors="replace").count("Connection from ")

    def client_config(self, key: str = "user_key", known_hosts: str = "known_hosts") -> Path:
        config = self.root / f"ssh_config.{key}.{known_hosts}"
        config.write_text(
            "Host *\n"
            f"  IdentityFile {self.root / key}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.root / known_hosts}\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n"
            "  LogLevel ERROR\n"
        )
        return config

    def executor(
        self,
        python: str | os.PathLike[str] | None,
        cache: Path,
        *,
        port: int | None = None,
        ssh_options: Sequence[str] | None = None,
        **kwargs: object,
    ) -> SshExecutor:
        options = list(ssh_options) if ssh_options is not None else ["-F", str(self.client_config())]
        kwargs.setdefault("control_persist_s", 20)  # a test process killed mid-test leaves no master for long
        return SshExecutor(
            SshTarget.parse(self.url(python, port)), ssh_options=options, remote_cache=str(cache), **kwargs  # type: ignore[arg-type]
        )


class SshdUnavailable(Exception):
    """sshd is not installed or did not start (the reason is the message)."""


@contextmanager
def running_sshd(root: Path) -> Iterator[SshServer]:
    """An sshd on 127.0.0.1 with keys and configs under root, stopped on exit."""
    daemon = _tool("sshd")
    if daemon is None or _tool("ssh") is None or _tool("ssh-keygen") is None:
        raise SshdUnavailable("OpenSSH (sshd, ssh, ssh-keygen) is not installed: run .ci/setup-system.sh")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
    root.mkdir(parents=True, exist_ok=True)
    for key in ("host_key", "user_key", "other_key"):
        _keygen(root / key)
    (root / "authorized_keys").write_text((root / "user_key.pub").read_text())
    port = free_port()
    host_pub = (root / "host_key.pub").read_text().split()
    (root / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    (root / "no_known_hosts").write_text("")
    config = root / "sshd_config"
    config.write_text(
        f"ListenAddress 127.0.0.1\nHostKey {root / 'host_key'}\nPidFile {root / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {root / 'authorized_keys'}\n"
        "StrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PubkeyAuthentication yes\nPermitRootLogin prohibit-password\nLogLevel VERBOSE\n"
        "MaxSessions 20\nMaxStartups 20\n"
    )
    server = SshServer(port=port, root=root, user=getpass.getuser())
    proc = subprocess.Popen([daemon, "-D", "-f", str(config), "-p", str(port), "-E", str(server.log)])
    try:
        deadline = time.monotonic() + 10
        while "Server listening" not in (server.log.read_text() if server.log.exists() else ""):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SshdUnavailable(f"sshd did not start: {server.log.read_text() if server.log.exists() else proc.returncode}")
            time.sleep(0.02)
        yield server
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    try:
        with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
            yield server
    except SshdUnavailable as exc:
        pytest.skip(str(exc))
