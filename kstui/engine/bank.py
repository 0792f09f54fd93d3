"""The question bank: load, validate, merge the overrides, draw the next question, remember what was asked.

The bank ships inside the package (kstui/questions.toml, the one source; the project root's
questions.toml is a link to it). A workspace's questions.toml and then --questions FILE override it
by id, field by field; `disabled = true` takes a question out; a new id adds one.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Literal

from kstui.engine.events import Event, QuestionAsked

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

When = Literal["stall", "claimed_limit", "any"]
WHEN: tuple[str, ...] = ("stall", "claimed_limit", "any")
DEFAULT_BANK = Path(__file__).resolve().parent.parent / "questions.toml"
WORKSPACE_BANK = "questions.toml"

_FIELDS = ("id", "text", "kind", "when", "disabled")
_REQUIRED = ("text", "kind", "when")
_ID = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_KIND = re.compile(r"^[a-z][a-z0-9_-]*$")
_TOML_POS = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_HEADER = re.compile(r"^\s*\[")
_QUESTION_HEADER = re.compile(r"^\s*\[\[\s*question\s*\]\]")


class QuestionBankError(ValueError):
    """One line: `questions.toml:12: question 'x': field 'kind' …`."""


@dataclass
class Question:
    id: str
    text: str
    kind: str
    when: When
    disabled: bool = False


@dataclass
class BankUsage:
    """Which question was used when: plain data, rebuilt from a trace's QuestionAsked events."""

    seq: int = 0
    last_used: dict[str, int] = field(default_factory=dict)
    last_id: str | None = None


def bank_paths(workspace: Path | None = None, explicit: Path | None = None) -> list[Path]:
    """The files that make up a session's bank, in override order."""
    paths = [DEFAULT_BANK]
    if workspace is not None and (Path(workspace) / WORKSPACE_BANK).is_file():
        paths.append(Path(workspace) / WORKSPACE_BANK)
    if explicit is not None:
        paths.append(Path(explicit))
    return paths


class QuestionBank:
    def __init__(self, questions: list[Question]) -> None:
        self.all_questions = questions
        self.usage = BankUsage()

    @property
    def questions(self) -> list[Question]:
        """The enabled questions, in bank order."""
        return [q for q in self.all_questions if not q.disabled]

    def get(self, qid: str) -> Question | None:
        return next((q for q in self.questions if q.id == qid), None)

    @classmethod
    def load(cls, *paths: Path) -> QuestionBank:
        """Load and merge bank files (the packaged bank when none is given); later files override."""
        merged: dict[str, dict[str, Any]] = {}
        for path in paths or (DEFAULT_BANK,):
            _merge_file(Path(path), merged)
        questions = [Question(**q) for q in merged.values()]
        if not any(not q.disabled for q in questions):
            raise QuestionBankError(f"{(paths or (DEFAULT_BANK,))[-1]}: no question left enabled")
        return cls(questions)

    def draw(self, trigger: str | None, *, exclude: Collection[str] = ()) -> Question:
        """The next question for a trigger: matching ones first, then least recently used.

        Matching means `when` equals the trigger or is "any" (no trigger: every question matches);
        among equally stale ones an exact trigger match and then bank order win. The question used
        last is never drawn again straight away, nor any in `exclude` (say, ones already queued),
        unless nothing else is left.
        """
        if trigger is not None and trigger not in WHEN:
            raise ValueError(f"unknown trigger {trigger!r} (one of {', '.join(WHEN)})")
        pool = self.questions
        avoid = set(exclude) | ({self.usage.last_id} if self.usage.last_id else set())
        candidates = [q for q in pool if q.id not in avoid] or [q for q in pool if q.id != self.usage.last_id] or pool

        def key(item: tuple[int, Question]) -> tuple[int, int, int, int]:
            index, q = item
            matches = trigger is None or q.when in (trigger, "any")
            return (0 if matches else 1, self.usage.last_used.get(q.id, -1), 0 if q.when == trigger else 1, index)

        return min(enumerate(candidates), key=key)[1]

    def mark_used(self, qid: str) -> None:
        self.usage.seq += 1
        self.usage.last_used[qid] = self.usage.seq
        self.usage.last_id = qid

    def replay(self, events: Iterable[Event]) -> None:
        """Rebuild the use-state from a trace (on resume): every QuestionAsked with a bank id counts."""
        for event in events:
            if isinstance(event, QuestionAsked) and event.question_id:
                self.mark_used(event.question_id)


