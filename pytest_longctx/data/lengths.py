"""Split names that are lengths (``2k``, ``8k``, ``32k``): their token counts and order."""
from __future__ import annotations

import re
from typing import Sequence

from pytest_longctx.errors import LongctxError


def length_tokens(length: str) -> int:
    """``"8k"`` -> 8192; used to order splits and name rows."""
    match = re.fullmatch(r"(\d+)([kK]?)", length)
    if not match:
        raise LongctxError(f"length {length!r}: expected a split name like 2k, 8k or 32k")
    return int(match.group(1)) * (1024 if match.group(2) else 1)


def length_name(text: str) -> str:
    """A length as the data names its split: ``2k`` for ``2k``, ``2K`` or ``2048``; one that is no whole number
    of k tokens in tokens (``3000``). Not a length: one line."""
    tokens = length_tokens(text.strip())
    return f"{tokens // 1024}k" if tokens and tokens % 1024 == 0 else str(tokens)


# the builder's shortest length: a rule and its targets lie 512+ tokens apart
MIN_BUILD_TOKENS = 2048


def check_buildable(length: str) -> int:
    """The tokens of a length the builder can build (a split name of at least 2k tokens), or
    one line saying why not; checked before anything is built or announced."""
    try:
        tokens = length_tokens(length)
    except LongctxError:
        raise LongctxError(f"--lengths {length}: expected a length like 2k, 8k or 32k") from None
    if tokens < MIN_BUILD_TOKENS:
        raise LongctxError(f"--lengths {length}: the builder needs at least 2k tokens (a rule and its targets lie 512+ tokens apart)")
    return tokens


def _split_order(split: str) -> tuple[int, str]:
    """Lengths by size; names that are not lengths (the faithfulness config's) after them."""
    try:
        return length_tokens(split), ""
    except LongctxError:
        return 1 << 62, split


def sorted_lengths(lengths: Sequence[str]) -> list[str]:
    return sorted(set(lengths), key=_split_order)
