"""`kstui`: the console script.

    kstui FILE [options]            the TUI on a kernel (--headless: the line printer instead)
    kstui run FILE [options]        the same
    kstui eval …                    the harness CLI, argv passed through unchanged
    kstui log FILE [--print]        the accepted versions of a kernel
    kstui replay TRACE [--analysis] [--print]
    kstui new NAME                  a starting kernel, its task spec and its PyTorch reference

Everything heavy (torch, Textual, the anthropic SDK, git) is imported only once it is needed, so
`kstui --help` and bad-input errors are instant. Bad input is one line on stderr and exit code 2,
checked before anything starts.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn


class BadInput(Exception):
    """One line for stderr; exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BadInput(message)  # one line (argparse's own error prints the usage too)


def _run_parser(prog: str) -> _Parser:
    p = _Parser(
        prog=prog,
        description="Make a CUDA kernel faster with a coding agent, judged by the harness.",
        epilog="other commands: kstui eval FILE … (the harness), kstui log FILE, kstui replay TRACE",
    )
    p.add_argument("file", metavar="FILE", help="the kernel (.cu) to optimise; its task file (same name, .toml) sits beside it")
    p.add_argument("--headless", action="store_true", help="print events line by line instead of the TUI")
    p.add_argument("--max-evals", type=_nonneg_int, metavar="N",
                   help="stop after N evaluations (the start's and re-checks included: a borderline version "
                        "that cannot be re-checked within N is rejected)")
    p.add_argument("--max-cost", type=_nonneg_float, metavar="USD", help="stop once the model cost reaches USD")
    p.add_argument("--self-ask", action="store_true", default=None,
                   help="on a stall or a claimed limit, put a bank question to the agent")
    p.add_argument("--no-agent", action="store_true", default=None,
                   help="manual mode: no agent; every save of the kernel is evaluated")
    p.add_argument("--resume", action="store_true", default=None, help="continue the last session of FILE")
    p.add_argument("--model", metavar="M", help="Claude model (default: KSTUI_MODEL, kstui.toml, the newest)")
    p.add_argument("--max-tokens", type=_nonneg_int, metavar="N", help="max output tokens per model call")
    p.add_argument("--thinking", type=_nonneg_int, metavar="N", help="extended thinking budget in tokens (0 = off)")
    p.add_argument("--branch", metavar="NAME", help="git branch for accepted versions (default kstui/<stem>)")
    p.add_argument("--questions", metavar="PATH", help="a questions.toml overriding the bank")
    p.add_argument("--eval-cmd", metavar="TEMPLATE", help="evaluate through a command, e.g. 'ssh gpu1 kstui eval {file} --json -'")
    p.add_argument("--gpu", metavar="URL", help="where to evaluate: local, ssh://host, ray[://addr]")
    p.add_argument("--devices", metavar="LIST", help="GPU indices to use, e.g. 0,1")
    p.add_argument("--shards", type=_nonneg_int, metavar="N", help="with --gpu ray: split each evaluation across N GPUs")
    p.add_argument("--cold-workers", action="store_true", default=None,
                   help="local GPUs: start each evaluation's worker when it is asked for, not beforehand")
    p.add_argument("--scenarios", metavar="SET", help="scenario set for evaluations: full, quick or IDs")
    p.add_argument("--confirm-shell", action="store_true", default=None, help="ask before each bash command")
    p.add_argument("--unconfined-shell", action="store_true", default=None,
                   help="where bubblewrap cannot run, give the agent bash anyway, unconfined, as you")
    p.add_argument("--accept-changes", action="store_true",
                   help="obey kstui.toml, the task file and the question bank as changed since the last session")
    return p


def _nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {text!r}")
    return value


def _nonneg_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {text!r}")
    return value


def check_kernel(path_text: str) -> Path:
    """The kernel path, or BadInput saying what is wrong with it."""
    path = Path(path_text).expanduser()
    if not path.exists():
        raise BadInput(f"{path}: no such file")
    if path.is_dir():
        raise BadInput(f"{path}: is a folder; give the kernel's .cu file")
    if path.suffix != ".cu":
        raise BadInput(f"{path}: not a CUDA source (.cu) file")
    try:
        path.read_bytes()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read: {exc.strerror}") from None
    task = path.with_suffix(".toml")
    if not task.is_file():
        raise BadInput(f"{path}: no task file {task.name} beside it (it names the task, e.g. task = \"attention\")")
    return path.resolve()


