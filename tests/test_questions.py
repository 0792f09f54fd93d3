"""The question bank (load, validate, override, draw), the stall detector and claimed-limit detection."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kstui.engine.bank import DEFAULT_BANK, WHEN, QuestionBank, QuestionBankError, bank_paths
from kstui.engine.detectors import StallDetector, find_limit_claim
from kstui.engine.events import Accepted, EvaluationStarted, QuestionAsked, Rejected, TurnFinished

ROOT = Path(__file__).resolve().parents[1]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- the shipped bank --------------------------------------------------------------------------------

# Words that would hand the agent a technique or a piece of hardware knowledge: the bank must not.
TECHNIQUE_WORDS = [
    "wgmma", "mma", "tma", "cp.async", "ldmatrix", "tensor core", "pipelin", "double buffer", "double-buffer",
    "prefetch", "unroll", "vectori", "swizzl", "bank conflict", "coalesc", "split-k", "splitk", "warp special",
    "persistent", "async", "shuffle", "fuse", "fusion", "tile size", "block size", "128", "64", "shared memory",
    "smem", "registers per", "occupancy", "try ", "use ", "you should", "consider ",
]


def test_root_bank_is_the_packaged_bank():
    assert (ROOT / "questions.toml").read_bytes() == DEFAULT_BANK.read_bytes()
    assert DEFAULT_BANK.parent == ROOT / "kstui"


def test_shipped_bank_is_valid_and_in_spirit():
    bank = QuestionBank.load()
    qs = bank.questions
    assert len(qs) >= 30
    assert len({q.id for q in qs}) == len(qs)
    assert len({q.text for q in qs}) == len(qs)
    kinds = {q.kind for q in qs}
    assert {"layer", "limit", "evidence", "scope"} <= kinds
    assert {q.when for q in qs} == set(WHEN)
    for q in qs:
        assert q.text.endswith("?"), q.id
        assert len(q.text) <= 90, q.id  # short
        low = q.text.lower()
        for word in TECHNIQUE_WORDS:
            assert word not in low, f"{q.id} hands out {word!r}"
    # a claimed limit always has a question that rejects it
    assert sum(q.when == "claimed_limit" and q.kind == "limit" for q in qs) >= 5


# --- loading and validation --------------------------------------------------------------------------


GOOD = """
[[question]]
id = "a"
text = "First?"
kind = "layer"
when = "stall"

[[question]]
id = "b"
text = "Second?"
kind = "limit"
when = "claimed_limit"
"""


def test_override_by_id_field_by_field_disable_and_add(tmp_path):
    base = write(tmp_path / "base.toml", GOOD)
    ws = write(tmp_path / "ws.toml", """
[[question]]
id = "a"
when = "any"

[[question]]
id = "b"
disabled = true

[[question]]
id = "c"
text = "  Third,\\n  folded?  "
kind = "scope"
when = "stall"

