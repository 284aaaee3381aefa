"""Hybrids of two GGUF files of one model, for ``longctx blame --backend llama.cpp``: the parts of
a GGUF file, named as ``pair.part_name`` names them, and a
``Pair`` whose hybrids are GGUF files written with the ``gguf`` package and read by llama.cpp.

A hybrid holds every metadata key and every tensor of its base file, except the tensors of
the parts taken, which are copied from the other file as they are stored there (raw blocks,
ggml type unchanged). GGUF names map to parts so: ``token_embd`` is ``embed``, ``output`` is
``lm_head`` (absent when the head is tied to the embeddings), ``blk.N.*`` is ``layer.N``, within
it ``attn_*`` (q/k/v/output and their norms) is ``layer.N.attn``, ``ffn_*`` ``layer.N.mlp`` and
the norms around them (``attn_norm``, ``ffn_norm``, ...) ``layer.N.norms``; the rest
(``output_norm``) is ``final``. When the two sides run with different KV cache types
(``cache-type-k``, ``cache-type-v``), the cache is one more part, ``kv_cache``: taking it runs
the base file with the other side's cache types.
"""
from __future__ import annotations

import re
from contextlib import closing, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from pytest_longctx.backends.aliases import resolve_model
from pytest_longctx.backends.hybrids.pair import (
    CANDIDATE,
    ORIGINAL,
    Cost,
    PairRequest,
    Part,
    as_reference,
    check_granularity,
    check_tensors,
    grouped,
    non_finite_kind,
    other_side,
    part_name,
)
from pytest_longctx.backends.llama_cpp.backend import LlamaCppBackend, checked_file
from pytest_longctx.backends.llama_cpp.recipe import FULL_PRECISION, quantize_arguments
from pytest_longctx.backends.llama_cpp.settings import Settings, parse_settings
from pytest_longctx.errors import LongctxError
from pytest_longctx.options.backend_keys import backend_options
from pytest_longctx.paths import temporary_folder

KV_CACHE = "kv_cache"  # the part that stands for the KV cache's types
CACHE_OPTIONS = ("cache-type-k", "cache-type-v")
LAYER = re.compile(r"^blk\.(?P<index>\d+)\.(?P<stem>[^.]+)\.")
NORMS = re.compile(r"^(attn_norm(_\d+)?|ffn_norm|post_\w*norm|\w+_post_norm|layer_output_norm)$")  # around attention and MLP
TOP = {"token_embd": "embed", "output": "lm_head"}  # tensors outside the layers with parts of their own


def _where(name: str) -> str | tuple[int, str]:
    found = LAYER.match(name)
    if found is None:
        return TOP.get(name.split(".")[0], "final")
    stem = found["stem"]
    block = "norms" if NORMS.match(stem) else "attn" if stem.startswith("attn_") else "mlp" if stem.startswith("ffn_") else "norms"
    return int(found["index"]), block


def gguf_parts(names: Iterable[str], granularity: str) -> list[Part]:
    """The parts of a GGUF file's tensors ``names`` at ``granularity``, in the file's order."""
    check_granularity(granularity)
    return grouped((name, part_name(granularity, name, _where(name))) for name in names)