def _check_workspace(workspace: Path) -> None:
    state = workspace / ".kstui"
    if state.is_symlink():  # kstui would write its sessions wherever the link points
        raise BadInput(f"{state} is a symbolic link; kstui keeps its sessions only in a real folder there")
    try:
        state.mkdir(exist_ok=True)
        probe = state / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise BadInput(f"{workspace}: workspace is not writable ({exc.strerror}); kstui keeps its sessions there") from None


def _check_scenarios(kernel: Path, selection: str) -> None:
    """An unknown scenario set is bad input now, not at the first evaluation (the task file read here,
    where the harness would read it)."""
    from harness.taskfile import TaskFileError, load_task_file
    from harness.tasks import get_task
    from harness.tasks.base import ScenarioError

    try:
        task_file = load_task_file(kernel)
        task = get_task(task_file.task, task_file.options)
    except (TaskFileError, KeyError):
        return  # the task file's own error is the harness's to report, in the evaluation
    try:
        task.scenarios(selection, ())
    except ScenarioError as exc:
        raise BadInput(f"--scenarios {selection}: {exc}") from None


def prepare_session(args: argparse.Namespace, *, headless: bool) -> Any:
    """Validate everything and build the Session (raises BadInput); nothing has started yet."""
    from kstui.engine.config import ConfigError, build_config

    kernel = check_kernel(args.file)
    flags = {
        "model": args.model, "max_tokens": args.max_tokens, "thinking": args.thinking,
        "max_evals": args.max_evals, "max_cost": args.max_cost, "self_ask": args.self_ask,
        "no_agent": args.no_agent, "resume": args.resume, "branch": args.branch,
        "questions": str(Path(args.questions).expanduser().resolve()) if args.questions else None,
        "eval_cmd": args.eval_cmd, "gpu": args.gpu, "devices": args.devices, "shards": args.shards,
        "warm_workers": False if args.cold_workers else None,
        "scenarios": args.scenarios,
        "confirm_shell": args.confirm_shell, "wait_for_human": not headless,
        "unconfined_shell": args.unconfined_shell,
    }
    try:
        config = build_config(kernel, flags)
    except ConfigError as exc:
        raise BadInput(str(exc)) from None
    if config.questions is not None and not config.questions.is_file():
        raise BadInput(f"{config.questions}: no such questions file")
    _check_scenarios(kernel, config.scenarios)
    _check_workspace(config.workspace)

    from kstui.engine.bank import QuestionBank, QuestionBankError, bank_paths
    from kstui.engine.history import History, HistoryError
    from kstui.engine.session import Session
    from kstui.engine.trace import latest_session
    from kstui.executors.factory import make_executor
    from kstui.executors.protocol import ExecutorError

    try:
        bank = QuestionBank.load(*bank_paths(config.workspace, config.questions))
    except QuestionBankError as exc:
        raise BadInput(str(exc)) from None
    if config.resume and latest_session(config.workspace, config.kernel) is None:
        raise BadInput(f"{kernel}: no earlier session of this kernel to resume")
    try:
        history = History(config.kernel, config.branch)
    except HistoryError as exc:
        raise BadInput(str(exc)) from None
    from kstui.engine.lock import KernelBusy, KernelLock

    try:
        lock = KernelLock(history.common_dir / "kstui-locks", config.kernel).acquire()
    except KernelBusy as exc:
        history.close()
        raise BadInput(str(exc)) from None
    _check_guarded(config, history.git_dir, ask=None if headless or not sys.stdin.isatty() else input,
                   accept=args.accept_changes)
    try:
        executor = make_executor(config.gpu, config.eval_cmd, config.devices, shards=config.shards,
                                 warm=config.warm_workers, workspace=config.workspace)
    except ExecutorError as exc:
        raise BadInput(str(exc)) from None
    session = Session.build(config, executor, history=history, bank=bank)
    session.kernel_lock = lock
    return session


def _check_guarded(config: Any, git_dir: Path, *, ask: Callable[[str], str] | None, accept: bool) -> None:
    """What the agent could have changed since the last session started (kstui.engine.guarded) is obeyed
    only when the human says so: asked (`ask`: on the TUI's terminal), else refused (BadInput) unless
    accepted with --accept-changes."""
    from kstui.engine.guarded import REPOSITORY, capture, changes, recorded

    before = recorded(config.workspace, config.kernel)
    lines = changes(before, capture(config, git_dir)) if before else []
    if not lines:
        return
    if before.get(REPOSITORY) not in (None, str(git_dir)):
        raise BadInput(f"the git repository for {config.kernel.name} is now {git_dir}, not {before[REPOSITORY]} "
                       "as when the last session started (one made in the workspace?): refused")
    if accept:
        return
    if ask is None:
        raise BadInput(f"changed since the last session started: {'; '.join(lines)}: check them, then run again "
                       "with --accept-changes")
    sys.stderr.write("Changed since the last session of this kernel started (the agent could have done it):\n")
    sys.stderr.write("".join(f"  {line}\n" for line in lines))
    if ask("Obey these changes? [y/N] ").strip().lower() not in ("y", "yes"):
        raise BadInput("not started: the changes were not accepted")


