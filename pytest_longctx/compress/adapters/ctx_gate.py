"""ctx-gate's ``ContextCompressor`` (``pip install "pytest-longctx[ctxgate]"``), named
``ctxgate``.

Called as ctx-gate's own faithfulness harness calls it: the probe appended as the last
user message and passed as ``current_prompt``, a fresh compressor per session (it
remembers the files it has seen). Its knobs are its constructor's: ``recency_window``,
``max_tool_output_lines``, ``relevance_keep`` and ``token_budget``; ``budget_share`` sets
``token_budget`` to that share of the session's tokens, as ctx-gate's own benchmark
sweeps it. ctx-gate counts tokens with tiktoken's cl100k_base when it can load it and
characters / 4 otherwise; here it counts with the gate's tokenizer (its counter's
encoder is the gate's ``encoding``), so ``token_budget`` is in the tokens savings are
measured in. It inserts its summary of older turns as a system message.
"""
from __future__ import annotations

from typing import Any

from pytest_longctx.compress.conventions import conventions


def _counter(encoding: Any) -> Any:
    from src.compressor.tokens import TokenCounter

    class GateTokens(TokenCounter):
        """ctx-gate's counter (content tokens plus 4 per message) over the gate's tokenizer."""

        def __init__(self) -> None:
            self._enc = encoding

    return GateTokens()


@conventions(probe="last_message", requires="ctx-gate", extra="ctxgate",
             ranges={"recency_window": (1, None), "max_tool_output_lines": (1, None), "relevance_keep": (0, None),
                     "token_budget": (1, None), "budget_share": (0.0, 1.0)})
def compress(messages: list[dict], probe: str, *, recency_window: int = 6, max_tool_output_lines: int = 40,
             relevance_keep: int = 2, token_budget: int | None = None, budget_share: float | None = None,
             encoding: Any) -> list[dict]:
    from src.compressor.compressor import ContextCompressor

    if token_budget is not None and budget_share is not None:
        raise ValueError("give token_budget (tokens) or budget_share (a share of the session's tokens), not both")
    counter = _counter(encoding)
    if budget_share is not None:
        token_budget = max(1, int(budget_share * counter.count_messages(messages)))
    compressor = ContextCompressor(recency_window=recency_window, max_tool_output_lines=max_tool_output_lines,
                                   relevance_keep=relevance_keep, token_budget=token_budget)
    compressor._counter = counter  # ctx-gate has no argument for its tokenizer
    result = compressor.compress(messages, current_prompt=probe)
    return [{"role": m["role"], "content": m["content"], "name": m.get("name")} for m in result.messages]
