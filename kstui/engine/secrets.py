"""kstui's side of the one secret policy (harness.secret_env): what untrusted code gets, what is shown.

- The agent's bash gets `shell_environment()`: the environment without any withheld variable.
- Everything kstui writes or shows (the trace, notes, commit messages, every event a view receives,
  so the TUI, the transcript and the headless printer) goes through a `Scrubber`: the values of secret
  variables (and the API key from wherever it came) and Anthropic-shaped keys become "[redacted]".
- A kernel whose text carries a secret's value is refused before it is judged (`kernel_secret`, with
  harness.secret_scan's encodings): it is never committed, and its text never leaves in a diff.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, is_dataclass, replace
from pathlib import Path
from typing import Any

from harness import secret_env, secret_scan
from kstui.engine.events import Event, TextDelta, ThinkingDelta, event_from_dict

REDACTED = secret_env.REDACTED
_ANTHROPIC_KEY = r"sk-ant-[A-Za-z0-9_\-]{4,}"
_PARTIAL_KEY = re.compile(r"(?:sk-an?|sk-ant|sk-ant-[A-Za-z0-9_\-]{0,3})$")  # a key's start, cut by a chunk
# Below this length a secret is only redacted where a whole string equals it: replacing every
# occurrence of a 4-character value inside tool output would mangle the trace for nothing.
_MIN_SUBSTRING_SECRET = secret_env.MIN_SECRET_LEN
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# The same characters as json.dumps writes them (a few false alarms only cost the structural scrub).
_JSON_CONTROL = re.compile(r"\\u00[0189][0-9a-fA-F]|\\[bfr]|\x7f")


def shell_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for the agent's bash: no key, token, credential or agent socket."""
    return secret_env.scrubbed(env)


def kernel_secret(text: str, extra: Iterable[str] = ()) -> str | None:
    """Why a kernel may not be judged or kept (it carries a secret's value), or None."""
    check = secret_scan.secret_check(text.encode("utf-8", "surrogateescape"), secret_env.secret_values(extra=extra))
    return None if check.ok else check.detail


class Scrubber:
    """Replaces secrets in strings; built once, applied to every event. With `inert`, also control
    characters but newline and tab, as \\xNN: the model's and the tools' text never drives the
    user's terminal (escape sequences set the clipboard or the title, or hide what follows), in the
    TUI (Rich passes ESC through) or headless."""

    def __init__(self, secrets: Iterable[str], *, inert: bool = False) -> None:
        values = {v for v in secrets if v}
        self.inert = inert
        # the last raw text of each streamed kind (type -> (turn, tail)), for secrets split across chunks
        self._tails: dict[str, tuple[int, str]] = {}
        # longest first, so a secret that contains another is replaced whole
        self.long_secrets = sorted((v for v in values if len(v) >= _MIN_SUBSTRING_SECRET), key=len, reverse=True)
        self.short_secrets = frozenset(v for v in values if len(v) < _MIN_SUBSTRING_SECRET)
        self._text_re = re.compile("|".join([re.escape(v) for v in self.long_secrets] + [_ANTHROPIC_KEY]))
        # The same secrets as they appear inside a JSON line: plain substring tests (memchr-fast) tell
        # whether a whole event needs the slow, structural scrub.
        self._needles = [_json_str(v)[1:-1] for v in self.long_secrets]
        self._needles += [_json_str(v) for v in self.short_secrets] + ["sk-ant-"]

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str] | None = None, extra: Iterable[str] = (), *, inert: bool = False
    ) -> Scrubber:
        """The secrets of harness.secret_env's policy in an environment (os.environ when None), plus `extra`."""
        env = os.environ if environ is None else environ
        values = [v for k, v in env.items() if secret_env.is_secret_name(k) or secret_env.is_secret_value(v)]
        return cls(values + list(extra), inert=inert)

    def event(self, event: Event) -> Event:
        """The event with every secret in it redacted (the same object when it holds none)."""
        line = _dumps({"type": event.type, **vars(event)})
        if not any(needle in line for needle in self._needles) and not (self.inert and _JSON_CONTROL.search(line)):
            return event
        return event_from_dict(self.value({"type": event.type, **vars(event)}))

    def text(self, value: str) -> str:
        if value in self.short_secrets:
            return REDACTED
        return self._inert(self._text_re.sub(REDACTED, value))

    def _inert(self, text: str) -> str:
        return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text) if self.inert else text

    def seam(self, before: str, text: str) -> str:
        """Scrub a streamed chunk against the chunk before it, so no secret survives a chunk boundary.

        The head of `text` that completes a secret begun in `before` is redacted, and so is a tail that
        may be the start of one (four characters or more): at most three characters of a secret leak.
        """
        combined, b = before + text, len(before)
        head = 0
        for m in self._text_re.finditer(combined):
            if m.start() < b < m.end():
                head = max(head, m.end() - b)
        opened = self._open_secret(combined)
        tail = len(text) if opened is None else max(opened - b, head)
        if head == 0 and tail == len(text):
            return text
        return (REDACTED if head else "") + text[head:tail] + (REDACTED if tail < len(text) else "")

    def stitch(self, event: TextDelta | ThinkingDelta) -> TextDelta | ThinkingDelta:
        """A streamed chunk scrubbed against the chunks of its kind before it (`seam`)."""
        turn, tail = self._tails.get(event.type, (event.turn, ""))
        if turn != event.turn:
            tail = ""
        self._tails[event.type] = (event.turn, (tail + event.text)[-max(256, self.longest + 8) :])
        text = self._inert(self.seam(tail, event.text))
        return event if text == event.text else replace(event, text=text)

    def _open_secret(self, s: str) -> int | None:
        """Where an unfinished secret (its first four characters or more) runs to the end of s, if any."""
        starts = []
        partial = _PARTIAL_KEY.search(s)
        if partial:
            starts.append(partial.start())
        for secret in self.long_secrets:
            i = s.find(secret[:4], max(0, len(s) - len(secret) + 1))
            while i != -1 and not secret.startswith(s[i:]):
                i = s.find(secret[:4], i + 1)
            if i != -1:
                starts.append(i)
        return min(starts) if starts else None

    @property
    def longest(self) -> int:
        return len(self.long_secrets[0]) if self.long_secrets else 0

    def value(self, value: Any) -> Any:
        """Scrub every string in a JSON-like value, keys included."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(v) for v in value]
        if is_dataclass(value) and not isinstance(value, type):
            return self.value(asdict(value))
        return value

    def dumps(self, data: dict[str, Any]) -> str:
        """One JSON line with no secret in it; the common, clean case costs a few substring tests."""
        # ASCII-escaped JSON: the faster encoder, and a line any tool can read whatever its locale
        line = _dumps(data)
        for needle in self._needles:
            if needle in line:
                return _dumps(self.value(data))
        return line


def _json_str(value: str) -> str:
    return json.dumps(value)


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
