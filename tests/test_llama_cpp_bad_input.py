"""Bad input to the llama.cpp backend is one line naming the file or option and what to do:
a missing, foreign or damaged .gguf, an unknown option or value, llama-cpp-python missing."""
from __future__ import annotations

import sys
import textwrap

import pytest
from kit.needs import needs, needs_smollm2

from pytest_longctx.backends import builtin, load_backend
from pytest_longctx.cli import main
from pytest_longctx.errors import LongctxError

needs_llama = needs("llama_cpp", install="pip install 'pytest-longctx[llama]'")


def error_of(model: str, options=(), backend: str = "llama.cpp", **kwargs) -> str:
    with pytest.raises(LongctxError) as raised:
        load_backend(model, backend, options=list(options), **kwargs)
    message = str(raised.value)
    assert "\n" not in message
    return message


@pytest.fixture
def fake_gguf(tmp_path):
    """A file that starts as a GGUF file does and holds nothing else."""
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(60))
    return path


@pytest.mark.parametrize("options, expected", [
    (["cache-typ-k=q8_0"], "--backend-option cache-typ-k=q8_0: the llama.cpp backend has no option 'cache-typ-k' (did you mean "
                           "cache-type-k?); it takes "
                           "cache-type-k, cache-type-v, flash-attn, threads, batch-size, ubatch-size, gpu-layers"),
    (["cache-type-k=q3"], "--backend-option cache-type-k=q3: expected one of f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1"),
    (["threads=0"], "--backend-option threads=0: must be at least 1"),
    (["batch-size=many"], "--backend-option batch-size=many: expected a whole number"),
    (["flash-attn=yes"], "--backend-option flash-attn=yes: expected one of auto, off, on"),
    (["batch-size=64", "ubatch-size=128"], "--backend-option ubatch-size=128: larger than batch-size=64"),
    (["cache-type-v=q4_0", "flash-attn=off"], "--backend-option cache-type-v=q4_0: llama.cpp quantizes the V cache only with "
                                              "flash attention"),
    (["threads"], "--backend-option 'threads': expected KEY=VALUE"),
    (["threads=1", "threads=2"], "--backend-option threads: given twice"),
])
def test_a_bad_backend_option_is_one_line(options, expected, fake_gguf):
    assert expected in error_of(str(fake_gguf), options)


def test_other_dtypes_and_devices_are_refused(fake_gguf):
    assert "--dtype float16: the llama.cpp backend computes in the .gguf file's own types" in error_of(str(fake_gguf), dtype="float16")
    assert "--device tpu: the llama.cpp backend takes auto, cpu or cuda" in error_of(str(fake_gguf), device="tpu")
    assert "--device cpu with --backend-option gpu-layers=4: choose one" in error_of(str(fake_gguf), ["gpu-layers=4"], device="cpu")


def test_a_backend_without_options_says_so(fake_gguf, monkeypatch):
    monkeypatch.setitem(builtin.FACTORIES, "plain", lambda model, dtype, device: None)
    assert error_of(str(fake_gguf), ["threads=2"], backend="plain") == "--backend plain: takes no --backend-option (given: threads)"
    assert error_of(str(fake_gguf), ["threads=2"], backend="hf").startswith(
        "--backend-option threads=2: the transformers backend has no option 'threads'")


def test_a_missing_file_a_folder_and_a_foreign_file(tmp_path):
    assert error_of(str(tmp_path / "absent.gguf")).endswith("absent.gguf: no such .gguf file")
    assert "a folder; the llama.cpp backend reads one .gguf file" in error_of(str(tmp_path))
    foreign = tmp_path / "weights.gguf"
    foreign.write_bytes(b"PK\x03\x04 not a gguf")
    assert "is not a GGUF file (it does not begin with 'GGUF')" in error_of(str(foreign))


def test_without_llama_cpp_python_the_line_says_what_to_install(fake_gguf, monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    assert error_of(str(fake_gguf)) == ("the llama.cpp backend needs llama-cpp-python: pip install 'pytest-longctx[llama]' "
                                        "(it builds llama.cpp from source, a few minutes)")


@needs_llama
@needs_smollm2
def test_a_truncated_or_damaged_gguf_names_the_file_and_what_llama_cpp_said(fake_gguf, tmp_path):
    from pytest_longctx.backends.aliases import smollm2_gguf

    with open(smollm2_gguf(), "rb") as handle:
        head = handle.read(4 << 20)
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(head)  # the header and the first tensors, the rest cut off
    for path in (truncated, fake_gguf):
        message = error_of(str(path))
        assert message.startswith(f"--model {path}: llama.cpp cannot load it (")
        assert "no reason given" not in message and "re-download or re-convert it" in message


@needs_llama
@needs_smollm2
def test_the_command_line_takes_backend_options_and_reports_a_bad_one(data_dir, capsys):
    assert main(["score", "--model", "smollm2-135m-gguf", "--backend", "llama.cpp", "--backend-option", "cache-type-k=q3",
                 "--data", str(data_dir), "--sets", "facts", "--lengths", "2k", "--limit", "1", "--quiet"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("longctx: error: --backend-option cache-type-k=q3: expected one of f32")


@needs_llama
@needs_smollm2
def test_the_plugin_takes_backend_options_and_fails_the_gate_with_a_bad_one(pytester, data_dir):
    pytester.makepyfile(test_nothing=textwrap.dedent("""
        def test_nothing():
            pass
        """))
    done = pytester.runpytest_subprocess("--longctx-only", "--longctx-model=smollm2-135m-gguf", "--longctx-backend=llama.cpp",
                                         "--longctx-backend-option=cache-type-v=q4_0", "--longctx-backend-option=flash-attn=off",
                                         f"--longctx-data={data_dir}", "--longctx-sets=facts", "--longctx-lengths=2k",
                                         "--longctx-limit=1", "--longctx-update-baseline", "--longctx-baseline=new.json.gz",
                                         "-p", "no:cacheprovider")
    assert done.ret == pytest.ExitCode.USAGE_ERROR  # settings that cannot work: refused before any item is read
    failed = [line for line in done.stdout.lines if "llama.cpp quantizes the V cache only with flash attention" in line]
    assert failed, done.stdout.str()[-3000:]


def test_the_default_physical_batch_never_exceeds_the_call():
    from pytest_longctx.backends.llama_cpp.settings import parse_settings

    assert parse_settings({"batch-size": "64"}).ubatch_size == 64
    assert parse_settings({"batch-size": "4096"}).ubatch_size == 512
    assert parse_settings({}).flash is False and parse_settings({"cache-type-v": "q4_0"}).flash is True
