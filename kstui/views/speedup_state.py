"""The speedup panel as plain data, folded from session events."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.result import EvalResult
from kstui.engine import events as ev
from kstui.engine.result_view import baseline_of_record


@dataclass
class EvalPoint:
    eval_no: int
    geomean: float | None  # None when any scenario failed: the mean does not exist then
    correct: int
    total: int
    accepted: bool = False


@dataclass
class SpeedupState:
    best: float | None = None
    best_commit: str | None = None
    baseline: str | None = None
    points: list[EvalPoint] = field(default_factory=list)
    result: EvalResult | None = None  # the latest evaluation's result (None: it failed to give one)
    result_eval: int | None = None
    stalled: str | None = None
    limit_claim: str | None = None
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cost_usd: float = 0.0
    where: str = "local"
    device: str | None = None  # host, GPU and queue wait of the latest evaluation
    status: str = "idle"
    evaluating: int | None = None
    last_error: str | None = None
    start: float | None = None  # the kernel as the user brought it (None: not yet, or it did not pass)
    start_note: str | None = None  # why there is no start, once its evaluation said so
    progress: ev.EvaluationProgress | None = None  # of the evaluation in flight

    @property
    def latest(self) -> EvalPoint | None:
        return self.points[-1] if self.points else None

    @property
    def trigger(self) -> str | None:
        """The bank trigger the run is in now: a claimed limit is the more specific one."""
        if self.limit_claim:
            return "claimed_limit"
        return "stall" if self.stalled else None

    def apply(self, event: ev.Event) -> bool:
        """Fold one event in; True when the panel must redraw."""
        if isinstance(event, ev.EvaluationStarted):
            self.evaluating, self.where = event.eval_no, event.where
            self.progress = None
        elif isinstance(event, ev.EvaluationProgress):
            if event.eval_no != self.evaluating:
                return False
            self.progress = event
        elif isinstance(event, ev.StartingPoint):
            self.start, self.start_note = event.geomean, None if event.geomean is not None else event.reason
            if event.geomean is not None and event.commit:
                self._mark_committed(event.eval_no)
                if self.best is None or event.geomean > self.best:
                    self.best, self.best_commit = event.geomean, event.commit
        elif isinstance(event, ev.EvaluationFinished):
            self.evaluating, self.progress = None, None
            self.where = event.where
            if event.result is None:
                self.last_error = event.error
                self.points.append(EvalPoint(event.eval_no, None, 0, 0))
                self.result, self.result_eval = None, event.eval_no  # no rows of an earlier evaluation stand
                return True
            self.last_error = None
            self.device = describe_device(event.result)
            r = event.result
            self.points.append(EvalPoint(event.eval_no, r.geomean_speedup, r.correct_count, len(r.scenarios)))
            self.result, self.result_eval = event.result, event.eval_no  # a build failure has no rows
            if r.scenarios:
                self.baseline = baseline_of_record(event.result) or self.baseline
        elif isinstance(event, ev.Accepted):
            self.best, self.best_commit = event.geomean, event.commit
            self.stalled = self.limit_claim = None
            self._mark_committed(event.eval_no)
        elif isinstance(event, ev.Stalled):
            self.stalled = event.reason
        elif isinstance(event, ev.LimitClaimed):
            self.limit_claim = event.sentence
        elif isinstance(event, ev.QuestionAsked):
            # A question is the answer to a stall: stop asking for one.
            self.stalled = self.limit_claim = None
        elif isinstance(event, ev.Usage):
            self.model = event.model or self.model
            self.input_tokens, self.output_tokens = event.input_tokens, event.output_tokens
            self.cache_read_tokens, self.cost_usd = event.cache_read_tokens, event.cost_usd
        elif isinstance(event, ev.StatusChanged):
            self.status = event.status
        elif isinstance(event, ev.SessionStarted):
            self.model = event.model or self.model
        elif isinstance(event, ev.SessionEnded):
            self.status = "stopped"
            if event.best_geomean is not None:
                self.best, self.best_commit = event.best_geomean, event.best_commit
        elif isinstance(event, ev.Rewound):
            self.best_commit = event.new_commit
        else:
            return False
        return True


    def _mark_committed(self, eval_no: int | None) -> None:
        for point in self.points:
            if point.eval_no == eval_no:
                point.accepted = True


def describe_device(result: EvalResult) -> str | None:
    """'host · GPU 0 NVIDIA H200 · queued 1.2 s' from an EvalResult's device record (None if empty)."""
    d = result.device
    gpus = d.get("gpus") or ([{"index": d.get("index"), "name": d.get("name")}] if d.get("name") else [])
    parts = [str(d["host"])] if d.get("host") else []
    if gpus:
        indices = ",".join(str(g.get("index")) for g in gpus if g.get("index") is not None)
        parts.append(f"GPU {indices} {gpus[0].get('name') or ''}".strip() if indices else str(gpus[0].get("name")))
    if d.get("queue_wait_s") is not None:
        parts.append(f"queued {float(d['queue_wait_s']):.1f} s")
    return " · ".join(parts) or None
