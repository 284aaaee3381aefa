"""What a line, a report or a file shows of a URL: never its user and password, never a value
of its query or fragment (an API key given as ``?api_key=…``, a signed URL's ``sig=…``), and
nothing else changed. A value given to an option enters redacted (``errors.entered``): what every
line shows of it is the redacted text, and only ``actual`` gives the URL as given."""
from __future__ import annotations

import pickle

import pytest

from pytest_longctx.errors import Redacted, actual, entered, hidden, split_urls, without_credentials
from pytest_longctx.options.backend_keys import VLLM_SERVER
from pytest_longctx.options.keys import split_settings
from pytest_longctx.options.table import plugin_option


@pytest.mark.parametrize(("text", "shown"), [
    ("http://user:s3cret@gpu-box:8000/v1", "http://***@gpu-box:8000/v1"),
    ("http://gpu-box:8000/v1?api_key=sk-s3cret", "http://gpu-box:8000/v1?api_key=***"),
    # a ; is part of a value, as URL parsers read a query: only & ends one
    ("https://gpu-box/v1?token=s3cret&sig=s3cret;password=s3cret", "https://gpu-box/v1?token=***&sig=***"),
    ("https://user:s3cret@gpu-box/v1?key=s3cret", "https://***@gpu-box/v1?key=***"),
    ("http://gpu-box/v1#access_token=s3cret&type=bearer", "http://gpu-box/v1#access_token=***&type=***"),
    ("http://gpu-box/v1?key=s3cret#s3cret", "http://gpu-box/v1?key=***#***"),
    ("http://gpu-box/v1?sk-s3cret", "http://gpu-box/v1?***"),  # a value without a name is hidden whole
    ("http://gpu-box/v1?api_key=s3cret/models", "http://gpu-box/v1?api_key=***"),  # a path joined after the query
    ("http://gpu-box/v1?key=&token=s3cret=x", "http://gpu-box/v1?key=&token=***"),
    ("--backend-option 'base-url=http://gpu-box/v1?key=s3cret': no such option",
     "--backend-option 'base-url=http://gpu-box/v1?key=*** no such option"),
    # in running text a URL ends at a space only: a quote, a bar or a brace may be part of its secret
    ('"model": "http://gpu-box/v1?key=s3cret", "dtype": "auto"', '"model": "http://gpu-box/v1?key=*** "dtype": "auto"'),
    ("see 'http://gpu-box/v1?key=a|s3cret{x\"s3cret' there", "see 'http://gpu-box/v1?key=*** there"),
    ("--model http://u:s3cret@a:8000/v1?api_key=s3cret and --backend-option base-url=https://b/v1?token=s3cret differ",
     "--model http://***@a:8000/v1?api_key=*** and --backend-option base-url=https://b/v1?token=*** differ"),
    # several servers, one comma-separated value: each URL masked on its own, none hiding the others
    ("http://u:s3cret@a:8000/v1,http://b:8000/v1,https://v:s3cret@c/v1",
     "http://***@a:8000/v1,http://b:8000/v1,https://***@c/v1"),
    ("base-url=http://a/v1,http://u:s3cret@b/v1", "base-url=http://a/v1,http://***@b/v1"),
    # a comma inside a secret splits nothing: a password's (its authority has not ended), a query value's
    ("http://u:s3cret,http://x@b/v1", "http://***@b/v1"),
    ("http://a/v1?next=s3cret,http://b/v1?key=s3cret", "http://a/v1?next=***"),
])
def test_every_secret_of_a_url_is_hidden(text, shown):
    assert without_credentials(text) == shown
    assert "s3cret" not in without_credentials(text)


@pytest.mark.parametrize(("text", "entries"), [
    ("http://u:s3cret@a:8000/v1,http://b:8000/v1", ["http://u:s3cret@a:8000/v1", "http://b:8000/v1"]),
    # a comma in a password separates nothing, wherever it stands in it
    ("http://u:s3,cret@a:8000/v1", ["http://u:s3,cret@a:8000/v1"]),
    ("http://u:,s3cret,@a:8000/v1,http://v:s3,cret@b/v1", ["http://u:,s3cret,@a:8000/v1", "http://v:s3,cret@b/v1"]),
    ("http://u:s3cret,http://x@b/v1", ["http://u:s3cret,http://x@b/v1"]),
    # every other comma does: an empty entry, or one that is no URL, stands alone to be refused
    ("http://u:s3cret@a/v1,,http://b/v1", ["http://u:s3cret@a/v1", "", "http://b/v1"]),
    ("http://a/v1,", ["http://a/v1", ""]),
    ("http://a/v1,org/tiny", ["http://a/v1", "org/tiny"]),
])
def test_a_list_of_urls_splits_at_commas_outside_its_secrets(text, entries):
    assert split_urls(text) == entries


