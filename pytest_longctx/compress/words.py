"""Bag-of-words: the content words of a text, as the relevance compressors compare a
probe with the session and as the builder keeps paraphrase probes apart from facts."""
from __future__ import annotations

import re

STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both but
by can could did do does doing down during each few for from further had has have having he her here hers herself
him himself his how i if in into is it its itself just me more most my myself no nor not now of off on once only or
other our ours ourselves out over own same she should so some such than that the their theirs them themselves then
there these they this those through to too under until up very was we were what when where which while who whom why
will with would you your yours yourself yourselves again get gets got us let lets
""".split())
WORD = re.compile(r"[a-z0-9]+")


def content_words(text: str) -> set[str]:
    """Lower-cased words of two or more letters or digits, stop words left out."""
    return {w for w in WORD.findall(text.lower()) if w not in STOPWORDS and len(w) > 1}
