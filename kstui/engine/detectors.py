"""The two triggers that call on the question bank: a stall, and a limit the agent claims."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from kstui.engine.events import Accepted, EvaluationStarted, Event, QuestionAsked, Rejected, Stalled, TurnFinished


@dataclass
class StallDetector:
    """A stall: no accepted improvement in N evaluations, or M agent turns without an evaluation.

    M defaults to 8: a turn is one model reply and its tool calls, and eight of them spent reading and
    editing without asking the harness means the agent is exploring blind. Each condition fires once
    when it reaches its threshold and then counts again from zero; a delivered question restarts both.
    """

    evals_without_gain: int = 5
    turns_without_eval: int = 8
    evals_since_gain: int = 0
    turns_since_eval: int = 0

    def observe_eval(self, accepted: bool) -> Stalled | None:
        self.turns_since_eval = 0
        if accepted:
            self.evals_since_gain = 0
            return None
        self.evals_since_gain += 1
        if self.evals_since_gain >= self.evals_without_gain:
            stalled = Stalled(reason=f"no accepted improvement in {self.evals_since_gain} evaluations",
                              evals_without_gain=self.evals_since_gain, turns_without_eval=0)
            self.evals_since_gain = 0
            return stalled
        return None

    def observe_turn(self, evaluated: bool = False) -> Stalled | None:
        if evaluated:
            self.turns_since_eval = 0
            return None
        self.turns_since_eval += 1
        if self.turns_since_eval >= self.turns_without_eval:
            stalled = Stalled(reason=f"{self.turns_since_eval} turns without an evaluation",
                              evals_without_gain=self.evals_since_gain,
                              turns_without_eval=self.turns_since_eval)
            self.turns_since_eval = 0
            return stalled
        return None

    def question_asked(self) -> None:
        self.evals_since_gain = 0
        self.turns_since_eval = 0

    def replay(self, events: Iterable[Event]) -> None:
        """Rebuild the counters from a trace (on resume); the stalls it would have fired are dropped."""
        evaluated = False
        for event in events:
            if isinstance(event, EvaluationStarted):
                evaluated = True
            elif isinstance(event, (Accepted, Rejected)):
                self.observe_eval(isinstance(event, Accepted))
            elif isinstance(event, TurnFinished):
                self.observe_turn(evaluated)
                evaluated = False
            elif isinstance(event, QuestionAsked):
                self.question_asked()


# --- claimed limits --------------------------------------------------------------------------------

_NOUN = (r"(?:limits?|ceiling|roofline|peak|speed[- ]of[- ]light|floor|(?:lower|theoretical|physical) bound|"
         r"theoretical (?:max(?:imum)?|best))")
_ADV = (r"(?:essentially|basically|effectively|practically|already|now|right|pretty much|very|quite|roughly|"
        r"about|approximately|just|really|probably|likely|clearly|fundamentally|more or less|all but|"
        r"squarely|firmly|definitely|simply|hard|up)")
_ARTICLE = r"(?:the|its|our|their|this|a|an)"
_CLAIMS = [
    # reaching a ceiling: "at the hardware limit", "we've hit the roofline", "close to peak"
    rf"\b(?:at|near|nearly at|close to|against|reached|reach|reaching|hit|hitting|approaching|"
    rf"saturating|saturated|maxed out|bumping into|bumping against)\s+(?:{_ADV}\s+)*(?:{_ARTICLE}\s+)?"
    rf"(?:[\w-]+[\s-]+){{0,3}}?{_NOUN}\b",
    # being a ceiling: "this is the limit", "that's essentially the speed of light"
    rf"(?:\b(?:is|are|was|be|been)|'s|'re)\s+(?:{_ADV}\s+)*{_ARTICLE}\s+(?:[\w-]+[\s-]+){{0,3}}?{_NOUN}\b",
    # a measured fraction that is (nearly) all of it: "97% of peak bandwidth"
    r"\b(?:9\d|100)(?:\.\d+)?\s*%\s+of\s+(?:the\s+)?(?:[\w-]+\s+){0,3}?"
    r"(?:peak|roofline|limit|theoretical|speed of light|bandwidth)\b",
    r"\bsaturat(?:e|es|ed|ing)\s+(?:the\s+)?(?:hbm|dram|memory|global[- ]memory|l2)?\s*bandwidth\b",
    # "memory-bound, nothing left", "fundamentally bandwidth-bound"
    r"\b(?:fundamentally|purely|entirely|completely|hard|strictly)\s+(?:memory|bandwidth|compute|latency|hbm)"
    r"[- ]bound\b",
    r"\b(?:memory|bandwidth|compute|latency|hbm)[- ]bound\b[^.;]{0,40}?\b(?:nothing|no (?:more|further)|"
    r"can(?:no|')t|cannot|not much)\b",
    # "as fast as it gets", "as good as this will get"
    r"\bas (?:fast|good|far|quick) as (?:it|this|that|we|you|one|anything) (?:gets|can (?:get|go)|"
    r"will (?:get|go)|is going to get|could (?:get|go))\b",
    # "cannot be improved further", "can't make it any faster"
    r"\b(?:can(?:no|')t|cannot|can not|could(?:n't| not)|won't|will not|impossible to)\s+(?:be\s+)?"
    r"(?:improved?|optimi[sz]ed?|sped up|speed (?:it )?up|accelerated|beaten|pushed|squeezed|"
    r"(?:made|make it|go|get it|run)\s+(?:any\s+|much\s+)?faster)\b",
    r"\bnothing (?:more |further )?(?:left|remaining|to gain|to squeeze|more to (?:gain|do))\b",
    r"\b(?:no|little|not much) (?:more |further )?(?:headroom|room (?:left|for (?:improvement|optimi[sz]ation)))\b",
    r"\bdiminishing returns\b",
    r"\bno (?:further|more) (?:improvements?|speedups?|speed-ups?|gains?|optimi[sz]ations?)\s+"
    r"(?:is|are|seems?|would be)\s+(?:\w+\s+)?(?:possible|available|likely)\b",
    r"\b(?:further|more|additional) (?:improvements?|speedups?|speed-ups?|gains?|optimi[sz]ations?)\s+"
    r"(?:is|are|seems?|would be)\s+(?:\w+\s+)?(?:not possible|impossible|unlikely|unattainable)\b",
    r"\b(?:is|'s) (?:about |probably |likely )?the best (?:we|it|one|anyone) (?:can|could) (?:do|get)\b",
    r"\b(?:already|now|essentially|near(?:ly)?|close to|effectively|practically)[- ]optimal\b",
    r"\b(?:gap|difference|remainder|rest)\b[^.;]{0,30}?\b(?:fundamental|inherent|unavoidable|irreducible)\b",
]
_CLAIM_RE = re.compile("|".join(f"(?:{c})" for c in _CLAIMS), re.IGNORECASE)
# A negation, a doubt or a hypothetical earlier in the same clause undoes the claim.
_UNDO_RE = re.compile(
    r"\b(?:not|never|no longer|nowhere|far from|yet to|if|whether|unless|until|before|once|when|whenever|"
    r"instead of|rather than|without|doubt|avoid|assuming|suppose|cannot|unsure|unclear|uncertain|"
    r"check|verify|see if|test|want|wants|goal|aim|aims|try|trying|hope|plan|would|could|should|need to|"
    r"needs to)\b|n't\b",
    re.IGNORECASE,
)
_BARE_VERB = re.compile(r"(?:reach|reaching|hit|hitting|approaching|saturat\w*)\b", re.IGNORECASE)
_CLAUSE_BREAK = re.compile(r"[,;:()\u2014]|\s-{1,2}\s|\b(?:but|however|although|though|and|whereas|while)\b",
                           re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n")
_MAX_SENTENCE = 600
_FENCE = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")


def find_limit_claim(text: str) -> str | None:
    """The first sentence in which the agent asserts a ceiling, or None.

    Questions, negations ("we are not yet at the limit"), hypotheticals ("if we hit the roofline") and
    code are not claims.
    """
    prose = _INLINE_CODE.sub(" ", _FENCE.sub(" ", text))
    for sentence in _SENTENCE_END.split(prose):
        sentence = " ".join(sentence.split()).lstrip("-*>• ")  # markdown bullets and quotes
        if not sentence or sentence.endswith("?") or len(sentence) > _MAX_SENTENCE:
            continue  # a "sentence" that long is a log or a listing, not a claim
        for match in _CLAIM_RE.finditer(sentence):
            if not _undone(sentence, match.start(), match.group(0)):
                return sentence
    return None


def _undone(sentence: str, start: int, claim: str) -> bool:
    """The claim's own words may carry a negation ("cannot be improved"): only what precedes counts."""
    before = sentence[:start]
    breaks = list(_CLAUSE_BREAK.finditer(before))
    clause = before[breaks[-1].end():].strip() if breaks else before.strip()
    if _UNDO_RE.search(clause):
        return True
    # "Reaching the roofline would…", "to hit the ceiling": a verb with no subject is no assertion
    return bool(_BARE_VERB.match(claim)) and (not clause or clause.lower().endswith("to"))
