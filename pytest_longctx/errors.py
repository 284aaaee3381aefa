"""The one exception type users see: a single line that says what is wrong and what to do; and
what such a line must never show."""
from __future__ import annotations

import re


class LongctxError(Exception):
    """Bad input or setup. The message names the file/item/field and the fix."""


class DataError(LongctxError):
    """A dataset file that does not match the schema."""


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# a URL in running text: from its scheme to the next space (a quote or a bracket may be part of a secret)
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S*")
# a value as given that is a URL although it names no scheme: HOST:PORT…, USER:PASSWORD@HOST…, or a query with a NAME=
_SCHEMELESS = re.compile(r"(?:[\w.-]+=)?(?:[\w.-]+:\d+(?:[/?#]|$)|[^/\s@=:]+:[^\s@]*@|[^?#]*[?#][^=]*=)")
_SETTING = re.compile(r"[\w.-]+=")  # a KEY=VALUE setting (--backend-option base-url=…): its value is the URL


def _secret_spans(url: str) -> list[tuple[int, int]]:
    """The spans of ``url`` that may hold a secret, whichever way a library reads it: its user and password (after
    the ``KEY=`` of a setting) up to the last ``@`` of its authority (RFC 3986), of the part before its query (a
    password with an unescaped ``/``) and of the whole (one with an unescaped ``?`` or ``#``); and the value of every
    parameter of its query and fragment, whatever it holds but the ``&`` that ends it (a ``?``, ``;`` or ``=`` is
    part of it, as URL parsers read it; a parameter without a name, ``?sk-…``, is a value)."""
    setting = _SETTING.match(url)
    offset = setting.end() if setting else 0
    scheme = _SCHEME.match(url, offset)
    start = scheme.end() if scheme else offset
    authority_end = next((i for i in range(start, len(url)) if url[i] in "/?#"), len(url))
    query = next((i for i in range(start, len(url)) if url[i] in "?#"), len(url))
    spans = [(start, at) for at in (url.rfind("@", start, authority_end), url.rfind("@", start, query), url.rfind("@", start))
             if at > start]
    fragment = url.find("#", query)
    for part_start, part_end in ((query + 1, fragment if fragment >= 0 else len(url)), (fragment + 1, len(url))):
        if part_start <= 0 or part_start > len(url):
            continue
        position = part_start
        for parameter in url[part_start:part_end].split("&"):
            name, equals, _ = parameter.partition("=")
            spans.append((position + (len(name) + 1 if equals else 0), position + len(parameter)))
            position += len(parameter) + 1
    return [(a, b) for a, b in spans if b > a]


# where a comma-separated list of URLs (several servers: http://a/v1,http://b/v1) may start its next URL
_NEXT_URL = re.compile(r",(?=[A-Za-z][A-Za-z0-9+.-]*://)")
# an authority that ends before such a comma: a user and password ending at an @, or a host and a port number
_WHOLE_AUTHORITY = re.compile(r"[^@]*@.*|[^:@]*(?::\d*)?")


def _listed(text: str) -> list[str]:
    """``text`` as the URLs of a comma-separated list, each to be masked on its own: split only at a comma before a
    scheme where the URL before it is whole, so that a comma inside a secret never splits it (none after a query or
    fragment begins, whose values may hold one; none within an authority that has not ended, a password's)."""
    pieces, start = [], 0
    for comma in _NEXT_URL.finditer(text):
        piece = text[start:comma.start()]
        setting = _SETTING.match(piece) if not pieces else None  # base-url=http://a/v1,http://b/v1
        scheme = _SCHEME.match(piece, setting.end() if setting else 0)
        if scheme is None or "?" in piece or "#" in piece:
            break
        if _WHOLE_AUTHORITY.fullmatch(piece[scheme.end():].split("/", 1)[0]):
            pieces.append(piece)
            start = comma.end()
    return [*pieces, text[start:]]


