"""The tokenization modes (docs/metrics.md#tokenization-modes): which one a run uses, and
every item's reads under it.

``ids`` mode feeds the stored Qwen3.5 ids; ``text`` mode tokenizes each text with the
model's tokenizer and maps targets by character offset.
"""
from __future__ import annotations

from typing import Any

from pytest_longctx.data.load import Dataset
from pytest_longctx.data.records import FaithfulnessItem
from pytest_longctx.errors import LongctxError
from pytest_longctx.scoring.ids_checks import problems, reproduces_stored_ids
from pytest_longctx.scoring.ids_mode import ids_reads
from pytest_longctx.scoring.reads import ItemReads
from pytest_longctx.scoring.text_mode import session_reads, text_reads

MODES = ("auto", "ids", "text")


def choose_mode(requested: str, tokenizer: Any, dataset: Dataset, warnings: list[str] | None = None,
                missing: str | None = None) -> str:
    """The mode the run uses. ``ids`` needs every item's stored fields to check out (the
    texts tokenize to the stored ids, positions point at the targets): with ``--mode ids``
    the first item that does not is an error; with ``auto`` the run falls back to ``text``
    and says so in ``warnings``. ``auto`` with a tokenizer that reproduces none of the
    stored ids (another vocabulary) is ``text`` without a word: that is what it is for.
    ``missing``: why the backend has no tokenizer (a model folder without tokenizer files),
    said when the text mode needs one."""
    if requested not in MODES:
        raise LongctxError(f"--mode {requested}: expected one of {', '.join(MODES)}")
    if requested == "text":
        if tokenizer is None:
            if missing:
                raise LongctxError(f"--mode text: {missing}; add them, or use --mode ids (the data's stored Qwen3.5 ids, "
                                   "for a model of that vocabulary)")
            raise LongctxError("--mode text needs a tokenizer, and the backend has none; use --mode ids")
        return "text"
    if requested == "auto" and tokenizer is not None and not reproduces_stored_ids(tokenizer, dataset):
        return "text"
    found = problems(tokenizer, dataset)
    first = next(found, None)
    if first is None:
        return "ids"
    if requested == "ids" or tokenizer is None:
        fix = ("use --mode text (or auto)" if tokenizer is not None else
               f"{missing or 'this backend has no tokenizer'}, so the text mode cannot replace them: fix the data "
               "(longctx validate DIR)")
        raise LongctxError(f"--mode {requested}: {first}; the ids mode feeds the stored Qwen3.5 ids as they are: {fix}")
    more = sum(1 for _ in found)
    others = f" (and {more} more item{'s' if more > 1 else ''})" if more else ""
    message = (f"--mode auto: scoring in text mode with the model's own tokenizer, not the stored Qwen3.5 ids: {first}{others}; "
               "check the data with longctx validate DIR, or pass --mode text to silence this")
    if warnings is not None:
        warnings.append(message)
    return "text"


def plan_reads(dataset: Dataset, mode: str, tokenizer: Any = None) -> list[ItemReads]:
    """Sequences and reads of every selected item, in dataset order. Faithfulness
    sessions are rendered with the model's tokenizer in either mode."""
    plans = []
    for config, length, item in dataset.items():
        if isinstance(item, FaithfulnessItem):
            plans.append(session_reads(tokenizer, config, length, item, [item.messages]))
        elif mode == "ids":
            plans.append(ids_reads(config, length, item, tokenizer))
        else:
            plans.append(text_reads(tokenizer, config, length, item))
    return plans
