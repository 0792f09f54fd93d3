"""Accepted kernels in git: one commit per accepted version on a branch of kstui's own.

Every commit is built with plumbing: the kernel's bytes become a blob, a tree is made in a temporary
index (GIT_INDEX_FILE) from the branch tip's tree with only the kernel path replaced, then
commit-tree and a compare-and-swap update-ref. The user's HEAD, index, working tree and other refs are
never read for writing: a dirty tree, staged changes or a detached HEAD stay exactly as they were.
The full EvalResult rides along as a git note under refs/notes/kstui.

The workspace is the agent's, so nothing in it may run through git: every git command kstui runs is
pinned to the repository found at start (GIT_DIR, GIT_WORK_TREE) and runs with hooks, fsmonitor,
external diff, textconv, signing, automatic gc and the system config off (`SAFE_CONFIG`). A
repository that appears later between the kernel and that repository (a nested `.git` the agent
made) is refused with one line rather than used.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import BinaryIO

import git
from gitdb.base import IStream

from harness.result import EvalResult, SchemaError
from kstui.engine.backup import backup_ref, save_unsaved
from kstui.engine.result_view import baselines, commit_subject
from kstui.engine.secrets import Scrubber

NOTES_REF = "kstui"  # git notes --ref kstui == refs/notes/kstui
FALLBACK_NAME = "kstui"
FALLBACK_EMAIL = "kstui@localhost"

T_GEOMEAN = "Kstui-Geomean"
T_SCENARIOS = "Kstui-Scenarios"
T_BASELINE = "Kstui-Baseline"
T_EVAL = "Kstui-Eval"
T_TURN = "Kstui-Turn"
T_QUESTION = "Kstui-Question"
T_QUESTION_SOURCE = "Kstui-Question-Source"
T_RESTORES = "Kstui-Restores"
T_START = "Kstui-Start"  # the kernel as the user brought it, evaluated at session start
T_SESSION = "Kstui-Session"  # the session that made the commit (resume reconciles its own commits)

# Repository-configured commands kstui never runs (each -c overrides the repository's own setting).
SAFE_CONFIG = ("core.hooksPath=/dev/null", "core.fsmonitor=false", "core.untrackedCache=false",
               "diff.external=", "core.pager=cat", "core.editor=true", "core.sshCommand=false",
               "core.attributesFile=/dev/null", "commit.gpgSign=false", "tag.gpgSign=false", "gc.auto=0",
               "maintenance.auto=false", "credential.helper=", "core.askPass=", "protocol.allow=never")
SAFE_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_ATTR_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
            "GIT_EXTERNAL_DIFF": "", "GIT_PAGER": "cat", "GIT_EDITOR": "true"}
_ZERO_SHA = "0" * 40
_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_BAD_REF_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


class HistoryError(Exception):
    """One line for the user: what went wrong with the kernel's git history."""


class BranchCheckedOut(HistoryError):
    """kstui's branch is checked out in a working tree: kstui never moves it there (the session stops)."""


@dataclass
class HistoryEntry:
    sha: str
    time: float  # committer time, seconds since the epoch
    geomean: float | None
    correct: int
    total: int
    baseline: str | None
    question: str | None
    question_source: str | None
    message: str  # the subject line
    eval_no: int | None = None
    turn: int | None = None
    restores: str | None = None  # the sha this commit restored, for a rewind
    start: bool = False  # the kernel as the user brought it (the start of the history)
    session: str | None = None  # the session that made it

    @property
    def short(self) -> str:
        return self.sha[:8]


def fold(text: str) -> str:
    """One line: a trailer value must not break the trailer block."""
    return " ".join(text.split())


def default_branch(kernel: Path) -> str:
    stem = _BAD_REF_CHARS.sub("-", kernel.stem).strip(".-") or "kernel"
    return f"kstui/{stem}"