def _merge_file(path: Path, merged: dict[str, dict[str, Any]]) -> None:
    try:
        source = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise QuestionBankError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise QuestionBankError(f"{path}: cannot read: {exc}") from None
    try:
        data = tomllib.loads(source)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        pos = _TOML_POS.search(message)
        where = f"{path}:{pos.group(1)}:{pos.group(2)}" if pos else str(path)
        raise QuestionBankError(f"{where}: {_TOML_POS.sub('', message)}") from None
    lines = source.splitlines()
    for key in data:
        if key != "question":
            raise QuestionBankError(f"{path}:{_key_line(lines, key, 0, len(lines))}: unknown table {key!r} "
                                    "(a bank holds [[question]] tables only)")
    tables = data.get("question", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise QuestionBankError(f"{path}: 'question' must be an array of tables ([[question]])")
    spans = _table_spans(lines)
    seen: set[str] = set()
    for i, table in enumerate(tables):
        start, end = spans[i] if i < len(spans) else (0, len(lines))

        def fail(message: str, field_name: str | None = None) -> QuestionBankError:
            line = _key_line(lines, field_name, start, end) if field_name else start + 1
            qid = table.get("id")
            who = f"question {qid!r}" if isinstance(qid, str) else f"question #{i + 1}"
            what = f"field {field_name!r}: " if field_name else ""
            return QuestionBankError(f"{path}:{line}: {who}: {what}{message}")

        for name in table:
            if name not in _FIELDS:
                raise fail(f"unknown field (known: {', '.join(_FIELDS)})", name)
        qid = table.get("id")
        if qid is None:
            raise fail("missing field 'id'")
        if not isinstance(qid, str) or not _ID.match(qid):
            raise fail("must be lowercase letters, digits, '-' or '_'", "id")
        if qid in seen:
            raise fail("the same id appears twice in this file", "id")
        seen.add(qid)
        _check_values(table, fail)
        entry = merged.get(qid)
        if entry is None:
            missing = [n for n in _REQUIRED if n not in table]
            if missing and not table.get("disabled", False):
                raise fail(f"missing field {missing[0]!r} (a new question needs {', '.join(_REQUIRED)})")
            if missing:
                continue  # disabling a question no earlier file defines: nothing to do
            merged[qid] = {"id": qid, "disabled": False}
            entry = merged[qid]
        entry.update({k: v for k, v in table.items() if k != "id"})


def _check_values(table: dict[str, Any], fail: Callable[[str, str], QuestionBankError]) -> None:
    text = table.get("text")
    if "text" in table and (not isinstance(text, str) or not text.strip()):
        raise fail("must be a non-empty string", "text")
    if isinstance(text, str):
        table["text"] = " ".join(text.split())
    kind = table.get("kind")
    if "kind" in table and (not isinstance(kind, str) or not _KIND.match(kind)):
        raise fail("must be one lowercase word such as layer, limit, evidence, scope", "kind")
    if "when" in table and table["when"] not in WHEN:
        raise fail(f"must be one of {', '.join(WHEN)}", "when")
    if "disabled" in table and not isinstance(table["disabled"], bool):
        raise fail("must be true or false", "disabled")


def _table_spans(lines: list[str]) -> list[tuple[int, int]]:
    """(first, end) line indexes of each [[question]] table, in order: for error line numbers."""
    starts = [i for i, line in enumerate(lines) if _QUESTION_HEADER.match(line)]
    spans = []
    for start in starts:
        end = next((j for j in range(start + 1, len(lines)) if _HEADER.match(lines[j])), len(lines))
        spans.append((start, end))
    return spans


def _key_line(lines: list[str], key: str, start: int, end: int) -> int:
    """1-based line where `key =` is set between start and end; the table's first line otherwise."""
    pattern = re.compile(rf"""^\s*(\[+\s*)?["']?{re.escape(key)}["']?\s*(=|\])""")
    for i in range(start, end):
        if pattern.match(lines[i]):
            return i + 1
    return start + 1


# --- triggers -------------------------------------------------------------------------------------
