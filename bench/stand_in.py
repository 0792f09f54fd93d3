"""A library kernel judged in place of the candidate: what the harness itself costs for a fast kernel.

`flash` is FlashAttention-2 (torch's own `_flash_attention_forward`, which writes o and lse with the
bottom-right causal mask and native GQA): about 0.6x the cuDNN baseline of record on long shapes, so
the figures it gives are an upper bound. `cudnn` is cuDNN itself (`_scaled_dot_product_cudnn_attention`,
o and lse in one call) where it computes the scenario's mask natively (MHA, non-causal or Sq = Sk,
Sk > 1), and FA2 elsewhere: a candidate at the baseline's speed on the scenarios cuDNN holds the record
for, plus the copy into the ABI's layout. Used in-process by profile_judge.py and, through
stand_in_worker.py, as a whole worker behind `--worker-python`.
"""

from __future__ import annotations


def stand_in_judge(kind: str):
    """The worker's Judge with a library kernel as the candidate (`flash` or `cudnn`)."""
    import torch

    from harness.worker import Judge

    def flash(q, k, v, p, scale):
        out, lse, *_ = torch.ops.aten._flash_attention_forward(
            q, k, v, None, None, p["sq"], p["sk"], 0.0, bool(p["causal"]), False, scale=scale)
        return out, lse.masked_fill(lse == float("inf"), float("-inf"))  # FA2 marks rows with no key +inf

    def cudnn(q, k, v, p, scale):
        out, lse, *_ = torch.ops.aten._scaled_dot_product_cudnn_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None, True, 0.0, bool(p["causal"]), False,
            scale=scale)
        return out.transpose(1, 2), lse.reshape(p["b"], p["hq"], p["sq"])

    def native_to_cudnn(p) -> bool:
        return p["hq"] == p["hkv"] and p["sk"] > 1 and (not p["causal"] or p["sq"] == p["sk"])

    class StandIn(Judge):
        """The Judge with a library kernel as the candidate: same checks, same timing, same buffers."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.refused: set[str] = set()  # scenarios cuDNN's op would not run: FA2 stands in there
            self._picked: dict[str, object] = {}  # per scenario, tried once

        def _pick(self, s, q, k, v, scale):
            if s.id not in self._picked:
                self._picked[s.id] = self._try_cudnn(s, q, k, v, scale)
            return self._picked[s.id]

        def _try_cudnn(self, s, q, k, v, scale):
            p = s.params
            if kind != "cudnn" or not native_to_cudnn(p):
                return flash
            try:
                with torch.cuda.stream(self.timer.stream):
                    cudnn(q, k, v, p, scale)
            except RuntimeError:
                self.refused.add(s.id)
                return flash
            return cudnn

        def warm(self, s) -> None:
            """Also the stand-in's own first call of the shape, where cuDNN builds its plan: a compiled
            kernel has no such cost, so a prepared worker pays it before the job, not inside it."""
            super().warm(s)
            try:
                gen = torch.Generator(device=self.device)
                gen.manual_seed(0)
                inputs = self.task.make_inputs(s, gen, self.device)
                self._pick(s, inputs["q"], inputs["k"], inputs["v"], float(inputs["scale"]))
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()

        def _call(self, s, inputs, outs):
            o, lse = outs["o"].tensor, outs["lse"].tensor
            p = s.params
            q, k, v, scale = inputs["q"], inputs["k"], inputs["v"], float(inputs["scale"])
            fn = self._pick(s, q, k, v, scale)

            def call() -> None:
                with torch.cuda.stream(self.timer.stream):
                    out, l_ = fn(q, k, v, p, scale)
                    o.copy_(out)
                    lse.copy_(l_)

            return call

    return StandIn
