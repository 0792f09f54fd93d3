"""The suite of deliberately wrong attention kernels, materialised as .cu files.

Two sources: mutations.toml (small edits of workspace/flash_fwd.cu, so the cases follow the starting
kernel as it changes) and standalone/*.cu (cases that are not edits; each starts with
`// expect: a, b` and `// why: ...`). Every case names the verdicts the harness may legitimately give:
"verdict:<v>" (v in harness.result.VERDICTS), "check:<name>" (a failed static or binary check), or
"build" (a build failure).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.result import VERDICTS

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
MUTATIONS = HERE / "mutations.toml"
STANDALONE = HERE / "standalone"
STARTING_KERNEL = HERE.parents[1] / "workspace" / "flash_fwd.cu"

CHECK_NAMES = ("forbidden-call", "vendor-library", "imported-symbols", "single-file")
# A wrong kernel must fail: "ok" would be no failure, "skipped" is never a scenario's own verdict.
FAILING_VERDICTS = tuple(v for v in VERDICTS if v not in ("ok", "skipped"))
EXPECTATIONS = ("build", *(f"verdict:{v}" for v in FAILING_VERDICTS), *(f"check:{c}" for c in CHECK_NAMES))


class SuiteError(ValueError):
    """A malformed case: one line naming the case and what is wrong."""


@dataclass(frozen=True)
class Replacement:
    old: str
    new: str


@dataclass(frozen=True)
class Mutation:
    name: str
    expect: list[str]
    why: str
    replace: list[Replacement]


@dataclass(frozen=True)
class WrongKernel:
    name: str
    path: Path
    expect: list[str]
    why: str


def load_mutations(path: Path = MUTATIONS) -> list[Mutation]:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{path.name}: {exc}") from None
    mutations = []
    for i, entry in enumerate(data.get("mutation", [])):
        name = entry.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
            raise SuiteError(f"{path.name}: mutation {i}: 'name' should be a lowercase-dashed string")
        expect = entry.get("expect")
        if isinstance(expect, str):
            expect = [expect]
        why = entry.get("why")
        if not isinstance(why, str) or not why.strip():
            raise SuiteError(f"{path.name}: mutation {name!r}: 'why' should be a non-empty string")
        replace = entry.get("replace")
        if not isinstance(replace, list) or not replace:
            raise SuiteError(f"{path.name}: mutation {name!r}: needs at least one [[mutation.replace]]")
        replacements = []
        for r in replace:
            if not isinstance(r.get("old"), str) or not isinstance(r.get("new"), str) or not r["old"]:
                raise SuiteError(f"{path.name}: mutation {name!r}: each replace needs string 'old' and 'new'")
            replacements.append(Replacement(r["old"], r["new"]))
        mutations.append(Mutation(name, _valid_expect(name, expect), why.strip(), replacements))
    return mutations


def apply_mutation(source: str, mutation: Mutation) -> str:
    """The source with every replacement applied in order; each `old` must occur exactly once."""
    for r in mutation.replace:
        count = source.count(r.old)
        if count != 1:
            raise SuiteError(f"mutation {mutation.name!r}: {r.old!r} occurs {count} times (needs exactly 1)")
        source = source.replace(r.old, r.new)
    return source


def read_standalone(path: Path) -> WrongKernel:
    lines = path.read_text().splitlines()
    header = dict(
        m.groups() for line in lines[:2] if (m := re.fullmatch(r"//\s*(expect|why):\s*(.*?)\s*", line)) is not None
    )
    if "expect" not in header or "why" not in header:
        raise SuiteError(f"{path.name}: should start with '// expect: ...' and '// why: ...' lines")
    expect = [e.strip() for e in header["expect"].split(",") if e.strip()]
    name = path.stem.replace("_", "-")
    return WrongKernel(name, path, _valid_expect(name, expect), header["why"])


def wrong_kernels(dst: Path) -> list[WrongKernel]:
    """Every case as a .cu file in dst: mutations of the starting kernel, then the standalone files."""
    dst.mkdir(parents=True, exist_ok=True)
    base = STARTING_KERNEL.read_text()
    kernels = []
    for mutation in load_mutations():
        path = dst / f"{mutation.name}.cu"
        path.write_text(apply_mutation(base, mutation))
        kernels.append(WrongKernel(mutation.name, path, mutation.expect, mutation.why))
    for source in sorted(STANDALONE.glob("*.cu")):
        case = read_standalone(source)
        path = dst / f"{case.name}.cu"
        path.write_text(source.read_text())
        kernels.append(WrongKernel(case.name, path, case.expect, case.why))
    names = [k.name for k in kernels]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SuiteError(f"case names used twice: {', '.join(duplicates)}")
    return kernels


def _valid_expect(name: str, expect: object) -> list[str]:
    if not isinstance(expect, list) or not expect or not all(isinstance(e, str) for e in expect):
        raise SuiteError(f"case {name!r}: 'expect' should be a non-empty list of strings")
    unknown = [e for e in expect if e not in EXPECTATIONS]
    if unknown:
        raise SuiteError(f"case {name!r}: unknown expectation {unknown[0]!r} (known: {', '.join(EXPECTATIONS)})")
    return list(expect)
