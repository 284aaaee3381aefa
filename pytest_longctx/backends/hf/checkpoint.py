"""What a model reference names and what its files say before transformers loads it: a folder, a
``.gguf`` file or a hub id; its tokenizer files; its config.json as written (its own code, its
quantization_config), and the name the error lines give that config."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pytest_longctx.backends.digests import beside_weights
from pytest_longctx.backends.hub_ids import looks_like_hub_id
from pytest_longctx.errors import LongctxError

TRUST_OPTION = "--longctx-trust-remote-code (longctx score: --trust-remote-code)"
# Files one of which a model folder's tokenizer is read from.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")


def locate(model: str) -> tuple[str, dict[str, Any]]:
    """(path or id for from_pretrained, extra kwargs): a folder, a .gguf file, or a hub id."""
    path = Path(model).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise LongctxError(f"--model {model}: no such GGUF file")
        return str(path.parent), {"gguf_file": path.name}
    if path.is_dir():
        held = sorted(p.parent for p in path.glob("*/config.json")) if not (path / "config.json").is_file() else []
        if len(held) == 1:  # auto-round's quantize_and_save writes its checkpoint into a folder named for it, inside the one given
            raise LongctxError(f"--model {model}: no config.json in this folder; {held[0]} holds a model: give that folder "
                               "as the model")
        return str(path), {}
    if path.exists():
        raise LongctxError(f"--model {model}: expected a model folder, a .gguf file or a hub id")
    if not looks_like_hub_id(model):  # a path, not a hub id: transformers would say "Repo id must be in the form…"
        raise LongctxError(f"--model {model}: no such folder or file (a model folder, a .gguf file, a hub id or an alias)")
    return model, {}


def missing_tokenizer(folder: str) -> str:
    """Why a model folder gives no tokenizer, as the text mode's error says it."""
    return f"{folder} has no tokenizer files ({' / '.join(TOKENIZER_FILES[:2])} with a vocabulary)"


def has_tokenizer_files(where: str, extra: Mapping[str, Any]) -> bool:
    """Whether a tokenizer can be read from the model: a folder holds one of ``TOKENIZER_FILES``; a hub
    id or a .gguf file is asked."""
    folder = not extra and Path(where).is_dir()
    return not folder or any((Path(where) / name).is_file() for name in TOKENIZER_FILES)


def stored_config(where: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint's config.json as written, before transformers picks a class for it (a
    GGUF file's config is made from its metadata, with no code or quantizer of its own)."""
    if extra:
        return {}
    from transformers import PretrainedConfig

    stored, _ = PretrainedConfig.get_config_dict(where)
    return stored


def needs_own_code(model: str, model_type: str | None = None) -> str:
    from transformers import CONFIG_MAPPING

    built_in = (f"; its model_type {model_type!r} is also built into transformers: to score it with that instead, "
                "remove auto_map from its config.json") if model_type in CONFIG_MAPPING else ""
    return (f"--model {model}: the model needs its own Python code (auto_map in its config), which is not run unless "
            f"you allow it: pass {TRUST_OPTION} only if you trust that code{built_in}")


def config_file(model: str, where: str, extra: Mapping[str, Any]) -> str:
    """The config.json a line names: the folder's, the cached one of a hub id, or a GGUF file's metadata."""
    if extra:
        return f"{model} (its metadata)"
    found = beside_weights(where, "config.json")
    return str(found) if found else f"config.json of {model}"