def _cmd_run(argv: Sequence[str], prog: str) -> int:
    args = _run_parser(prog).parse_args(argv)
    if args.headless:
        from kstui.views.headless import run_headless

        session = prepare_session(args, headless=True)
        try:
            return asyncio.run(run_headless(session))
        finally:
            session.kernel_lock.release()
    # What start-up makes (modules, the session, the panes) lives as long as the app, so collecting
    # before the first frame only walks it (two or three full collections, 0.1-0.15 s on a 2-core
    # machine): the app turns collection back on once that frame is out.
    collecting = gc.isenabled()
    gc.disable()
    try:
        session = prepare_session(args, headless=False)
        from kstui.app import run_session_app

        try:
            return run_session_app(session, gc_held=collecting)
        finally:
            session.kernel_lock.release()
    finally:
        if collecting:  # bad input, or an app that ended before its first frame
            gc.enable()


def _cmd_log(argv: Sequence[str]) -> int:
    p = _Parser(prog="kstui log", description="The accepted versions of a kernel (its kstui git branch).")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--branch", metavar="NAME")
    p.add_argument("--print", action="store_true", help="print the history instead of opening the TUI")
    args = p.parse_args(argv)
    kernel = Path(args.file).expanduser()
    if not kernel.is_file():
        raise BadInput(f"{kernel}: no such file")
    if args.print:
        from kstui.engine.history import History, HistoryError, default_branch

        try:
            entries = History(kernel.resolve(), args.branch, create=False).entries()
        except HistoryError as exc:
            raise BadInput(str(exc)) from None
        if not entries:
            branch = args.branch or default_branch(kernel)
            sys.stdout.write(f"no accepted version of {kernel.name} yet (branch {branch})\n")
            return 0
        for e in entries:
            q = f"  [{e.question_source}] {e.question}" if e.question else ""
            sys.stdout.write(f"{e.short}  {e.message}{q}\n")
        return 0
    from kstui.app import run_log_app

    return run_log_app(kernel.resolve(), args.branch)


def _cmd_replay(argv: Sequence[str]) -> int:
    p = _Parser(prog="kstui replay", description="Print or play a session's trace.")
    p.add_argument("trace", metavar="TRACE", help="a trace.jsonl (or its session folder)")
    p.add_argument("--analysis", action="store_true", help="for each accepted gain, the question that preceded it")
    p.add_argument("--print", action="store_true", help="print the events instead of playing them in the TUI")
    args = p.parse_args(argv)
    trace = Path(args.trace).expanduser()
    if trace.is_dir():
        trace = trace / "trace.jsonl"
    if not trace.is_file():
        raise BadInput(f"{trace}: no such trace")
    from kstui.engine.trace import TraceError, read_trace

    try:
        if args.analysis:
            from kstui.engine.analysis import analyse, format_table

            sys.stdout.write(format_table(analyse(list(read_trace(trace)))) + "\n")
            return 0
        if args.print:
            from kstui.views.headless import HeadlessPrinter

            HeadlessPrinter(sys.stdout).print_events(read_trace(trace))
            return 0
    except TraceError as exc:
        raise BadInput(str(exc)) from None
    from kstui.app import run_replay_app

    return run_replay_app(trace)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "eval":
            from harness.cli import main as harness_main

            return harness_main(argv[1:])
        if argv and argv[0] == "log":
            return _cmd_log(argv[1:])
        if argv and argv[0] == "replay":
            return _cmd_replay(argv[1:])
        if argv and argv[0] == "new":
            from kstui.new_task import main as new_main

            return new_main(argv[1:])
        if argv and argv[0] == "run":
            return _cmd_run(argv[1:], "kstui run")
        return _cmd_run(argv, "kstui")
    except BadInput as exc:
        sys.stderr.write(f"kstui: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # a reader that stopped early (`| head`) wanted no more: no traceback
        _quiet_stdout()
        return 0


def _quiet_stdout() -> None:
    """Point the closed pipe's descriptor at /dev/null, so the interpreter's last flush is silent."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError):
        pass
