"""What a line, a report or a file shows of a URL: never its user and password, never a value
of its query or fragment (an API key given as ``?api_key=…``, a signed URL's ``sig=…``), and
nothing else changed."""
from __future__ import annotations

import pytest

from pytest_longctx.errors import without_credentials


@pytest.mark.parametrize(("text", "shown"), [
    ("http://user:s3cret@gpu-box:8000/v1", "http://***@gpu-box:8000/v1"),
    ("http://gpu-box:8000/v1?api_key=sk-s3cret", "http://gpu-box:8000/v1?api_key=***"),
    ("https://gpu-box/v1?token=s3cret&sig=s3cret;password=s3cret", "https://gpu-box/v1?token=***&sig=***;password=***"),
    ("https://user:s3cret@gpu-box/v1?key=s3cret", "https://***@gpu-box/v1?key=***"),
    ("http://gpu-box/v1#access_token=s3cret&type=bearer", "http://gpu-box/v1#access_token=***&type=***"),
    ("http://gpu-box/v1?key=s3cret#s3cret", "http://gpu-box/v1?key=***#***"),
    ("http://gpu-box/v1?sk-s3cret", "http://gpu-box/v1?***"),  # a value without a name is hidden whole
    ("http://gpu-box/v1?api_key=s3cret/models", "http://gpu-box/v1?api_key=***"),  # a path joined after the query
    ("http://gpu-box/v1?key=&token=s3cret=x", "http://gpu-box/v1?key=&token=***"),
    ("--backend-option 'base-url=http://gpu-box/v1?key=s3cret': no such option",
     "--backend-option 'base-url=http://gpu-box/v1?key=*** no such option"),
    ('"model": "http://gpu-box/v1?key=s3cret", "dtype": "auto"', '"model": "http://gpu-box/v1?key=***", "dtype": "auto"'),
    ("--model http://u:s3cret@a:8000/v1?api_key=s3cret and --backend-option base-url=https://b/v1?token=s3cret differ",
     "--model http://***@a:8000/v1?api_key=*** and --backend-option base-url=https://b/v1?token=*** differ"),
])
def test_every_secret_of_a_url_is_hidden(text, shown):
    assert without_credentials(text) == shown
    assert "s3cret" not in without_credentials(text)


@pytest.mark.parametrize("text", [
    "facts/2k/f0: targets[0] 'logprobs': not finite; key=value? #3 at a@b.c",
    "docs/backends.md#vllm says so: put it in ?api_key=… nowhere",
    "http://127.0.0.1:8000/v1/models answered without a list of models",
    "the vLLM server at http://gpu-box:8000/v1 refused /completions (HTTP 400)",
    "",
])
def test_text_without_secrets_in_urls_is_left_as_it_is(text):
    assert without_credentials(text) == text
