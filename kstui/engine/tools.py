"""The agent's tools, confined to the workspace.

Every path resolves inside the workspace (`..`, absolute paths elsewhere and symlinks that lead out
are refused); `.git`, kstui's state, the task's judge files (its task file, the reference and baselines a
spec names), the harness and any protected path are never written; files are opened without following a
link in their last component. bash runs in the workspace with the secret policy's environment
(kstui.engine.secrets), a timeout and a cap on what
it returns (output is read as it comes and only the head and tail are kept), inside bubblewrap
(kstui.engine.sandbox); where bubblewrap cannot run, bash is off unless the user turned on the
unconfined shell knowingly. A tool never raises for bad input: it returns ToolOutcome(is_error=True) with
one line saying what is wrong.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import stat
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kstui.engine import cgroup
from kstui.engine.integrity import judge_paths
from kstui.engine.sandbox import MEMORY_BYTES, NPROC, Sandbox
from kstui.engine.secrets import shell_environment
from kstui.executors import lifeline

_LIST_LIMIT = 1000
# Files the line tools (read_file by lines, edit_file) take in whole: a source is far smaller, and a huge
# (or sparse) file read whole would cost seconds and gigabytes.
FILE_LIMIT = 16 * 1024 * 1024
_SKIP_DIRS = {".git", ".kstui", "__pycache__"}
_READ_CHUNK = 1 << 16
_REAP_GRACE_S = 1.0  # after the command exits: how long background jobs may hold its output open
_POLL_S = 0.1
_REAP_POLL_S = 0.005


@dataclass
class ToolOutcome:
    text: str
    is_error: bool = False


class ToolError(Exception):
    """A refused or failed tool call; the message is the one line the agent gets back."""


def _harness_dir() -> Path | None:
    spec = importlib.util.find_spec("harness")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


class Toolbox:
    def __init__(
        self,
        workspace: Path,
        kernel: Path,
        *,
        evaluate: Callable[[str | None], Awaitable[str]],
        session_scenarios: str = "full",
        protected: Sequence[Path] = (),
        confirm_shell: Callable[[str], Awaitable[bool]] | None = None,
        bash_timeout_s: float = 120,
        output_cap: int = 30_000,
        sandbox: Sandbox | None = None,
        unconfined_shell: bool = False,
        shell_off: str = "",
    ) -> None:
        self.workspace = workspace.resolve()
        self.kernel = (kernel if kernel.is_absolute() else self.workspace / kernel).resolve()
        self._evaluate = evaluate
        self.session_scenarios = session_scenarios
        self._confirm_shell = confirm_shell
        self.bash_timeout_s = bash_timeout_s
        self.output_cap = output_cap
        self.sandbox = sandbox
        # bash runs confined, or unconfined only when the user asked for it; otherwise it is off (and why)
        self.shell_on = sandbox is not None or unconfined_shell
        self.shell_off = shell_off or "bash is off: bubblewrap cannot confine it here"
        candidates = [
            self.workspace / ".git",
            self.workspace / ".kstui",
            self.workspace / "harness",
            self.kernel.with_suffix(".toml"),
            *judge_paths(self.kernel),  # the task file and every Python file a spec names
            *(p if p.is_absolute() else self.workspace / p for p in protected),
        ]
        harness = _harness_dir()
        if harness is not None:
            candidates.append(harness)
        # Both spellings: the path as named and where it leads, so a symlinked .git is covered too.
        self.protected = sorted({Path(os.path.normpath(p)) for p in candidates} | {p.resolve() for p in candidates})
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[ToolOutcome]]] = {
            "read_file": self._read_file,
            "edit_file": self._edit_file,
            "write_file": self._write_file,
            "list_files": self._list_files,
            "bash": self._bash,
            "evaluate": self._evaluate_tool,
        }

    def definitions(self) -> list[dict[str, Any]]:
        """The tools as Messages API definitions."""
        rel = self._rel(self.kernel)
        tools = [
            _tool(
                "read_file",
                "Read a text file in the workspace. Optionally only lines start_line..end_line (1-based, inclusive).",
                {"path": _STR, "start_line": _INT, "end_line": _INT},
                ["path"],
            ),
            _tool(
                "edit_file",
                "Replace one exact occurrence of old_string with new_string in a workspace file. old_string "
                "must occur exactly once: include enough surrounding text to make it unique.",
                {"path": _STR, "old_string": _STR, "new_string": _STR},
                ["path", "old_string", "new_string"],
            ),
            _tool(
                "write_file",
                "Create or overwrite a file in the workspace with the given content.",
                {"path": _STR, "content": _STR},
                ["path", "content"],
            ),
            _tool(
                "list_files",
                "List the files under a workspace directory (default: the workspace root), with sizes.",
                {"path": _STR},
                [],
            ),
            _tool(
                "bash",
                f"Run a bash command with the workspace as its working directory. It is killed after "
                f"timeout_s seconds (default and maximum {self.bash_timeout_s:g}); its combined output is "
                f"returned, the middle elided beyond {self.output_cap:,} characters.",
                {"command": _STR, "timeout_s": {"type": "number"}},
                ["command"],
            ),
            _tool(
                "evaluate",
                f"Evaluate the kernel file {rel} with the harness: build, checks, correctness on every "
                "scenario and timing against the baseline. Returns the verdict. scenarios: by default the "
                f"session's set ('{self.session_scenarios}'), the only one whose verdict can be accepted; "
                "'full', 'quick' or comma-separated scenario ids run that set for information only.",
                {"scenarios": _STR},
                [],
            ),
        ]
        return [t for t in tools if self.shell_on or t["name"] != "bash"]

    async def run(self, name: str, input: dict[str, Any]) -> ToolOutcome:
        handler = self._handlers.get(name)
        if handler is None:
            return ToolOutcome(f"unknown tool {name!r}; the tools are {', '.join(self._handlers)}", True)
        if not isinstance(input, dict):
            return ToolOutcome(f"{name}: the input must be a JSON object", True)
        try:
            return await handler(input)
        except ToolError as exc:
            return ToolOutcome(f"{name}: {exc}", True)
        except UnicodeDecodeError:
            return ToolOutcome(f"{name}: the file is not UTF-8 text", True)
        except OSError as exc:
            return ToolOutcome(f"{name}: {exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""), True)

    # ---- paths ----

    def _rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.workspace)) or "."
        except ValueError:
            return str(path)

    def resolve(self, raw: Any, *, write: bool) -> Path:
        """The absolute path a tool may use for `raw`, or ToolError saying why not."""
        if not isinstance(raw, str) or not raw.strip():
            raise ToolError("path must be a non-empty string")
        if "\x00" in raw:
            raise ToolError("path contains a NUL byte")
        candidate = Path(raw) if Path(raw).is_absolute() else self.workspace / raw
        lexical = Path(os.path.normpath(candidate))
        if not lexical.is_relative_to(self.workspace):
            raise ToolError(f"{raw} is outside the workspace {self.workspace}; every path must stay inside it")
        try:
            resolved = candidate.resolve()
        except RuntimeError:  # Python < 3.13 reports a symlink loop this way
            raise ToolError(f"{raw} is a symlink loop") from None
        if not resolved.is_relative_to(self.workspace):
            raise ToolError(f"{raw} leads out of the workspace through a symlink (to {resolved}); refused")
        for path in (lexical, resolved):
            guarded = self._protection(path)
            if guarded is not None and (write or guarded.name == ".git"):
                what = "written" if write else "read"
                raise ToolError(f"{raw} is inside {self._rel(guarded)}, which the agent may not have {what}")
        return resolved

    def _protection(self, path: Path) -> Path | None:
        for guarded in self.protected:
            if path == guarded or path.is_relative_to(guarded):
                return guarded
        return None

    # ---- file tools ----

    async def _read_file(self, args: dict[str, Any]) -> ToolOutcome:
        path = self.resolve(args.get("path"), write=False)
        start = _opt_int(args, "start_line")
        end = _opt_int(args, "end_line")
        if not path.is_file():
            raise ToolError(f"{args['path']} is not a file" if path.exists() else f"{args['path']} does not exist")
        if start is None and end is None:
            size = path.stat().st_size
            with path.open("rb") as f:
                data = f.read(self.output_cap + 1)
            text = data.decode("utf-8", errors="replace")
            if size > self.output_cap:
                text = text[: self.output_cap] + (
                    f"\n[read_file: the file has {size:,} bytes; only the first {self.output_cap:,} are shown. "
                    "Use start_line/end_line.]"
                )
            return ToolOutcome(text)
        first, last = start or 1, end
        if first < 1 or (last is not None and last < first):
            raise ToolError("start_line must be ≥ 1 and end_line ≥ start_line")
        _check_size(path, args["path"], "reading by lines")
        lines: list[str] = []
        length = 0
        with path.open(encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                if number < first:
                    continue
                if (last is not None and number > last) or length > self.output_cap:
                    break
                lines.append(line)
                length += len(line)
        return ToolOutcome("".join(lines)[: self.output_cap])

    async def _edit_file(self, args: dict[str, Any]) -> ToolOutcome:
        path = self.resolve(args.get("path"), write=True)
        old, new = _req_str(args, "old_string"), _req_str(args, "new_string")
        if not old:
            raise ToolError("old_string is empty; use write_file to create or replace a whole file")
        if old == new:
            raise ToolError("old_string and new_string are the same; nothing to change")
        if not path.is_file():
            raise ToolError(f"{args['path']} does not exist" if not path.exists() else f"{args['path']} is not a file")
        _check_size(path, args["path"], "editing")
        text = path.read_text(encoding="utf-8")
        count = text.count(old)
        if count == 0:
            raise ToolError(f"old_string was not found in {args['path']} (it must match exactly, whitespace included)")
        if count > 1:
            raise ToolError(
                f"old_string occurs {count} times in {args['path']}; include more surrounding text so it is unique"
            )
        at = text.index(old)
        _write_text(path, text[:at] + new + text[at + len(old) :])
        line = text.count("\n", 0, at) + 1
        return ToolOutcome(f"edited {self._rel(path)} at line {line}")

    async def _write_file(self, args: dict[str, Any]) -> ToolOutcome:
        path = self.resolve(args.get("path"), write=True)
        content = _req_str(args, "content")
        if path.is_dir():
            raise ToolError(f"{args['path']} is a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_text(path, content)
        return ToolOutcome(f"wrote {self._rel(path)} ({len(content.encode()):,} bytes)")

    async def _list_files(self, args: dict[str, Any]) -> ToolOutcome:
        root = self.resolve(args.get("path") or ".", write=False)
        if not root.is_dir():
            raise ToolError(f"{args.get('path')} is not a directory")
        rows: list[str] = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
            base = Path(dirpath)
            for name in sorted(filenames):
                if len(rows) >= _LIST_LIMIT:
                    rows.append(f"[list_files: stopped at {_LIST_LIMIT} entries]")
                    return ToolOutcome("\n".join(rows))
                entry = base / name
                size = entry.lstat().st_size
                suffix = " -> (symlink)" if entry.is_symlink() else ""
                rows.append(f"{self._rel(entry)}  {size:,} B{suffix}")
        return ToolOutcome("\n".join(rows) if rows else "(no files)")

    # ---- bash ----

    async def _bash(self, args: dict[str, Any]) -> ToolOutcome:
        if not self.shell_on:
            raise ToolError(self.shell_off)
        command = _req_str(args, "command")
        if not command.strip():
            raise ToolError("command is empty")
        timeout = args.get("timeout_s", self.bash_timeout_s)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ToolError("timeout_s must be a positive number of seconds")
        timeout = min(float(timeout), self.bash_timeout_s)
        if self._confirm_shell is not None and not await self._confirm_shell(command):
            return ToolOutcome("the human declined to run this command", True)
        env = shell_environment()
        if self.sandbox is None:
            return await self._run_bounded(["bash", "-c", command], timeout, env)
        env.update(HOME="/tmp", TMPDIR="/tmp")  # the home directory is not there
        group = cgroup.make(NPROC, MEMORY_BYTES)
        try:
            argv = self.sandbox.wrap(command, workspace=self.workspace, read_only=self.protected, group=group)
            return await self._run_bounded(argv, timeout, env)
        finally:
            if group is not None:
                group.remove()

    async def _run_bounded(self, argv: list[str], timeout: float, env: dict[str, str]) -> ToolOutcome:
        capture = _Capture(self.output_cap)
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=self.workspace,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group, so that a kill takes every child with it
            preexec_fn=lifeline.tie_to_parent(),  # and it dies with kstui, even a SIGKILLed one
        )
        lifeline.track(proc.pid)
        assert proc.stdout is not None
        reader = asyncio.create_task(capture.drain(proc.stdout))
        deadline = started + timeout
        timed_out = False
        try:
            # The output ends when every process holding it ends; the shell itself may exit earlier
            # and leave a background job behind, which gets a moment and is then ended with the group.
            while not reader.done():
                if proc.returncode is not None:
                    await asyncio.wait({reader}, timeout=_REAP_GRACE_S)
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                await asyncio.wait({reader}, timeout=min(_POLL_S, remaining))
            if not timed_out:
                await _reaped(proc)  # the shell's own exit status, before the group is ended
        finally:
            _kill_group(proc.pid)
            await asyncio.wait({reader}, timeout=_REAP_GRACE_S)
            reader.cancel()
            await _reaped(proc)
            lifeline.untrack(proc.pid)
        output = capture.render()
        seconds = time.monotonic() - started
        if timed_out:
            return ToolOutcome(f"timed out after {timeout:g} s and was killed; output so far:\n{output}", True)
        code = proc.returncode
        if code is None:
            return ToolOutcome(f"the command did not report an exit status; output:\n{output}", True)
        return ToolOutcome(f"exit code {code} ({seconds:.1f} s)\n{output}", code != 0)

    # ---- evaluate ----

    async def _evaluate_tool(self, args: dict[str, Any]) -> ToolOutcome:
        scenarios = args.get("scenarios") or None  # none asked: the session's own set
        if scenarios is not None and not isinstance(scenarios, str):
            raise ToolError("scenarios must be a string: 'full', 'quick' or comma-separated ids")
        try:
            return ToolOutcome(await self._evaluate(scenarios))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the session's evaluator failing is a tool error, never a crash
            first = str(exc).strip().splitlines()
            return ToolOutcome(f"the evaluation failed: {first[0] if first else type(exc).__name__}", True)


class _Capture:
    """Keeps the first and last part of a stream of bytes and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap * 2 // 3
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(_READ_CHUNK):
            self.total += len(chunk)
            room = self.head_cap - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail += chunk
                if len(self.tail) > self.tail_cap:
                    del self.tail[: len(self.tail) - self.tail_cap]

    def render(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        omitted = self.total - len(self.head) - len(self.tail)
        if omitted <= 0:
            return head + self.tail.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        return f"{head}\n[... {omitted:,} bytes of output omitted ({self.total:,} in all) ...]\n{tail}"


async def _reaped(proc: asyncio.subprocess.Process) -> None:
    """Wait (briefly) for the exit status; proc.wait() would also wait for the pipes to close."""
    for _ in range(int(2 * _REAP_GRACE_S / _REAP_POLL_S)):
        if proc.returncode is not None:
            return
        await asyncio.sleep(_REAP_POLL_S)


def _write_text(path: Path, content: str) -> None:
    """Write a file the path check allowed, never through a link put in its place since, never into a
    FIFO or device (a FIFO would block kstui until someone reads it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToolError(f"{path.name} is not a regular file")
        f.truncate(0)
        f.write(content)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


_STR = {"type": "string"}
_INT = {"type": "integer"}


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "input_schema": {"type": "object", "properties": properties, "required": required},
    }


def _req_str(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if value is None:
        raise ToolError(f"missing argument {key!r}")
    if not isinstance(value, str):
        raise ToolError(f"argument {key!r} must be a string")
    return value


def _opt_int(args: dict[str, Any], key: str) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolError(f"argument {key!r} must be an integer")
    return value


def _check_size(path: Path, shown: str, tool: str) -> None:
    size = path.stat().st_size
    if size > FILE_LIMIT:
        raise ToolError(f"{shown} has {size:,} bytes: {tool} takes files up to {FILE_LIMIT // (1024 * 1024)} MiB "
                        "(read_file without lines shows its start)")
