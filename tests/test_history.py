"""History in real temporary git repositories: the user's state survives, trailers and notes read back."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.result import BuildReport, EvalResult, ScenarioResult
from kstui.engine.history import FALLBACK_EMAIL, FALLBACK_NAME, History, HistoryError, fold

KERNEL_V0 = "__global__ void k() {}\n"


def git(cwd: Path, *args: str, input: str | None = None) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, input=input
    ).stdout


@pytest.fixture(autouse=True)
def isolated_git(tmp_path_factory, monkeypatch):
    """No global or system git config: identity comes only from what a test sets."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(name, raising=False)


def make_result(speedups: list[float], baseline: str = "fa3", correct: bool = True) -> EvalResult:
    scenarios = [
        ScenarioResult(
            id=f"s{i}", timed=True, correct=correct, verdict="ok" if correct else "wrong",
            time_us=10.0 / x, baseline=baseline, baseline_us=10.0, speedup=x, spread_pct=0.5,
        )
        for i, x in enumerate(speedups)
    ]
    r = EvalResult(task="attention", kernel="flash_fwd.cu", kernel_sha256="0" * 64, scenario_set="full",
                   build=BuildReport(ok=True), scenarios=scenarios)
    r.finalize()
    return r


def user_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "proj"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Ada User")
    git(repo, "config", "user.email", "ada@example.com")
    (repo / "src").mkdir()
    (repo / "src" / "flash_fwd.cu").write_text(KERNEL_V0)
    (repo / "README").write_text("readme\n")
    (repo / "other.txt").write_text("other\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "initial")
    return repo


def snapshot(repo: Path, ours: str = "refs/heads/kstui/") -> dict[str, str]:
    """Everything of the user's that kstui must not touch."""
    return {
        "status": git(repo, "status", "--porcelain=v2", "--branch", "--untracked-files=all"),
        "index": git(repo, "ls-files", "--stage"),
        "staged": git(repo, "diff", "--cached"),
        "head": git(repo, "rev-parse", "HEAD"),
        "symbolic": subprocess.run(["git", "symbolic-ref", "-q", "HEAD"], cwd=repo, capture_output=True,
                                   text=True).stdout,
        "refs": "\n".join(line for line in git(repo, "for-each-ref").splitlines()
                          if ours not in line and "refs/notes/kstui" not in line),
        "other.txt": (repo / "other.txt").read_text(),
        "README": (repo / "README").read_text(),
    }


def test_dirty_tree_and_staged_changes_survive(tmp_path):
    repo = user_repo(tmp_path)
    kernel = repo / "src" / "flash_fwd.cu"
    (repo / "other.txt").write_text("other, edited and not staged\n")
    (repo / "README").write_text("readme, staged\n")
    git(repo, "add", "README")
    (repo / "untracked.txt").write_text("new\n")
    kernel.write_text(KERNEL_V0 + "// user's own unsaved idea\n")
    before = snapshot(repo)
    kernel_before = kernel.read_text()

    h = History(kernel)
    sha1 = h.commit_accepted("v1\n", make_result([0.41, 0.41]), previous=None, turn=1, question=None,
                             question_source=None, eval_no=1).sha
    written = h.commit_accepted("v2\n", make_result([0.57, 0.57]), previous=0.41, turn=4,
                                question="What does the SASS say?", question_source="bank", eval_no=3)
    sha2 = written.sha
    assert written == h.entry(sha2)  # what it returns is what the branch log holds

    assert snapshot(repo) == before
    assert kernel.read_text() == kernel_before  # commit_accepted never writes the workspace
    assert git(repo, "rev-parse", "kstui/flash_fwd").strip() == sha2
    assert git(repo, "rev-parse", f"{sha2}^").strip() == sha1
    assert git(repo, "rev-parse", f"{sha1}^").strip() == before["head"].strip()  # forks from HEAD
    # only the kernel differs from the user's HEAD tree
    changed = git(repo, "diff", "--name-only", before["head"].strip(), sha2).split()
    assert changed == ["src/flash_fwd.cu"]
    assert git(repo, "show", f"{sha2}:src/flash_fwd.cu") == "v2\n"
    assert git(repo, "show", f"{sha2}:other.txt") == "other\n"  # the committed version, not the dirty one


def test_message_trailers_and_note_read_back(tmp_path):
    repo = user_repo(tmp_path)
    h = History(repo / "src" / "flash_fwd.cu")
    r1 = make_result([0.4, 0.42])
    r2 = make_result([0.5, 0.65], baseline="cudnn")
    h.commit_accepted("v1\n", r1, previous=None, turn=1, question=None, question_source=None, eval_no=1)
    question = "Which number tells you\nthat is the limit?\n\nSigned-off-by: nobody"
    sha = h.commit_accepted("v2\n", r2, previous=r1.geomean_speedup, turn=7, question=question,
                            question_source="human", eval_no=5).sha

    subject = git(repo, "log", "-1", "--format=%s", sha).strip()
    g1, g2 = r1.geomean_speedup, r2.geomean_speedup
    assert subject == f"flash_fwd: {g1:.2f}x -> {g2:.2f}x geomean (2/2 correct)"
    first = git(repo, "log", "-1", "--format=%s", f"{sha}^").strip()
    assert first == f"flash_fwd: {g1:.2f}x geomean (2/2 correct)"

    # git's own trailer parser agrees with what we wrote
    message = git(repo, "log", "-1", "--format=%B", sha)
    parsed = git(repo, "interpret-trailers", "--parse", input=message)
    assert f"Kstui-Question: {fold(question)}" in parsed.splitlines()
    assert "Kstui-Question-Source: human" in parsed.splitlines()
    assert "Kstui-Scenarios: 2/2" in parsed.splitlines()
    assert "Kstui-Baseline: cudnn" in parsed.splitlines()
    assert "Kstui-Eval: 5" in parsed.splitlines()
    assert "Kstui-Turn: 7" in parsed.splitlines()
    assert "Signed-off-by: nobody" not in parsed.splitlines()  # folded into the question, not a trailer

    e = h.entries()
    assert [x.sha for x in e] == [sha, git(repo, "rev-parse", f"{sha}^").strip()]
    assert e[0].geomean == pytest.approx(g2, rel=1e-5)
    assert (e[0].correct, e[0].total, e[0].turn, e[0].eval_no) == (2, 2, 7, 5)
    assert e[0].question == fold(question) and e[0].question_source == "human"
    assert e[1].question is None and e[1].baseline == "fa3"
    assert h.best().sha == sha

    back = h.result_of(sha)
    assert back is not None and back.to_dict() == r2.to_dict()
    assert h.result_of(e[1].sha).to_dict() == r1.to_dict()
    assert "refs/notes/kstui" in git(repo, "for-each-ref", "--format=%(refname)")
    assert h.content_at(sha) == "v2\n"
    d = h.diff(sha)
    assert "-v1" in d and "+v2" in d
    d0 = h.diff(sha, against=f"{sha}^^")  # the user's HEAD version
    assert "-__global__ void k() {}" in d0 and "+v2" in d0


def test_identity_user_config_then_fallback(tmp_path):
    repo = user_repo(tmp_path)
    h = History(repo / "src" / "flash_fwd.cu")
    sha = h.commit_accepted("v1\n", make_result([1.0]), previous=None, turn=1, question=None,
                            question_source=None, eval_no=1).sha
    assert git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", sha).strip() == \
        "Ada User <ada@example.com>|Ada User <ada@example.com>"

    bare = tmp_path / "noident"
    bare.mkdir()
    (bare / "rms.cu").write_text("x\n")
    h2 = History(bare / "rms.cu")  # no repo: initialised; no identity anywhere
    sha2 = h2.commit_accepted("y\n", make_result([1.2]), previous=None, turn=1, question=None,
                              question_source=None, eval_no=1).sha
    assert git(bare, "log", "-1", "--format=%an <%ae>", sha2).strip() == f"{FALLBACK_NAME} <{FALLBACK_EMAIL}>"
    assert h2.result_of(sha2) is not None  # the note, too, is written without an identity


def test_no_repo_is_initialised_and_left_untouched(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    kernel = ws / "rmsnorm.cu"
    kernel.write_text("orig\n")
    h = History(kernel)
    assert (ws / ".git").is_dir()
    assert h.branch == "kstui/rmsnorm"
    sha = h.commit_accepted("new\n", make_result([1.5]), previous=None, turn=2, question=None,
                            question_source=None, eval_no=1).sha
    assert git(ws, "rev-list", "--count", "kstui/rmsnorm").strip() == "1"  # a root commit
    assert git(ws, "ls-tree", "-r", "--name-only", sha).split() == ["rmsnorm.cu"]
    assert kernel.read_text() == "orig\n"
    # HEAD is still unborn and the index empty: the user's next `git commit` starts from scratch
    assert subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=ws).returncode != 0
    assert git(ws, "ls-files", "--stage") == ""
    assert h.diff(sha).count("+new") == 1


def test_kernel_in_a_missing_directory_is_an_error_not_a_new_repo(tmp_path):
    with pytest.raises(HistoryError, match="not a directory"):
        History(tmp_path / "nowhere" / "k.cu")
    assert not (tmp_path / "nowhere").exists()


def test_existing_repo_without_commits(tmp_path):
    repo = tmp_path / "empty"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    kernel = repo / "k.cu"
    kernel.write_text("a\n")
    git(repo, "add", "k.cu")  # staged, never committed
    staged = git(repo, "ls-files", "--stage")
    h = History(kernel)
    h.commit_accepted("b\n", make_result([1.1]), previous=None, turn=1, question=None,
                      question_source=None, eval_no=1)
    assert git(repo, "ls-files", "--stage") == staged
    assert git(repo, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    assert len(h.entries()) == 1


def test_detached_head(tmp_path):
    repo = user_repo(tmp_path)
    (repo / "other.txt").write_text("second\n")
    git(repo, "commit", "-q", "-am", "second")
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    before = snapshot(repo, ours="refs/heads/perf/attempt-1")
    h = History(repo / "src" / "flash_fwd.cu", branch="perf/attempt-1")
    sha = h.commit_accepted("d\n", make_result([2.0]), previous=None, turn=1, question=None,
                            question_source=None, eval_no=1).sha
    assert snapshot(repo, ours="refs/heads/perf/attempt-1") == before
    assert git(repo, "rev-parse", "perf/attempt-1").strip() == sha
    assert git(repo, "rev-parse", f"{sha}^").strip() == before["head"].strip()


def test_restore_makes_a_new_commit_and_writes_the_file(tmp_path):
    repo = user_repo(tmp_path)
    kernel = repo / "src" / "flash_fwd.cu"
    h = History(kernel)
    r1, r2 = make_result([0.5]), make_result([0.8])
    s1 = h.commit_accepted("one\n", r1, previous=None, turn=1, question=None, question_source=None, eval_no=1).sha
    s2 = h.commit_accepted("two\n", r2, previous=0.5, turn=2, question=None, question_source=None, eval_no=2).sha
    status_before = git(repo, "status", "--porcelain")
    s3 = h.restore(s1[:10], turn=9)
    assert s3 not in (s1, s2)
    assert git(repo, "rev-parse", f"{s3}^").strip() == s2  # appended, never rewritten
    assert git(repo, "rev-list", "--count", f"{s1}..kstui/flash_fwd").strip() == "2"
    assert kernel.read_text() == "one\n"
    assert h.content_at(s3) == "one\n"
    assert s1[:8] in git(repo, "log", "-1", "--format=%s", s3)
    newest = h.entries()[0]
    assert newest.sha == s3 and newest.restores == s1 and newest.turn == 9
    assert newest.geomean == pytest.approx(0.5) and newest.eval_no == 1
    assert h.result_of(s3).to_dict() == r1.to_dict()
    assert h.best().sha == s2
    # the workspace file changed (that is the point); nothing else did
    after = git(repo, "status", "--porcelain")
    assert [line for line in after.splitlines() if "flash_fwd.cu" not in line] == \
        [line for line in status_before.splitlines() if "flash_fwd.cu" not in line]


def test_restore_refuses_foreign_commit(tmp_path):
    repo = user_repo(tmp_path)
    h = History(repo / "src" / "flash_fwd.cu")
    h.commit_accepted("one\n", make_result([0.5]), previous=None, turn=1, question=None,
                      question_source=None, eval_no=1)
    with pytest.raises(HistoryError):
        h.restore("main")  # the user's commit, not an accepted version
    with pytest.raises(HistoryError):
        h.restore("deadbeef")


def test_branch_names(tmp_path):
    repo = user_repo(tmp_path)
    weird = repo / "my kernel~v2.cu"
    weird.write_text("x\n")
    h = History(weird)
    assert h.branch == "kstui/my-kernel-v2"
    git(repo, "check-ref-format", "--branch", h.branch)
    with pytest.raises(HistoryError):
        History(repo / "src" / "flash_fwd.cu", branch="bad..name")
    with pytest.raises(HistoryError, match="checked out"):
        History(repo / "src" / "flash_fwd.cu", branch="main")


def test_kernel_mode_kept_and_entries_stop_at_user_history(tmp_path):
    repo = user_repo(tmp_path)
    kernel = repo / "src" / "flash_fwd.cu"
    kernel.chmod(0o755)
    git(repo, "commit", "-q", "-am", "exec bit")
    h = History(kernel)
    sha = h.commit_accepted("x\n", make_result([1.3]), previous=None, turn=1, question=None,
                            question_source=None, eval_no=1).sha
    assert git(repo, "ls-tree", sha, "src/flash_fwd.cu").startswith("100755")
    assert [e.sha for e in h.entries()] == [sha]  # the user's two commits are not entries
    assert History(kernel).best().sha == sha  # a fresh History reads the same branch


def test_secrets_never_committed(tmp_path, monkeypatch):
    key = "sk-ant-api03-" + "Q" * 40
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    repo = user_repo(tmp_path)
    h = History(repo / "src" / "flash_fwd.cu")
    result = make_result([1.3])
    result.build.log = f'nvcc -DKEY="{key}" ok'  # a key that leaked into a build log
    sha = h.commit_accepted("x\n", result, previous=None, turn=1,
                            question=f"why does {key} appear?", question_source="human", eval_no=1).sha
    assert key not in git(repo, "log", "-1", "--format=%B", sha)
    assert key not in git(repo, "notes", "--ref", "kstui", "show", sha)
    back = h.result_of(sha)
    assert back is not None and back.geomean_speedup == result.geomean_speedup and key not in back.build.log


def test_branch_moved_underneath_is_an_error_not_a_loss(tmp_path, monkeypatch):
    repo = user_repo(tmp_path)
    h = History(repo / "src" / "flash_fwd.cu")
    s1 = h.commit_accepted("one\n", make_result([0.5]), previous=None, turn=1, question=None,
                           question_source=None, eval_no=1).sha
    monkeypatch.setattr(h, "tip", lambda: None)  # a stale view of the branch, as a racing writer has
    with pytest.raises(HistoryError, match="moved"):
        h.commit_accepted("two\n", make_result([0.6]), previous=0.5, turn=2, question=None,
                          question_source=None, eval_no=2)
    assert git(repo, "rev-parse", "kstui/flash_fwd").strip() == s1  # the accepted commit is not lost


def test_failing_result_is_never_committed(tmp_path):
    repo = user_repo(tmp_path)
    h = History(repo / "src" / "flash_fwd.cu")
    with pytest.raises(HistoryError, match="passing"):
        h.commit_accepted("bad\n", make_result([2.0, 2.0], correct=False), previous=None, turn=1,
                          question=None, question_source=None, eval_no=1)
    assert h.entries() == [] and h.tip() is None


def test_repository_configured_commands_never_run(tmp_path: Path) -> None:
    repo = user_repo(tmp_path)
    markers = tmp_path / "markers"
    markers.mkdir()
    hooks = repo / ".git" / "hooks"
    for name in ("reference-transaction", "pre-commit", "post-commit", "post-rewrite", "pre-auto-gc"):
        (hooks / name).write_text(f"#!/bin/sh\ntouch {markers}/{name}\n")
        (hooks / name).chmod(0o755)
    monitor = tmp_path / "fsmonitor.sh"
    monitor.write_text(f"#!/bin/sh\ntouch {markers}/fsmonitor\n")
    monitor.chmod(0o755)
    git(repo, "config", "core.fsmonitor", str(monitor))
    git(repo, "config", "diff.external", str(monitor))
    git(repo, "config", "gc.auto", "1")
    git(repo, "update-ref", "refs/heads/probe", "HEAD")  # the planted hook works for git itself
    assert (markers / "reference-transaction").exists()
    (markers / "reference-transaction").unlink()

    h = History(repo / "src" / "flash_fwd.cu")
    first = h.commit_accepted(
        KERNEL_V0 + "// v1\n", make_result([1.2]), previous=None, turn=1, question=None, question_source=None, eval_no=1
    ).sha
    h.commit_accepted(
        KERNEL_V0 + "// v2\n", make_result([1.5]), previous=1.2, turn=2, question=None, question_source=None, eval_no=2
    )
    h.diff(first)
    h.restore(first)
    assert sorted(p.name for p in markers.iterdir()) == []


def test_a_repository_planted_inside_the_workspace_is_refused(tmp_path: Path) -> None:
    repo = user_repo(tmp_path)
    h = History(repo / "src" / "flash_fwd.cu")
    git(repo / "src", "init", "-q")  # what an agent's bash could do in a subfolder workspace
    with pytest.raises(HistoryError, match=r"a git repository appeared at .*src/\.git during the session"):
        h.commit_accepted(
            KERNEL_V0 + "// v1\n",
            make_result([1.2]),
            previous=None,
            turn=1,
            question=None,
            question_source=None,
            eval_no=1,
        )
    assert git(repo / "src", "for-each-ref") == "" and h.tip() is None