def split_urls(text: str) -> list[str]:
    """The entries of a comma-separated list of URLs as given: split before each next URL's scheme as ``_listed``
    splits, and at every other comma outside a secret span, so that an empty entry or one that is no URL stands
    alone (``http://a/v1,,http://b/v1``, ``http://a/v1,org/tiny``) while a comma in a password splits nothing."""
    entries = []
    for piece in _listed(text):
        spans, start = _secret_spans(piece), 0
        for n, char in enumerate(piece):
            if char == "," and not any(a <= n < b for a, b in spans):
                entries.append(piece[start:n])
                start = n + 1
        entries.append(piece[start:])
    return entries


def _masked(url: str) -> str:
    """``url`` with every character of its secret spans hidden, each run of them written ``***``; a comma-separated
    list of URLs, each masked on its own (``_listed``)."""
    listed = _listed(url)
    if len(listed) > 1:
        return ",".join(map(_masked, listed))
    hidden = [False] * len(url)
    for a, b in _secret_spans(url):
        hidden[a:b] = [True] * (b - a)
    shown, n = [], 0
    while n < len(url):
        if hidden[n]:
            shown.append("***")
            while n < len(url) and hidden[n]:
                n += 1
        else:
            shown.append(url[n])
            n += 1
    return "".join(shown)


# a piece of a secret shorter than this tells too little to hide without garbling the text around it
_PIECE = 4
_SEPARATORS = re.compile(r"[\s:/?#@&;=]+")


def _pieces(url: str) -> set[str]:
    """The secrets of ``url`` and their pieces between a URL's separators, less the names of its query's parameters
    (``token`` of ``?token=…`` is no secret): what a library handed the URL as given may quote in its own words
    ("Invalid port: '…'")."""
    names = set(re.findall(r"[?#&]([^?#&=]+)=", url))
    found = set()
    for one in _listed(url):
        for a, b in _secret_spans(one):
            found.update(p for p in (one[a:b], *_SEPARATORS.split(one[a:b])) if len(p) >= _PIECE and p not in names)
    return found


class Redacted(str):
    """A value given on a command line or in an ini file that is a URL carrying a secret (a user and
    password, a query value): the text is what every line, property, report and file shows of it, the
    secret written ``***``; ``actual`` is the value as given, for the one place that connects with it."""

    actual: str

    def __new__(cls, actual: str) -> Redacted:
        made = super().__new__(cls, _masked(actual))
        made.actual = actual
        return made

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return Redacted, (self.actual,)


def entered(value: str) -> str:
    """An option's value at the point it enters: a URL-shaped value (a scheme ``…://``, ``HOST:PORT``,
    ``USER:PASSWORD@HOST`` or a query with a ``NAME=``) that carries a secret becomes a ``Redacted``; any other is
    returned as it is."""
    if isinstance(value, Redacted):
        return value
    if not (_SCHEME.search(value) or _SCHEMELESS.match(value)) or _masked(value) == value:
        return value
    return Redacted(value)


def actual(value: str) -> str:
    """The value as given: what a ``Redacted`` stands for (the URL to connect to), else the value itself."""
    return value.actual if isinstance(value, Redacted) else value


def without_credentials(text: str) -> str:
    """``text`` as a line or a file may show it, for text a library wrote: every URL in it (from its scheme
    to the next space) with its user, password and every value of its query and fragment written as
    ``***`` (``http://***@host/v1?api_key=***``), as ``entered`` shows a value."""
    return _URL_IN_TEXT.sub(lambda m: _masked(m.group()), text)


def hidden(text: str, *given: object) -> str:
    """``text`` a library wrote while it had the values ``given`` as given (``actual``), as a line may show it:
    ``without_credentials``, and every secret of a ``Redacted`` among them (or in a list or tuple among them), or a
    piece of one, wherever it stands."""
    text = without_credentials(text)
    values = [v for value in given for v in (value if isinstance(value, (list, tuple)) else [value])]
    for secret in sorted({p for value in values if isinstance(value, Redacted) for p in _pieces(value.actual)},
                         key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, for quoting it in one line; empty when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
