"""The session trace: one JSON event per line under <workspace>/.kstui/sessions/<id>/trace.jsonl.

Durability: every line is written with one write() and flushed, so once append() returns the event is
in the kernel's page cache and a SIGKILL of kstui loses at most the line being written. fsync (which
also survives a power cut) costs milliseconds per call, far too much for tens of thousands of events,
so it runs only on the events one would hate to lose (an accepted commit, a rewind, the end) and at
close(). A torn last line is ignored by the reader and cut off by the next writer that appends.

Secrets never reach the file: a Scrubber (kstui.engine.secrets) replaces environment secrets and
Anthropic-shaped keys in every string of every event before it is serialised, and streamed text is
also checked across chunk boundaries, so a key the model prints in pieces is redacted too. The file
is opened without following a link.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any

from harness.result import SchemaError
from kstui.engine.events import Accepted, Event, Rewound, SessionEnded, TextDelta, ThinkingDelta, event_from_dict
from kstui.engine.secrets import Scrubber

TRACE_NAME = "trace.jsonl"
META_NAME = "meta.json"

_DURABLE = (Accepted, Rewound, SessionEnded)


class TraceError(Exception):
    """One line: the trace cannot be read (names the file and line)."""



def _dumps(data: Any) -> str:
    try:
        return json.dumps(data)  # the module's cached encoder: the fast path
    except TypeError:
        return json.dumps(data, default=_json_default)


def _json_default(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def _event_dict(event: Event) -> dict[str, Any]:
    # Event.to_dict() deep-copies through asdict(); events hold plain JSON data, so a shallow dict
    # serialises to the same line at a fraction of the cost (nested dataclasses go via _json_default).
    return {"type": event.type, **vars(event)}


class TraceWriter:
    """Appends events to a trace file, one line each with a single write(), secrets scrubbed."""

    def __init__(self, path: Path, *, extra_secrets: Iterable[str] = (), fsync: bool = True) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _cut_torn_tail(self.path)
        # unbuffered O_APPEND: each line goes to the kernel in one call, nothing waits in a buffer
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        self._scrubber = Scrubber.from_environ(extra=extra_secrets)
        self._fsync = fsync

    def append(self, event: Event) -> None:
        if self._fd is None:
            raise ValueError(f"trace {self.path} is closed")
        if isinstance(event, (TextDelta, ThinkingDelta)):
            event = self._scrubber.stitch(event)
        data = (self._scrubber.dumps(_event_dict(event)) + "\n").encode("utf-8", "surrogateescape")
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        if self._fsync and isinstance(event, _DURABLE):
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if self._fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cut_torn_tail(path: Path) -> None:
    """Drop a last line without its newline (a write cut by SIGKILL) so appends start on a clean line."""
    if not path.exists():
        return
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        pos = size
        while pos > 0:
            step = min(1 << 16, pos)
            pos -= step
            f.seek(pos)
            cut = f.read(step).rfind(b"\n")
            if cut >= 0:
                f.truncate(pos + cut + 1)
                return
        f.truncate(0)


def read_trace(path: Path) -> Iterator[Event]:
    """The events of a trace, in order.

    A last line without its newline is a torn write and is skipped; an event type this kstui does not
    know (a newer trace) is skipped; any other unreadable line raises TraceError naming the line.
    """
    try:
        f = open(path, encoding="utf-8", errors="surrogateescape", newline="\n")
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror}") from None
    classes: dict[str, type[Event]] = {}  # type -> class, learnt from event_from_dict's first answer
    with f:
        for lineno, line in enumerate(f, 1):
            if not line.endswith("\n"):
                return
            if line.isspace():
                continue
            try:
                data = json.loads(line)
            except ValueError:
                raise TraceError(f"{path}:{lineno}: not a JSON event") from None
            if not isinstance(data, dict):
                raise TraceError(f"{path}:{lineno}: not a JSON object")
            event = _build(data, classes)
            if event is None:
                continue  # an event type this kstui does not know
            if event is _BAD:
                raise TraceError(f"{path}:{lineno}: malformed {data.get('type')!r} event")
            yield event


_BAD = object()


def _build(data: dict[str, Any], classes: dict[str, type[Event]]) -> Any:
    """event_from_dict, with the per-line field lookup skipped for types already seen (the hot path)."""
    cls = classes.get(data.get("type", ""))
    if cls is not None:
        kwargs = dict(data)
        del kwargs["type"]
        try:
            return cls(**cls.decode(kwargs))
        except (TypeError, SchemaError):
            pass  # an extra key from a newer kstui, a missing one, a bad value: let event_from_dict decide
    try:
        event = event_from_dict(data)
    except SchemaError:
        return _BAD  # a known event holding a value that is not what it must be
    except ValueError:
        return None
    except TypeError:
        return _BAD
    classes[event.type] = type(event)
    return event


# --- sessions on disk --------------------------------------------------------------------------


@dataclass
class SessionMeta:
    session_id: str
    kernel: str  # relative to the workspace when inside it, so a moved workspace still resumes
    started: float
    model: str | None = None

    def kernel_path(self, workspace: Path) -> Path:
        return (Path(workspace) / self.kernel).resolve()


def new_session_id(now: float | None = None) -> str:
    """UTC time plus a random suffix: sorts by start time, unique within a second."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{os.urandom(2).hex()}"


def session_dir(workspace: Path, session_id: str) -> Path:
    return Path(workspace) / ".kstui" / "sessions" / session_id


def trace_path(directory: Path) -> Path:
    return Path(directory) / TRACE_NAME


def create_session(workspace: Path, kernel: Path, model: str | None, *, now: float | None = None) -> Path:
    """Make a new session directory with its meta.json; returns the directory."""
    started = time.time() if now is None else now
    sid = new_session_id(started)
    directory = session_dir(workspace, sid)
    directory.mkdir(parents=True, exist_ok=False)
    ignore = Path(workspace) / ".kstui" / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n", encoding="utf-8")  # kstui's state never shows in the user's `git status`
    kernel = Path(kernel).resolve()
    try:
        stored = kernel.relative_to(Path(workspace).resolve()).as_posix()
    except ValueError:
        stored = str(kernel)
    meta = SessionMeta(session_id=sid, kernel=stored, started=started, model=model)
    tmp = directory / (META_NAME + ".tmp")
    tmp.write_text(json.dumps(asdict(meta), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, directory / META_NAME)
    return directory


def set_meta_model(directory: Path, model: str) -> None:
    """Record the model once it is known (the agent picks its default after the session directory exists)."""
    path = Path(directory) / META_NAME
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("model") == model:
        return
    data["model"] = model
    tmp = path.with_name(META_NAME + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_meta(directory: Path) -> SessionMeta | None:
    try:
        data = json.loads((Path(directory) / META_NAME).read_text(encoding="utf-8"))
        return SessionMeta(
            session_id=str(data["session_id"]),
            kernel=str(data["kernel"]),
            started=float(data["started"]),
            model=data.get("model"),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def latest_session(workspace: Path, kernel: Path) -> Path | None:
    """The directory of the most recent session of this kernel in the workspace, or None."""
    root = Path(workspace) / ".kstui" / "sessions"
    if not root.is_dir():
        return None
    target = Path(kernel).resolve()
    best: tuple[float, str, Path] | None = None
    for directory in root.iterdir():
        meta = read_meta(directory)
        if meta is None or meta.kernel_path(workspace) != target:
            continue
        key = (meta.started, meta.session_id, directory)
        if best is None or key[:2] > best[:2]:
            best = key
    return best[2] if best else None
