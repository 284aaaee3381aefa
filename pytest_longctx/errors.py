"""The one exception type users see: a single line that says what is wrong and what to do; and
what such a line must never show."""
from __future__ import annotations

import re


class LongctxError(Exception):
    """Bad input or setup. The message names the file/item/field and the fix."""


class DataError(LongctxError):
    """A dataset file that does not match the schema."""


# a URL's user and password, up to the last @ before the path's query or the text's next space: a
# password with an unescaped / or @ in it is hidden whole, at worst with the host
_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^\s?#]*@")
# a URL's query and fragment: from its first ? or # up to a space or a character no URL holds unescaped
_QUERY = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s?#\"<>\\^`{|}]*)([?#][^\s\"<>\\^`{|}]*)")
# one parameter of a query or fragment: its separator, its name with its =, its value
_PARAMETER = re.compile(r"([?#&;])([^?#&;=]*=)?([^?#&;]*)")


def _hidden_values(query: str) -> str:
    """A query or fragment with every value written as ``***``: any parameter may be a key (api_key,
    token, sig …), and a part without a name (``?sk-…``) is hidden whole."""
    return _PARAMETER.sub(lambda m: m[1] + (m[2] or "") + ("***" if m[3] else ""), query)


def without_credentials(text: str) -> str:
    """``text`` as a line or a file may show it: every URL's user and password
    (``http://user:pass@host/v1``) written as ``***`` (``http://***@host/v1``), and every value of
    its query and fragment too (``http://host/v1?api_key=***``)."""
    text = _CREDENTIALS.sub(r"\1***@", text)
    return _QUERY.sub(lambda m: m[1] + _hidden_values(m[2]), text)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, for quoting it in one line; empty when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