class GGUFFile:
    """A GGUF file's tensors as the ``gguf`` package reads them (mapped, not loaded)."""

    def __init__(self, path: Path, option: str, shown: str):
        from gguf import GGUFReader

        try:
            self.reader = GGUFReader(path)
        except (ValueError, OSError) as exc:
            raise LongctxError(f"{option} {shown}: the gguf package cannot read it ({exc}); re-download or re-convert it") from None
        self.path = path
        self.tensors = {t.name: t for t in self.reader.tensors}
        field = self.reader.fields.get("general.architecture")
        self.architecture = str(field.contents()) if field is not None else "?"

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Tensor name -> its shape as GGUF stores it (innermost dimension first)."""
        return {name: tuple(int(n) for n in t.shape) for name, t in self.tensors.items()}

    def tokenizer_keys(self) -> set[str]:
        """The metadata keys of the file's tokenizer: its vocabulary, merges, token types and special tokens (its chat
        template aside, which the reads do not tokenize by)."""
        return {key for key in self.reader.fields if key.startswith("tokenizer.ggml.")}

    def value(self, key: str) -> Any:
        field = self.reader.fields.get(key)
        return None if field is None else field.contents()

    def type_of(self, name: str) -> str:
        return self.tensors[name].tensor_type.name

    def file_type_name(self) -> str:
        """The file type as the quantizer takes it (``Q4_K_M``, ``F32``), from ``general.file_type``."""
        from gguf import LlamaFileType

        field = self.reader.fields.get("general.file_type")
        try:
            return LlamaFileType(int(field.contents())).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except (AttributeError, ValueError):  # no such key, or a code this gguf package does not know
            return "TYPE"


def write_hybrid(base: GGUFFile, source: GGUFFile, taken: set[str], target: Path) -> None:
    """``base`` written as ``target`` with the tensors ``taken`` copied from ``source``: every
    metadata key of ``base``, every tensor's raw blocks and ggml type as its file stores them."""
    from gguf import GGUFValueType, GGUFWriter

    writer = GGUFWriter(target, base.architecture)  # writes general.architecture itself
    for name, field in base.reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == "general.alignment":
            writer.add_custom_alignment(int(field.contents()))
            continue
        kind = field.types[0]
        writer.add_key_value(name, field.contents(), kind, sub_type=field.types[-1] if kind == GGUFValueType.ARRAY else None)
    for name in base.tensors:
        stored = (source if name in taken else base).tensors[name]
        writer.add_tensor(name, stored.data, raw_dtype=stored.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


class GGUFPair:
    """Two GGUF files of one model (checked: one architecture, the same tensor names and
    shapes) as a ``backends.hybrids.transformers.Pair``, each run with its own llama.cpp settings."""

    def __init__(self, original: str, candidate: str, settings: tuple[Settings, Settings], names: tuple[str, str] | None = None,
                 work_dir: str | None = None):
        self.names = names or (original, candidate)
        self.work_dir = work_dir  # where hybrids are written (--work-dir; None: the system's temporary folder)
        with as_reference():
            original_file = checked_file(original)
        self.files = {ORIGINAL: GGUFFile(original_file, "--reference", self.names[0]),
                      CANDIDATE: GGUFFile(checked_file(candidate), "--model", self.names[1])}
        self.settings = dict(zip((ORIGINAL, CANDIDATE), settings))
        mine, theirs = self.files[ORIGINAL], self.files[CANDIDATE]
        if mine.architecture != theirs.architecture:
            raise LongctxError(f"--reference {self.names[0]} is a GGUF of a {mine.architecture} model, --model {self.names[1]} "
                               f"of a {theirs.architecture} one: blame takes two GGUF files of one model")
        check_tensors(mine.shapes(), theirs.shapes(), *self.names, "two GGUF files")
        differs = next((key for key in sorted(mine.tokenizer_keys() | theirs.tokenizer_keys())
                        if mine.value(key) != theirs.value(key)), None)
        if differs:
            raise LongctxError(f"--model {self.names[1]}: tokenizes otherwise than --reference {self.names[0]} (its "
                               f"{differs} differs): blame reads the original, the candidate and every hybrid of the two "
                               "with the candidate's tokenizer, so the two must tokenize alike; blame the candidate against "
                               "the original it was made from")
        self.candidate = LlamaCppBackend.load(str(theirs.path), self.settings[CANDIDATE], name=self.names[1])
        self.tokenizer = self.candidate.tokenizer  # the GGUF's own; a hybrid holds its base's metadata, the same tokenizer
        self.tokenizers = (self.tokenizer, self.tokenizer)  # the original's metadata holds the same tokenizer (above)

    @property
    def cache_differs(self) -> bool:
        a, b = self.settings[ORIGINAL], self.settings[CANDIDATE]
        return (a.cache_type_k, a.cache_type_v) != (b.cache_type_k, b.cache_type_v)

    def parts(self, granularity: str) -> list[Part]:
        found = gguf_parts(self.files[CANDIDATE].tensors, granularity)
        return found + [Part(KV_CACHE, ())] if self.cache_differs else found

    def cost(self, parts: Iterable[Part]) -> Cost:
        names = [n for part in parts for n in part.parameters]
        mine, theirs = self.files[ORIGINAL].tensors, self.files[CANDIDATE].tensors
        return Cost(sum(int(mine[n].n_elements) for n in names), sum(int(mine[n].n_bytes) for n in names),
                    sum(int(theirs[n].n_bytes) for n in names))

    def unchanged(self, part: Part) -> bool:
        if part.name == KV_CACHE:
            return not self.cache_differs
        mine, theirs = self.files[ORIGINAL].tensors, self.files[CANDIDATE].tensors
        return all(mine[n].tensor_type == theirs[n].tensor_type and np.array_equal(mine[n].data, theirs[n].data)
                   for n in part.parameters)

    def non_finite(self, side: str) -> dict[str, str]:
        """Each tensor read back to floats by the ``gguf`` package (a type it cannot read is not checked)."""
        from gguf.quants import dequantize

        found = {}
        for name, tensor in self.files[side].tensors.items():
            try:
                values = dequantize(tensor.data, tensor.tensor_type)
            except NotImplementedError:
                continue
            if not np.isfinite(values).all():
                found[name] = non_finite_kind(bool(np.isnan(values).any()), bool(np.isinf(values).any()))
        return found

    def start(self, base: str, taken: Sequence[Part]) -> int:
        return 0  # see hybrid

    @contextmanager
    def hybrid(self, base: str, taken: Sequence[Part], label: str, reuse: bool = False) -> Iterator[Any]:
        # reuse: nothing to start from; llama.cpp runs every hybrid from the token ids (its API takes a batch of
        # tokens or input embeddings, never a layer's residual stream)
        other = other_side(base)
        settings = self.settings[base]
        if any(p.name == KV_CACHE for p in taken):
            theirs = self.settings[other]
            settings = replace(settings, cache_type_k=theirs.cache_type_k, cache_type_v=theirs.cache_type_v)
        tensors = {n for part in taken for n in part.parameters}
        if not tensors and base == CANDIDATE and settings == self.settings[CANDIDATE]:
            yield self.candidate
            return
        if not tensors:
            with closing(LlamaCppBackend.load(str(self.files[base].path), settings, name=label)) as backend:
                yield backend
            return
        with temporary_folder(self.work_dir, "longctx-blame-") as folder:
            path = folder / "hybrid.gguf"
            write_hybrid(self.files[base], self.files[other], tensors, path)
            with closing(LlamaCppBackend.load(str(path), settings, name=label)) as backend:
                yield backend  # freed before its folder is removed, so the file's blocks go back to the disk

    recipe_tool = "llama.cpp"

    def recipe(self, kept: Sequence[Part]) -> list[str]:
        """The ``llama-quantize`` command that makes the candidate with ``kept`` at the original's
        types (``recipe.py``), naming the original's file (not an alias: the tool takes files),
        and, as a shell comment after it, the original's cache types when the KV cache is kept."""
        mine, theirs = self.files[ORIGINAL], self.files[CANDIDATE]
        matrices = {p.name: [(n, mine.type_of(n)) for n in p.parameters if len(mine.tensors[n].shape) > 1] for p in kept}
        matrices = {name: found for name, found in matrices.items() if found}
        requantize = any(mine.type_of(n) not in FULL_PRECISION for n in mine.tensors)
        lines = quantize_arguments(matrices | self._pinned({n for found in matrices.values() for n, _ in found}),
                                   theirs.file_type_name(), str(mine.path), requantize)
        if any(p.name == KV_CACHE for p in kept):
            settings = self.settings[ORIGINAL]
            lines.append(f"# run fixed.gguf with the original's KV cache: --cache-type-k {settings.cache_type_k} "
                         f"--cache-type-v {settings.cache_type_v}")
        return lines

    def _pinned(self, kept: set[str]) -> dict[str, list[tuple[str, str]]]:
        """The candidate's own types, for the tensors outside ``kept`` whose type the quantizer
        chooses by position. A mix such as Q4_K_M gives some layers' ``attn_v`` and ``ffn_down``
        more bits, counting those tensors as it goes; a tensor given its type by ``--tensor-type``
        is not counted, so keeping one layer would move the choice of every later layer
        (SmolLM2's Q4_K_M with layer 18 kept: layers 20 to 26 swapped Q8_0 and Q5_0). Each
        tensor kind the candidate holds at more than one type is therefore pinned, outside the
        kept tensors, at the candidate's types; a kind held at one type is the same wherever the
        count lands."""
        theirs = self.files[CANDIDATE]
        kinds: dict[str, list[str]] = {}
        for name, tensor in theirs.tensors.items():
            if len(tensor.shape) > 1:
                kinds.setdefault(LAYER.sub(lambda m: f"blk.N.{m['stem']}.", name), []).append(name)
        return {f"pinned {kind}": [(n, theirs.type_of(n)) for n in names if n not in kept]
                for kind, names in kinds.items()
                if kept and len({theirs.type_of(n) for n in names}) > 1 and any(n not in kept for n in names)}


def load_pair(request: PairRequest) -> GGUFPair:
    """The pair ``--reference`` and ``--model`` name (files or aliases): the candidate run with
    ``request.options`` (``--backend-option``), the original with the same but for its KV cache types,
    which are part of the compression (llama.cpp's own f16 unless ``request.reference_options`` say
    otherwise), and with ``request.reference_options`` (``--reference-option``) over them; hybrids
    written in ``request.work_dir`` (``--work-dir``)."""
    mine = {k: v for k, v in backend_options(request.options).items() if k not in CACHE_OPTIONS}
    try:
        theirs = backend_options(request.reference_options)
    except LongctxError as exc:
        raise LongctxError(str(exc).replace("--backend-option", "--reference-option")) from None
    return GGUFPair(resolve_model(request.reference), resolve_model(request.model),
                    (parse_settings({**mine, **theirs}), parse_settings(backend_options(request.options))),
                    names=(request.reference, request.model), work_dir=request.work_dir)
