"""docs/TASKS.md's complete spec is a valid spec naming every key, and nothing kstui says to the agent or
offers as a question is specific to one operator (a spec task's session needs nothing else)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from harness.taskfile import load_task_file
from harness.tasks.spec import DISTRIBUTIONS, DTYPES, RULES, SCALAR_TYPES, TOP_KEYS

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
TASKS = (ROOT / "docs" / "TASKS.md").read_text()


def _block(language: str) -> str:
    match = re.search(rf"```{language}\n(.*?)```", TASKS, re.S)
    assert match, language
    return match.group(1)


def test_the_complete_spec_is_valid(tmp_path: Path) -> None:
    (tmp_path / "rope_scale.toml").write_text(_block("toml"))
    (tmp_path / "rope_scale_ref.py").write_text(_block("python"))
    tf = load_task_file(tmp_path / "rope_scale.cu")
    spec = tf.spec
    assert spec is not None and tf.scenario_timeout_s == 120
    assert spec.quick == ["bf16-heads32-tokens4096-dim128"]
    assert len(spec.timed) == 3 and len(spec.check) == 4


def test_the_complete_spec_uses_every_key() -> None:
    data = tomllib.loads(_block("toml"))
    assert set(data) == set(TOP_KEYS)
    args = data["entry"]["args"]
    assert {k for a in args for k in a} == {"tensor", "role", "dtype", "shape", "scalar", "type", "value", "dtype_code"}
    assert set(data["scenarios"]) == {"timed", "check", "quick"}
    tolerance = data["tolerance"]
    own = {k for v in tolerance.values() if isinstance(v, dict) for k in v}
    assert {k for k, v in tolerance.items() if not isinstance(v, dict)} | own == {
        "rule", "factor", "rtol", "atol", "reference_dtype"}
    assert {k for v in data["inputs"].values() for k in v} == {"dist", "mean", "std", "low", "high"}
    for word in (*DTYPES, *SCALAR_TYPES, *RULES, *DISTRIBUTIONS, "param", "atol", "mean", "std", "low", "high"):
        assert word in TASKS, word


OPERATOR_WORDS = re.compile(r"\b(attention|softmax|flash\w*|head_?dim|heads?|quer(y|ies)|keys?|causal|lse|rmsnorm|"
                            r"cudnn|fa3|gemm|matmul|conv\w*|norm(alis|aliz)\w*)\b", re.I)


def test_the_question_bank_and_the_prompt_name_no_operator() -> None:
    bank = tomllib.loads((ROOT / "kstui" / "questions.toml").read_text())
    texts = [q["text"] for q in bank["question"]]
    assert len(texts) > 20
    for text in texts:
        assert not OPERATOR_WORDS.search(text), text
    from kstui.engine.prompts import system_prompt

    assert not OPERATOR_WORDS.search(system_prompt("my_op.cu", "/work"))
