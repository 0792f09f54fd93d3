"""`kstui new NAME`: a starting kernel, its task file and its PyTorch reference, ready for a session.

Writes NAME.cu (a plain, correct elementwise kernel with the ABI), NAME.toml (a spec using every kind
of key) and NAME_ref.py beside each other, from the templates in kstui/templates/. NAME may carry a
folder (ops/my_op); its last part is the C entry point's name. Never overwrites a file.
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib import resources
from pathlib import Path
from string import Template
from typing import NoReturn

TEMPLATES = (("op.cu.tmpl", "{}.cu"), ("op.toml.tmpl", "{}.toml"), ("op_ref.py.tmpl", "{}_ref.py"))
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Names the generated C or Python could not use: C/C++ keywords, and Python's (the reference's function).
_RESERVED = frozenset("""auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void
    volatile while bool class delete new namespace template this throw try catch true false and as assert async
    await def del elif except finally from global import in is lambda nonlocal not or pass raise with yield None
    True False launch to_float from_float""".split())


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ValueError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kstui new", description="Write NAME.cu, NAME.toml and NAME_ref.py: a task kstui can work on.")
    p.add_argument("name", metavar="NAME", help="the kernel's name (a C identifier), optionally in a folder: ops/my_op")
    return p


def render(name: str) -> dict[str, str]:
    """The three files' names and contents for a kernel called `name`."""
    root = resources.files("kstui").joinpath("templates")
    return {pattern.format(name): Template(root.joinpath(template).read_text()).substitute(name=name)
            for template, pattern in TEMPLATES}


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except ValueError as exc:
        print(f"kstui new: {exc}", file=sys.stderr)
        return 2
    target = Path(args.name)
    name, folder = target.name, target.parent
    if not _IDENT.fullmatch(name) or name in _RESERVED:
        print(f"kstui new: {name!r}: the name should be a C identifier (letters, digits, _), not a keyword",
              file=sys.stderr)
        return 2
    if not folder.is_dir():
        print(f"kstui new: {folder}: no such folder", file=sys.stderr)
        return 2
    files = {folder / file: text for file, text in render(name).items()}
    for path in files:
        if path.exists() or path.is_symlink():
            print(f"kstui new: {path}: already exists (kstui new never overwrites a file)", file=sys.stderr)
            return 2
    try:
        for path, text in files.items():
            with open(path, "x") as f:
                f.write(text)
    except OSError as exc:
        print(f"kstui new: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    kernel = folder / f"{name}.cu"
    print("wrote " + ", ".join(str(p) for p in files))
    print(f"check the task without a GPU:  kstui eval {kernel} --check-only")
    print(f"judge it on a GPU:             kstui eval {kernel}")
    print(f"make it faster:                kstui {kernel}")
    return 0
