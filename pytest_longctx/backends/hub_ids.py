"""A hub model id's form, ``name`` or ``org/name``, told apart from a local path without looking at the disk:
what the model aliases and the transformers backend's checks take for a name the hub may hold."""
from __future__ import annotations

import re

HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


def looks_like_hub_id(model: str) -> bool:
    """``model`` has a hub id's form and is no relative path (``./x``, ``.hidden``)."""
    return bool(HUB_ID.fullmatch(model)) and not model.startswith(".")
