"""The servers' URLs as the user gives them: one (``http://host:8000/v1``) or several, comma-separated
(``http://a:8000/v1,http://b:8000/v1``: replicas of one deployment), in ``--model`` or in
``--backend-option base-url=``; each checked before any request."""
from __future__ import annotations

from pytest_longctx.backends.vllm.options import ServerOptions
from pytest_longctx.errors import LongctxError, actual, entered, split_urls

SCHEMES = ("http://", "https://")


def is_server_url(value: str) -> bool:
    """Whether ``value`` names a server (or several) rather than a served model's name."""
    return actual(value).startswith(SCHEMES)


def check_server_url(url: str, given_as: str, key_env: str) -> None:
    """Refuse a server URL with a query string or a fragment: the only thing one would carry is a
    key (``?api_key=…``), which must not be on a command line (it lands in shell histories and CI
    logs, as ``api-key=`` would), and the client adds the endpoints' paths after the URL."""
    if "?" in url or "#" in url:
        other = " (or another, named with --backend-option api-key-env=NAME)" if key_env == ServerOptions().api_key_env else ""
        raise LongctxError(f"{given_as}{entered(url)}: a vLLM server's URL takes no query string or fragment "
                           f"(?…, #…): give it as http://HOST:PORT/v1; an API key goes in the environment variable "
                           f"{key_env}{other}, never on the command line (it would land in shell histories and CI logs)")


def server_urls(value: str, given_as: str, key_env: str) -> list[str]:
    """The servers ``value`` names, each as entered (redacted where it carries a secret): one URL, or several
    separated by commas (a comma in a password separates nothing), each checked (``check_server_url``); an empty
    entry or a server given twice is one line (``given_as`` names the option, as the user gave it)."""
    check_server_url(value, given_as, key_env)
    urls = [entered(part.strip()) for part in split_urls(actual(value))]
    if len(urls) == 1:
        return urls
    shown = ",".join(urls)
    if not all(urls):
        raise LongctxError(f"{given_as}{shown}: an entry is empty; give the servers' URLs separated by single commas "
                           "(http://HOST1:PORT/v1,http://HOST2:PORT/v1)")
    for url in urls:
        if not url.startswith(SCHEMES):
            raise LongctxError(f"{given_as}{shown}: {url} is not a server's URL; with several servers each is one, "
                               "http://HOST:PORT/v1")
    seen: dict[str, str] = {}
    for url in urls:
        same = actual(url).rstrip("/")
        if same in seen:
            raise LongctxError(f"{given_as}{shown}: {url} is given twice; give each server once")
        seen[same] = url
    return urls
