"""The GGUF's own tokenizer as llama.cpp runs it, for the text mode (``GGUFTokenizer``)."""
from __future__ import annotations

import ctypes
from typing import Any, Sequence

import numpy as np

from pytest_longctx.errors import LongctxError


class GGUFTokenizer:
    """The GGUF's own tokenizer as llama.cpp runs it, called as the text mode calls a Hugging Face
    tokenizer: ``tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)`` gives
    ``input_ids`` and per token its ``(start, end)`` characters. Special tokens written in the
    text (chat markup) are read as special tokens, as Hugging Face tokenizers do."""

    def __init__(self, llama: Any, model: Any, vocab: Any):
        self.llama, self.vocab = llama, vocab
        self.size = int(llama.llama_vocab_n_tokens(vocab))
        template = llama.llama_model_chat_template(model, None)
        self.chat_template = template.decode("utf-8") if template else None
        self._pieces: dict[int, bytes] = {}

    def __len__(self) -> int:
        return self.size

    def ids(self, text: str, add_special_tokens: bool = False) -> list[int]:
        raw = text.encode("utf-8")
        capacity = len(raw) + 8
        while True:
            buffer = (ctypes.c_int32 * capacity)()
            count = self.llama.llama_tokenize(self.vocab, raw, len(raw), buffer, capacity, add_special_tokens, True)
            if count >= 0:
                return list(buffer[:count])
            capacity = -count

    def piece(self, token: int) -> bytes:
        """The bytes token ``token`` stands for (special tokens as their text)."""
        found = self._pieces.get(token)
        if found is None:
            buffer = ctypes.create_string_buffer(64)
            size = self.llama.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, True)
            if size < 0:
                buffer = ctypes.create_string_buffer(-size)
                size = self.llama.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, True)
            found = self._pieces[token] = buffer.raw[:size]
        return found

    def offsets(self, text: str, ids: Sequence[int]) -> list[tuple[int, int]]:
        """Each token's characters: the pieces laid end to end over the text's UTF-8 bytes, a
        token that covers part of a character covering all of it."""
        pieces = [self.piece(t) for t in ids]
        raw = text.encode("utf-8")
        if b"".join(pieces) != raw:
            raise LongctxError("the GGUF's tokenizer does not give back the text from its tokens (it normalizes the text "
                               "or adds a space before it), so text-mode targets cannot be placed; score in --mode ids")
        lengths = np.fromiter((len(ch.encode("utf-8")) for ch in text), dtype=np.int64, count=len(text))
        char_of_byte = np.repeat(np.arange(len(text)), lengths)  # [bytes] -> the character each byte belongs to
        spans, at = [], 0
        for piece in pieces:
            end = at + len(piece)
            spans.append((int(char_of_byte[at]), int(char_of_byte[end - 1]) + 1) if end > at else
                         (int(char_of_byte[at]) if at < len(raw) else len(text),) * 2)
            at = end
        return spans

    def __call__(self, text: str, add_special_tokens: bool = True, return_offsets_mapping: bool = False, **_: Any) -> dict:
        if return_offsets_mapping and add_special_tokens:
            raise ValueError("offsets are given for the text's own tokens only: pass add_special_tokens=False")
        ids = self.ids(text, add_special_tokens)
        encoded: dict[str, Any] = {"input_ids": ids}
        if return_offsets_mapping:
            encoded["offset_mapping"] = self.offsets(text, ids)
        return encoded

    def get_vocab(self) -> dict[str, int]:
        return {self.llama.llama_vocab_get_text(self.vocab, i).decode("utf-8", "replace"): i for i in range(self.size)}

    def apply_chat_template(self, conversation: list[dict[str, str]], tokenize: bool = False,
                            add_generation_prompt: bool = False) -> Any:
        """The conversation rendered by the GGUF's chat template (jinja, sandboxed)."""
        if not self.chat_template:
            raise ValueError("the GGUF file has no chat template")
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise TemplateError(message)

        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        environment.globals["raise_exception"] = raise_exception
        special = {name: self.piece(getattr(self.llama, f"llama_vocab_{name[:3]}")(self.vocab)).decode("utf-8", "replace")
                   for name in ("bos_token", "eos_token")}
        text = environment.from_string(self.chat_template).render(messages=conversation,
                                                                   add_generation_prompt=add_generation_prompt, **special)
        return self.ids(text) if tokenize else text