@pytest.mark.parametrize("text", [
    "facts/2k/f0: targets[0] 'logprobs': not finite; key=value? #3 at a@b.c",
    "docs/backends.md#vllm says so: put it in ?api_key=… nowhere",
    "http://127.0.0.1:8000/v1/models answered without a list of models",
    "the vLLM server at http://gpu-box:8000/v1 refused /completions (HTTP 400)",
    "",
])
def test_text_without_secrets_in_urls_is_left_as_it_is(text):
    assert without_credentials(text) == text


@pytest.mark.parametrize(("given", "shown"), [
    # a server without its scheme, its key in the query (the vLLM server backend's form without http://)
    ("gpu-box:8000/v1?api_key=sk-s3cret", "gpu-box:8000/v1?api_key=***"),
    # a query value holding characters running text ends a URL at: masked whole, to the end of the value
    ('https://hub.example/org/m?token=a|s3cret"s3cret{s3cret', "https://hub.example/org/m?token=***"),
    ("https://u:s3cret@hub.example/d?token=s3cret", "https://***@hub.example/d?token=***"),
    ("user:s3cret@gpu-box/v1", "***@gpu-box/v1"),
    # a password with an unescaped ? or /, a query value with an @: hidden whichever way a library reads it
    ("http://u:pa?s3cret@host/v1", "http://***"),
    ("http://u:s3/cret@host/v1?k=v", "http://***@host/v1?k=***"),
    ("http://host/v1?mail=a@s3cret", "http://***"),
    ("base-url=http://u:s3cret@gpu-box/v1", "base-url=http://***@gpu-box/v1"),  # a KEY=VALUE setting
    ("http://u:s3cret@a/v1,http://u:s3cret@b/v1", "http://***@a/v1,http://***@b/v1"),  # several servers
])
def test_a_url_enters_redacted_and_keeps_what_was_given(given, shown):
    value = entered(given)
    assert isinstance(value, Redacted) and value == shown and "s3cret" not in f"{value} {value!r} {[value]}"
    assert actual(value) == given
    assert pickle.loads(pickle.dumps(value)) == shown and actual(pickle.loads(pickle.dumps(value))) == given


@pytest.mark.parametrize("given", ["org/model", "./models/int4", "smollm2-135m", "builtin", "http://127.0.0.1:8000/v1",
                                   "models/q4.gguf", "a@b", "tiny@1", "key=value"])
def test_a_value_without_a_secret_enters_as_it_is(given):
    assert type(entered(given)) is str and entered(given) == given and actual(given) == given


def test_every_text_option_and_setting_enters_through_the_one_redaction():
    model = plugin_option("model").value.parse("http://u:s3cret@gpu-box:8000/v1")
    assert model == "http://***@gpu-box:8000/v1" and actual(model) == "http://u:s3cret@gpu-box:8000/v1"
    settings = split_settings("--backend-option", [plugin_option("backend-option").value.parse(
        "base-url=http://u:s3cret@gpu-box:8000/v1")], "timeout=60")
    assert settings["base-url"] == "http://***@gpu-box:8000/v1" and actual(settings["base-url"]) == "http://u:s3cret@gpu-box:8000/v1"
    values, _ = VLLM_SERVER.parse(settings)  # what the server backend connects with is the URL as given
    assert actual(values["base_url"]) == "http://u:s3cret@gpu-box:8000/v1" and "s3cret" not in values["base_url"]


def test_a_library_quoting_a_piece_of_a_secret_is_hidden_where_its_words_enter_a_line():
    # httpx, handed http://user:Qz7kPvA:Wm4xTrB/*@host/v1 as given, says "Invalid port: 'Qz7kPvA'": no URL to mask
    given = entered("http://user:Qz7kPvA:Wm4xTrB/*@127.0.0.1:8000/v1")
    assert hidden(f"--model {given}: InvalidURL: Invalid port: 'Qz7kPvA'", given) == (
        "--model http://***@127.0.0.1:8000/v1: InvalidURL: Invalid port: '***'")
    # a parameter's name is no secret, and a value entered with none leaves the text as it is
    query = entered("https://hub.example/m?token=Qz7kPvA")
    assert hidden("token Qz7kPvA rejected", query, "org/model") == "token *** rejected"
    assert hidden("token Qz7kPvA rejected", "org/model") == "token Qz7kPvA rejected"
