"""The wrong-kernel suite for spec tasks: counterparts of the attention cases on the KernelBench examples.

spec_mutations.toml holds edits of examples/kernelbench/<example>/<example>.cu (the format of
mutations.toml, plus `example` and `counterpart`, the attention cases each stands for);
spec_standalone/*.cu holds the cases that are not edits, each the counterpart of the attention
standalone file of the same name without its "spec_" prefix. Each case is materialised with its
example's task file and KernelBench reference beside it, so `python -m harness eval` judges it as the
example's own kernel is judged.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from kernels.suite import HERE, STANDALONE, WrongKernel, apply_mutation, load_mutations, read_standalone

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

SPEC_MUTATIONS = HERE / "spec_mutations.toml"
SPEC_STANDALONE = HERE / "spec_standalone"
EXAMPLES = HERE.parents[1] / "examples" / "kernelbench"
DEFAULT_EXAMPLE = "softmax"
# Attention cases with no counterpart, and why: a verdict only attention gives.
ATTENTION_ONLY = {"no-key-rows-lse-zero": "verdict:no-key-rows is attention's own check (a row that sees no key)"}


@dataclass(frozen=True)
class SpecCase:
    kernel: WrongKernel
    example: str
    counterparts: tuple[str, ...]


def example_files(example: str) -> tuple[Path, Path, Path]:
    """The example's kernel, task file and KernelBench reference."""
    folder = EXAMPLES / example
    (reference,) = [p for p in folder.glob("*.py")]
    return folder / f"{example}.cu", folder / f"{example}.toml", reference


def spec_cases(dst: Path) -> list[SpecCase]:
    """Every case as dst/<name>.cu with its task file dst/<name>.toml and its reference beside it."""
    dst.mkdir(parents=True, exist_ok=True)
    raw = {m["name"]: m for m in tomllib.loads(SPEC_MUTATIONS.read_text())["mutation"]}
    cases = []
    for mutation in load_mutations(SPEC_MUTATIONS):
        example = raw[mutation.name].get("example", DEFAULT_EXAMPLE)
        counterparts = raw[mutation.name]["counterpart"]
        kernel, _, _ = example_files(example)
        path = dst / f"{mutation.name}.cu"
        path.write_text(apply_mutation(kernel.read_text(), mutation))
        cases.append(SpecCase(WrongKernel(mutation.name, path, mutation.expect, mutation.why), example,
                              tuple([counterparts] if isinstance(counterparts, str) else counterparts)))
    for source in sorted(SPEC_STANDALONE.glob("*.cu")):
        case = read_standalone(source)
        path = dst / f"{case.name}.cu"
        path.write_text(source.read_text())
        attention = source.name.removeprefix("spec_")
        cases.append(SpecCase(WrongKernel(case.name, path, case.expect, case.why), DEFAULT_EXAMPLE,
                              (read_standalone(STANDALONE / attention).name,)))
    for case in cases:
        _, task, reference = example_files(case.example)
        shutil.copy(task, case.kernel.path.with_suffix(".toml"))
        shutil.copy(reference, dst / reference.name)
    return cases