def parse_trailers(block: str) -> dict[str, str]:
    """Parse `git log --format=%(trailers:only,unfold)` output; the last value wins for a repeated key."""
    out: dict[str, str] = {}
    for line in block.splitlines():
        key, sep, value = line.partition(":")
        if sep and key and " " not in key:
            out[key] = value.strip()
    return out


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _float_or_none(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _scenario_counts(text: str | None) -> tuple[int, int]:
    correct, _, total = (text or "").partition("/")
    return _int_or_none(correct) or 0, _int_or_none(total) or 0


class History:
    """The accepted versions of one kernel, newest first, on branch `kstui/<kernel-stem>`."""

    def __init__(self, kernel: Path, branch: str | None = None, *, create: bool = True) -> None:
        """`create`: a kernel in no repository gets one (`created_repo` says so); a reader passes False
        and gets a HistoryError instead."""
        self.kernel = Path(kernel).resolve()
        if not self.kernel.parent.is_dir():
            raise HistoryError(f"{self.kernel.parent} is not a directory")
        self.created_repo = False
        self.repo = self._open_repo(self.kernel.parent, create)
        root = Path(self.repo.working_tree_dir or self.kernel.parent).resolve()
        self.git_dir = Path(self.repo.git_dir).resolve()
        self.root = root
        self.repo.git.update_environment(GIT_DIR=str(self.git_dir), GIT_WORK_TREE=str(root), **SAFE_ENV)
        self.repo.git.set_persistent_git_options(c=list(SAFE_CONFIG))
        try:
            self.relpath = self.kernel.relative_to(root).as_posix()
        except ValueError:
            raise HistoryError(f"{self.kernel} is not inside the repository at {root}") from None
        self.branch = branch or default_branch(self.kernel)
        self.ref = f"refs/heads/{self.branch}"
        self._check_branch_name()
        self._scrub = Scrubber.from_environ()
        self.last_backup: str | None = None  # the backup the last restore made of the file it replaced
        self.session_id: str | None = None  # set by the session: a trailer on each commit it makes

    @property
    def common_dir(self) -> Path:
        """The repository's common git directory (the main one, for a linked worktree): what every
        worktree of it shares (branches, config, hooks, kstui's locks)."""
        return Path(self.repo.common_dir).resolve()

    def close(self) -> None:
        """End gitpython's helper processes (cat-file) for this repository."""
        self.repo.close()

    # --- setup -------------------------------------------------------------------------------

    def _open_repo(self, directory: Path, create: bool) -> git.Repo:
        try:
            repo = git.Repo(directory, search_parent_directories=True)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            if not create:
                raise HistoryError(f"{directory} is in no git repository: no accepted versions yet") from None
            self.created_repo = True
            return git.Repo.init(directory)
        if repo.bare:
            raise HistoryError(f"{directory} is in a bare repository; kstui needs a working tree")
        return repo

    def _check_branch_name(self) -> None:
        try:
            self.repo.git.check_ref_format("--branch", self.branch)
        except git.GitCommandError:
            raise HistoryError(f"{self.branch!r} is not a valid git branch name") from None
        self.check_not_checked_out()

    def check_not_checked_out(self) -> None:
        """Raise BranchCheckedOut when kstui's branch is checked out in any worktree of the repository:
        committing would move HEAD under the person working there."""
        if not self.repo.head.is_detached and self.repo.head.reference.path == self.ref:  # symbolic even unborn
            raise BranchCheckedOut(
                f"branch {self.branch!r} is checked out; kstui commits to a branch of its own (use --branch)")
        listing = self.repo.git.worktree("list", "--porcelain")
        path = ""
        for line in listing.splitlines():
            if line.startswith("worktree "):
                path = line[len("worktree "):]
            elif line == f"branch {self.ref}":
                raise BranchCheckedOut(
                    f"branch {self.branch!r} is checked out in {path}: kstui never moves a branch under a working "
                    f"tree; switch that worktree to another branch (or use --branch)")

    def _identity_env(self) -> dict[str, str]:
        """The user's identity when configured (config or GIT_* env), else kstui's; never an error."""
        env: dict[str, str] = {}
        for role in ("AUTHOR", "COMMITTER"):
            name = os.environ.get(f"GIT_{role}_NAME") or self._config("user.name") or FALLBACK_NAME
            email = (
                os.environ.get(f"GIT_{role}_EMAIL")
                or self._config("user.email")
                or os.environ.get("EMAIL")
                or FALLBACK_EMAIL
            )
            env[f"GIT_{role}_NAME"] = name
            env[f"GIT_{role}_EMAIL"] = email
        return env

    def _config(self, key: str) -> str | None:
        try:
            return self.repo.git.config("--get", key) or None
        except git.GitCommandError:
            return None

    # --- reading -----------------------------------------------------------------------------

    def tip(self) -> str | None:
        try:
            return self.repo.git.rev_parse("--verify", "--quiet", f"{self.ref}^{{commit}}") or None
        except git.GitCommandError:
            return None

    def entries(self) -> list[HistoryEntry]:
        """kstui's commits on the branch, newest first, stopping where the user's history begins."""
        if self.tip() is None:
            return []
        fmt = "%H%x1f%ct%x1f%s%x1f%(trailers:only,unfold)"
        proc = self.repo.git.log("-z", "--first-parent", f"--format={fmt}", self.ref, "--", as_process=True)
        out: list[HistoryEntry] = []
        try:
            for record in _split_stream(proc.proc.stdout, b"\0"):
                entry = self._entry(record.decode("utf-8", "replace"))
                if entry is None:
                    break
                out.append(entry)
        finally:
            proc.proc.stdout.close()
            proc.proc.wait()
        return out

    @staticmethod
    def _entry(record: str) -> HistoryEntry | None:
        sha, ctime, subject, trailer_block = (record.split("\x1f") + ["", "", ""])[:4]
        trailers = parse_trailers(trailer_block)
        if T_GEOMEAN not in trailers:
            return None
        correct, total = _scenario_counts(trailers.get(T_SCENARIOS))
        return HistoryEntry(
            sha=sha.strip(),
            time=float(ctime or 0),
            geomean=_float_or_none(trailers.get(T_GEOMEAN)),
            correct=correct,
            total=total,
            baseline=trailers.get(T_BASELINE),
            question=trailers.get(T_QUESTION),
            question_source=trailers.get(T_QUESTION_SOURCE),
            message=subject,
            eval_no=_int_or_none(trailers.get(T_EVAL)),
            turn=_int_or_none(trailers.get(T_TURN)),
            restores=trailers.get(T_RESTORES),
            start=T_START in trailers,
            session=trailers.get(T_SESSION),
        )

    def entry(self, sha: str) -> HistoryEntry:
        full = self._resolve(sha)
        for e in self.entries():
            if e.sha == full:
                return e
        raise HistoryError(f"{sha} is not an accepted version on {self.branch}")

    def best(self) -> HistoryEntry | None:
        """The highest geomean; on a tie the newest (a restore of the best is the best)."""
        scored = [e for e in self.entries() if e.geomean is not None]
        return max(scored, key=lambda e: e.geomean or 0.0) if scored else None

    def result_of(self, sha: str) -> EvalResult | None:
        """The EvalResult noted on a commit; None when there is no note or it is not a valid result."""
        try:
            text = self.repo.git.notes("--ref", NOTES_REF, "show", self._resolve(sha))
            return EvalResult.from_json(text)
        except (git.GitCommandError, SchemaError, HistoryError):
            return None

    def content_at(self, sha: str) -> str:
        try:
            blob = self.repo.commit(self._resolve(sha)).tree / self.relpath
        except (KeyError, ValueError):
            raise HistoryError(f"{sha} holds no {self.relpath}") from None
        return blob.data_stream.read().decode("utf-8", "surrogateescape")

    def diff(self, sha: str, against: str | None = None) -> str:
        """The kernel's diff from `against` (default: the commit's parent, or nothing) to `sha`."""
        new = self._resolve(sha)
        if against is not None:
            old = self._resolve(against)
        else:
            parents = self.repo.commit(new).parents
            old = parents[0].hexsha if parents else _EMPTY_TREE
        return self.repo.git.diff(
            "--no-ext-diff", "--no-color", "--no-textconv", old, new, "--", self.relpath, strip_newline_in_stdout=False
        )

    def _resolve(self, rev: str) -> str:
        try:
            return self.repo.git.rev_parse("--verify", "--quiet", f"{rev}^{{commit}}")
        except git.GitCommandError:
            raise HistoryError(f"{rev} is not a commit in {self.repo.working_tree_dir}") from None

    # --- writing -----------------------------------------------------------------------------

    def commit_accepted(
        self,
        content: str,
        result: EvalResult,
        *,
        previous: float | None,
        turn: int,
        question: str | None,
        question_source: str | None,
        eval_no: int,
    ) -> HistoryEntry:
        """Commit an accepted version of the kernel with its trailers and the result as a note; the entry
        as written."""
        question = fold(self._scrub.text(question)) if question else None
        source = fold(question_source) if question and question_source else None
        subject = commit_subject(self.kernel.stem, self._passing(result), previous, result.correct_count,
                                 len(result.scenarios))
        return self._commit_version(content, result, subject, eval_no=eval_no, turn=turn,
                                    extra=[(T_QUESTION, question), (T_QUESTION_SOURCE, source)])

    def commit_start(self, content: str, result: EvalResult, *, eval_no: int) -> HistoryEntry:
        """Commit the kernel as the user brought it, evaluated at session start: the start of the history,
        which every later version must beat."""
        geomean = self._passing(result)
        subject = (f"{self.kernel.stem}: start, {geomean:.2f}x geomean ({result.correct_count}/"
                   f"{len(result.scenarios)} correct), the kernel as brought")
        return self._commit_version(content, result, subject, eval_no=eval_no, turn=None, extra=[(T_START, "yes")])

    @staticmethod
    def _passing(result: EvalResult) -> float:
        if not result.passed or result.geomean_speedup is None:
            raise HistoryError("only a passing result with a geomean is committed")
        return result.geomean_speedup

    def _commit_version(self, content: str, result: EvalResult, subject: str, *, eval_no: int, turn: int | None,
                        extra: list[tuple[str, str | None]]) -> HistoryEntry:
        total = len(result.scenarios)
        trailers = [
            (T_GEOMEAN, f"{result.geomean_speedup:.6g}"),
            (T_SCENARIOS, f"{result.correct_count}/{total}"),
            (T_BASELINE, baselines(result)),
            (T_EVAL, str(eval_no)),
            (T_TURN, str(turn) if turn is not None else None),
            *extra,
            (T_SESSION, self.session_id),
        ]
        sha = self._commit(content, subject, trailers, self._note_of(result))
        # The entry as written: exactly what entries() will read back for this commit.
        return self._entry("\x1f".join([sha, str(self.repo.commit(sha).committed_date), subject,
                                         "".join(f"{k}: {v}\n" for k, v in trailers if v)]))  # type: ignore[return-value]

    def restore(self, sha: str, *, turn: int | None = None) -> str:
        """Write an accepted version back into the kernel file and record it as a NEW commit."""
        entry = self.entry(sha)
        content = self.content_at(entry.sha)
        geomean = f"{entry.geomean:.2f}x" if entry.geomean is not None else "?"
        subject = f"{self.kernel.stem}: restore {entry.short} ({geomean} geomean, {entry.correct}/{entry.total} correct)"
        trailers = [
            (T_GEOMEAN, f"{entry.geomean:.6g}" if entry.geomean is not None else None),
            (T_SCENARIOS, f"{entry.correct}/{entry.total}"),
            (T_BASELINE, entry.baseline),
            (T_EVAL, str(entry.eval_no) if entry.eval_no is not None else None),
            (T_TURN, str(turn) if turn is not None else None),
            (T_RESTORES, entry.sha),
            (T_SESSION, self.session_id),
        ]
        result = self.result_of(entry.sha)
        self.last_backup = save_unsaved(self)  # what the file holds now, if no commit does
        new = self._commit(content, subject, trailers, self._note_of(result) if result else None)
        _write_atomically(self.kernel, content)
        return new

    def backup_said(self) -> str | None:
        """One line about the last restore's backup, if it made one."""
        if self.last_backup is None:
            return None
        return (f"the kernel file held changes in no commit: saved as {self.last_backup[:8]} on "
                f"{backup_ref(self.branch)} before the restore (git show {self.last_backup[:8]}:{self.relpath})")

    def rev(self, ref: str) -> str | None:
        """The commit a ref points at, or None."""
        try:
            return self.repo.git.rev_parse("--verify", "--quiet", f"{ref}^{{commit}}") or None
        except git.GitCommandError:
            return None

    def commit_backup(self, data: bytes) -> str:
        """The kernel's bytes as a commit on kstui's backup ref (never a branch): the sha."""
        ref = backup_ref(self.branch)
        last = self.rev(ref)
        base = last or self.tip() or (self.repo.head.commit.hexsha if self.repo.head.is_valid() else None)
        tree = self._tree_with_kernel(base, self._store("blob", data))
        message = f"{self.kernel.stem}: backup of the kernel file before kstui wrote over it"
        args = [tree, "--no-gpg-sign", "-m", message, *(["-p", last] if last else [])]
        sha = self.repo.git.commit_tree(*args, env=self._identity_env())
        self.repo.git.update_ref("-m", "kstui: backup", ref, sha, last or _ZERO_SHA)
        return sha

    def _note_of(self, result: EvalResult) -> str:
        return self._scrub.dumps(result.to_dict())  # structural scrub: the note stays valid JSON

    def check_repository(self) -> None:
        """HistoryError (one line) when a repository now stands between the kernel and the one found at
        start: git run there would find it first, and whatever made it chose its config and hooks."""
        folder = self.kernel.parent
        while folder != self.root and self.root in folder.parents:
            if os.path.lexists(folder / ".git"):
                raise HistoryError(f"a git repository appeared at {folder / '.git'} during the session; kstui "
                                   f"commits only to the repository it started with ({self.git_dir}): refused")
            folder = folder.parent

    def _commit(self, content: str, subject: str, trailers: list[tuple[str, str | None]], note: str | None) -> str:
        self.check_repository()
        self.check_not_checked_out()
        env = self._identity_env()
        blob = self._store("blob", content.encode("utf-8", "surrogateescape"))
        tip = self.tip()
        parent = tip
        if parent is None and self.repo.head.is_valid():
            parent = self.repo.head.commit.hexsha  # fork from the user's HEAD (detached or not)
        tree = self._tree_with_kernel(parent, blob)
        message = subject + "\n\n" + "".join(f"{k}: {v}\n" for k, v in trailers if v)
        args = [tree, "--no-gpg-sign", "-m", message]
        if parent:
            args[1:1] = ["-p", parent]
        sha = self.repo.git.commit_tree(*args, env=env)
        _step("committed")
        # The note before the branch moves: a kill between the two leaves an unreachable commit with a
        # note, never a version on the branch without its result.
        if note is not None:
            note_blob = self._store("blob", note.encode("utf-8"))
            self.repo.git.notes("--ref", NOTES_REF, "add", "-f", "-C", note_blob, sha, env=env)
            _step("noted")
        try:
            # compare-and-swap: fails, rather than losing a commit, if the branch moved meanwhile
            self.repo.git.update_ref("-m", f"kstui: {subject}", self.ref, sha, tip or _ZERO_SHA)
        except git.GitCommandError:
            raise HistoryError(f"{self.branch} moved while kstui was committing; nothing was changed") from None
        _step("advanced")
        return sha

    def add_note(self, sha: str, result: EvalResult) -> None:
        """Attach a result to a commit that lacks one (a commit made by a kstui killed before its note)."""
        note_blob = self._store("blob", self._note_of(result).encode("utf-8"))
        self.repo.git.notes("--ref", NOTES_REF, "add", "-f", "-C", note_blob, sha, env=self._identity_env())

    def has_note(self, sha: str) -> bool:
        try:
            self.repo.git.notes("--ref", NOTES_REF, "list", sha)
            return True
        except git.GitCommandError:
            return False

    def _tree_with_kernel(self, parent: str | None, blob: str) -> str:
        mode = "100644"
        if parent:
            listing = self.repo.git.ls_tree(parent, "--", self.relpath)
            if listing.startswith("100755"):
                mode = "100755"
        with tempfile.TemporaryDirectory(prefix="kstui-index-") as tmp:
            env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
            if parent:
                self.repo.git.read_tree(parent, env=env)
            else:
                self.repo.git.read_tree("--empty", env=env)
            self.repo.git.update_index("--add", "--cacheinfo", f"{mode},{blob},{self.relpath}", env=env)
            return self.repo.git.write_tree(env=env)

    def _store(self, kind: str, data: bytes) -> str:
        stream = self.repo.odb.store(IStream(kind, len(data), BytesIO(data)))
        return stream.hexsha.decode() if isinstance(stream.hexsha, bytes) else stream.hexsha


# Called between the steps of a commit ("committed", "noted", "advanced"): tests kill the process there.
STEP_HOOK: Callable[[str], None] | None = None


def _step(name: str) -> None:
    if STEP_HOOK is not None:
        STEP_HOOK(name)


def _split_stream(stream: BinaryIO, sep: bytes, chunk: int = 1 << 16) -> Iterator[bytes]:
    """Yield sep-terminated records from a byte stream as they arrive (so a caller may stop early)."""
    pending = b""
    while True:
        data = stream.read1(chunk)  # type: ignore[attr-defined]  # whatever has arrived, up to chunk
        if not data:
            break
        pending += data
        *records, pending = pending.split(sep)
        yield from records
    if pending.strip():
        yield pending


def _write_atomically(path: Path, content: str) -> None:
    """Replace the file in one step, keeping its mode: an editor watching it never sees half a file."""
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".kstui")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
            f.write(content)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