[[question]]
id = "ghost"
disabled = true
""")
    bank = QuestionBank.load(base, ws)
    assert [q.id for q in bank.questions] == ["a", "c"]
    a = bank.get("a")
    assert (a.text, a.kind, a.when) == ("First?", "layer", "any")
    assert bank.get("c").text == "Third, folded?"
    assert bank.get("b") is None
    # a later file can re-enable
    again = write(tmp_path / "again.toml", '[[question]]\nid = "b"\ndisabled = false\n')
    assert [q.id for q in QuestionBank.load(base, ws, again).questions] == ["a", "b", "c"]


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        ('[[question]]\nid = "a"\ntext = "x?"\nkind = "layer"\nwhen = "sometimes"\n', 5, "field 'when'"),
        ('[[question]]\nid = "a"\ntext = "x?"\nkind = "Layer Two"\nwhen = "any"\n', 4, "field 'kind'"),
        ('[[question]]\nid = "a"\ntext = ""\nkind = "layer"\nwhen = "any"\n', 3, "field 'text'"),
        ('[[question]]\nid = "a"\ntext = "x?"\nkind = "layer"\nwehn = "any"\n', 5, "field 'wehn': unknown"),
        ('[[question]]\nid = "a"\ntext = "x?"\nkind = "layer"\n', 1, "missing field 'when'"),
        ('[[question]]\nid = "Bad Id"\ntext = "x?"\nkind = "layer"\nwhen = "any"\n', 2, "field 'id'"),
        ('[[question]]\ntext = "x?"\nkind = "layer"\nwhen = "any"\n', 1, "missing field 'id'"),
        ('[[question]]\nid = "a"\ntext = "x?"\nkind = "layer"\nwhen = "any"\ndisabled = "yes"\n', 6,
         "field 'disabled'"),
        ('[[question]]\nid = "a"\ntext = "x?"\nkind = "layer"\nwhen = "any"\n\n'
         '[[question]]\nid = "a"\ntext = "y?"\nkind = "layer"\nwhen = "any"\n', 8, "twice"),
        ('[[question]]\nid = "a"\ntext = "x?"\nkind = "layer"\nwhen = "any"\n\n[extra]\nx = 1\n', 7,
         "unknown table 'extra'"),
        (GOOD + '\n[[question]]\nid = "z"\n"text" = "x?"\nkind = 3\nwhen = "any"\n', 17, "question 'z': field 'kind'"),
    ],
)
def test_semantic_errors_name_file_line_and_field(tmp_path, text, line, fragment):
    path = write(tmp_path / "bank.toml", text)
    with pytest.raises(QuestionBankError) as info:
        QuestionBank.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert fragment in message
    assert "\n" not in message


def test_syntax_error_carries_line_and_column(tmp_path):
    path = write(tmp_path / "bank.toml", '[[question]]\nid = "a"\ntext = "unterminated\nkind = "x"\n')
    with pytest.raises(QuestionBankError) as info:
        QuestionBank.load(path)
    assert re.match(rf"^{re.escape(str(path))}:3:\d+: ", str(info.value)), str(info.value)


def test_missing_file_and_nothing_enabled(tmp_path):
    with pytest.raises(QuestionBankError, match="no such file"):
        QuestionBank.load(tmp_path / "nope.toml")
    only = write(tmp_path / "one.toml", GOOD)
    off = write(tmp_path / "off.toml", '[[question]]\nid="a"\ndisabled=true\n[[question]]\nid="b"\ndisabled=true\n')
    with pytest.raises(QuestionBankError, match="no question left enabled"):
        QuestionBank.load(only, off)


def test_bank_paths(tmp_path):
    assert bank_paths() == [DEFAULT_BANK]
    assert bank_paths(tmp_path) == [DEFAULT_BANK]
    write(tmp_path / "questions.toml", GOOD)
    explicit = tmp_path / "mine.toml"
    assert bank_paths(tmp_path, explicit) == [DEFAULT_BANK, tmp_path / "questions.toml", explicit]
    bank = QuestionBank.load(*bank_paths(tmp_path))
    assert bank.get("a").when == "stall" and bank.get("sass-inner-loop") is not None


# --- draw policy ---------------------------------------------------------------------------------------


def bank_of(tmp_path: Path, spec: list[tuple[str, str]]) -> QuestionBank:
    text = "".join(f'[[question]]\nid = "{i}"\ntext = "{i}?"\nkind = "layer"\nwhen = "{w}"\n\n' for i, w in spec)
    return QuestionBank.load(write(tmp_path / "b.toml", text))


def test_draw_matching_first_then_least_recently_used_never_twice(tmp_path):
    bank = bank_of(tmp_path, [("s1", "stall"), ("l1", "claimed_limit"), ("a1", "any"), ("s2", "stall"),
                              ("l2", "claimed_limit")])
    drawn = []
    for _ in range(8):
        q = bank.draw("claimed_limit")
        drawn.append(q.id)
        bank.mark_used(q.id)
    # only claimed_limit/any questions, exact matches first, then round-robin by staleness
    assert drawn[:3] == ["l1", "l2", "a1"]
    assert set(drawn) == {"l1", "l2", "a1"}
    assert all(x != y for x, y in zip(drawn, drawn[1:]))
    stall = [bank.draw("stall").id]
    bank.mark_used(stall[0])
    stall.append(bank.draw("stall").id)
    assert stall == ["s1", "s2"]
    # no trigger: the stalest of all
    assert bank.draw(None).id in {"l1", "l2", "a1", "s1", "s2"}
    with pytest.raises(ValueError):
        bank.draw("whenever")


def test_draw_falls_back_and_respects_exclude(tmp_path):
    bank = bank_of(tmp_path, [("only-stall", "stall"), ("x", "claimed_limit")])
    assert bank.draw("claimed_limit").id == "x"
    bank.mark_used("x")
    assert bank.draw("claimed_limit").id == "only-stall"  # never twice running beats matching
    # excluded (say, already queued) questions give way, but never-twice-running wins over exclude
    assert bank.draw("stall", exclude={"only-stall"}).id == "only-stall"
    three = bank_of(tmp_path, [("p", "stall"), ("q", "stall"), ("r", "any")])
    assert three.draw("stall", exclude={"p"}).id == "q"
    assert three.draw("stall", exclude={"p", "q"}).id == "r"
    assert three.draw("stall", exclude={"p", "q", "r"}).id == "p"
    single = bank_of(tmp_path, [("one", "any")])
    single.mark_used("one")
    assert single.draw("stall").id == "one"  # a bank of one can only repeat


def test_usage_rebuilt_from_trace_events(tmp_path):
    spec = [("a", "stall"), ("b", "stall"), ("c", "stall")]
    live = bank_of(tmp_path, spec)
    events = []
    for turn in range(4):
        q = live.draw("stall")
        live.mark_used(q.id)
        events.append(QuestionAsked(turn=turn, text=q.text, source="bank", question_id=q.id, kind=q.kind))
        events.append(QuestionAsked(turn=turn, text="typed by a human", source="human"))
    resumed = bank_of(tmp_path, spec)
    resumed.replay(events)
    assert resumed.usage == live.usage
    assert resumed.draw("stall").id == live.draw("stall").id


# --- stall detector ------------------------------------------------------------------------------------


def test_stall_after_n_evaluations_without_gain():
    d = StallDetector(evals_without_gain=3, turns_without_eval=100)
    assert [d.observe_eval(False) is not None for _ in range(3)] == [False, False, True]
    assert d.observe_eval(True) is None
    fired = [d.observe_eval(False) for _ in range(6)]
    assert [f is not None for f in fired] == [False, False, True, False, False, True]
    assert fired[2].evals_without_gain == 3 and "3 evaluations" in fired[2].reason
    assert StallDetector().evals_without_gain == 5


def test_stall_after_m_turns_without_evaluation_and_question_resets():
    d = StallDetector(evals_without_gain=100, turns_without_eval=4)
    assert [d.observe_turn() is not None for _ in range(4)] == [False, False, False, True]
    for _ in range(3):
        d.observe_turn()
    assert d.observe_turn(evaluated=True) is None
    assert d.observe_turn() is None  # counting restarted
    d.observe_turn()
    d.question_asked()
    assert [d.observe_turn() is not None for _ in range(4)] == [False, False, False, True]
    stalled = StallDetector(turns_without_eval=2)
    stalled.observe_turn()
    assert stalled.observe_turn().turns_without_eval == 2


def test_stall_replay_matches_live():
    events = []
    for i in range(7):
        events.append(EvaluationStarted(eval_no=i, kernel_sha256="x", scenarios="full"))
        events.append(Rejected(eval_no=i, reason="slower") if i != 2 else
                      Accepted(eval_no=i, commit="c", geomean=1.0, previous=None, correct=1, total=1, message="m"))
        events.append(TurnFinished(turn=i))
    events += [TurnFinished(turn=10 + i) for i in range(3)]
    d = StallDetector()
    d.replay(events)
    live = StallDetector()
    for i in range(7):
        live.observe_eval(i == 2)
        live.observe_turn(evaluated=True)
    for _ in range(3):
        live.observe_turn()
    assert (d.evals_since_gain, d.turns_since_eval) == (live.evals_since_gain, live.turns_since_eval) == (4, 3)


# --- claimed limits ------------------------------------------------------------------------------------

CLAIMS = [
    "We are at the hardware limit.",
    "The kernel is memory-bound, nothing left to do.",
    "This is as fast as it gets.",
    "We've hit the roofline.",
    "It cannot be improved further.",
    "At this point we're close to the theoretical peak.",
    "I believe we've reached the speed of light for this GPU.",
    "This is essentially the limit of what an H100 can do.",
    "The remaining gap to FA3 is fundamental.",
    "We're at 97% of peak HBM bandwidth.",
    "There's no headroom left.",
    "Further tuning has diminishing returns.",
    "The kernel is now near-optimal.",
    "It's fundamentally memory-bound.",
    "I can't make it any faster.",
    "We are saturating HBM bandwidth.",
    "That's the memory bandwidth ceiling.",
    "this kernel is likely near the hardware limit",
    "The loads are fine, but we are at the limit.",
    "This isn't compute-bound, it's memory-bound and at the hardware limit.",
    "We're bandwidth bound — nothing more to gain here.",
    "Honestly this is as good as it will get on H100.",
    "It can't be sped up without changing the algorithm.",
    "We are up against the roofline now.",
    "I think we're at the practical ceiling for this shape.",
    "We are basically at the limit of HBM.",
    "Performance is pinned at the memory roofline.",
    "I am confident this is the theoretical maximum.",
    "No further improvement is possible.",
    "This is the best we can do.",
    "I believe further speedups are not possible.",
    "We are limited by memory bandwidth, and there is no more room for improvement.",
]

NOT_CLAIMS = [
    "We are not yet at the limit.",
    "We're far from the roofline.",
    "Are we at the hardware limit?",
    "If we hit the roofline, the next step is the algorithm.",
    "The hardware limit is 3.35 TB/s.",
    "There is still plenty of headroom.",
    "This isn't memory-bound.",
    "I don't think we've hit the roofline yet.",
    "We're at 40% of peak bandwidth.",
    "Let me check whether we are compute-bound.",
    "Nothing is wrong with the build.",
    "The loop bound is N, so the loop runs N times.",
    "We are still some way from the limit.",
    "Once we are at the limit we can stop.",
    "Before we reach the ceiling, the loads need attention.",
    "This is because the shared memory limit caps occupancy at two blocks.",
    "It can be improved further by reordering the loop.",
    "We cannot be sure we are at the limit.",
    "I doubt we are at the hardware limit.",
    "Let me verify we are near the roofline.",
    "We are nowhere near the limit.",
    "The new version is 1.3x faster than the last one.",
    "```\n// at the hardware limit: nothing left\n```",
    "Run `echo at the hardware limit` to see.",
    "What is the limit here?",
    "Peak bandwidth on H200 is 4.8 TB/s.",
    "The limit check at the end of the loop is cheap.",
    "I will not claim we are at the limit.",
    "Whether we are memory-bound is unclear.",
    "Reaching the roofline would need 2x.",
    "We want to get close to the roofline.",
    "The goal is to reach peak.",
    "Hitting the roofline means every byte is loaded once.",
    "Any further improvement is possible only with a new algorithm, which I'll try.",
    "",
]


@pytest.mark.parametrize("text", CLAIMS)
def test_claims_found(text):
    assert find_limit_claim(text) == " ".join(text.split())


@pytest.mark.parametrize("text", NOT_CLAIMS)
def test_non_claims_ignored(text):
    assert find_limit_claim(text) is None


def test_claim_sentence_is_extracted_from_a_longer_reply():
    text = ("I profiled the kernel again. Is it at the limit? The L2 hit rate is high.\n\n"
            "Looking at the numbers, we have hit the ceiling for this shape. Next I will clean up.")
    assert find_limit_claim(text) == "Looking at the numbers, we have hit the ceiling for this shape."


def test_claims_in_markdown_lists_and_logs():
    reply = "Summary:\n- Loads are coalesced\n- We are at the hardware limit\n* next: clean up\n"
    assert find_limit_claim(reply) == "We are at the hardware limit"
    log = "ptxas info: " + "x " * 2000 + "at the hardware limit"  # one 4 KB line of a log, not prose
    assert find_limit_claim(log) is None
