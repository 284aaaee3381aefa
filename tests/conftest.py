"""The tests' fixtures and hooks: the Qwen3.5 tokenizer, tiny trained qwen3 models, hand-built data,
models and baselines saved for the gate, the planted GGUF pair. What tests import is in tests/kit/."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from kit.drawn import session
from kit.items import build_rows, write_split
from kit.models import degraded_model, save_model, trained_qwen3, training_sequences
from kit.needs import import_problem
from kit.runs import run_pytest, saved_scores

pytest_plugins = ["pytester"]


def pytest_configure(config: pytest.Config) -> None:
    """Import matplotlib's figures before any test runs. pytester runs the plugin in this process and
    afterwards drops every module that run imported. matplotlib, first imported inside such a run (the
    HTML report's plots), then came back as new Python modules beside C extensions that stay loaded,
    and the next report in this process failed ("Single argument to subplot must be a three-digit
    integer, not GridSpec(1, 1)[0:1, 0:1]": two SubplotSpec classes). Imported here, before any run, it
    is never dropped; where it is missing (or blocked, as test_optional_modules does) nothing is imported. The
    same holds for numpy's C extensions that scipy.stats loads (the gate's uncertainty), which cannot be loaded
    twice in one process ("cannot load module more than once per process"): a test module that imports nothing
    of the gate before its first in-process run would otherwise leave numpy.fft dropped for the tests after it."""
    for module in ("matplotlib.figure", "matplotlib.backends.backend_svg", "scipy.stats"):
        import_problem(module)
    if os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") != "1":
        # each of pytest-xdist's workers (and the gates it runs in subprocesses) computes on one thread: torch
        # otherwise starts a thread per core in every worker, and on a machine with as many cores as workers their
        # threads wait on each other
        os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    """Keep what the package caches (tokenizers, builtin data) out of the user's folders."""
    cache = os.environ.get("LONGCTX_TEST_CACHE") or str(tmp_path_factory.mktemp("longctx-cache"))
    if os.environ.get("PYTEST_XDIST_WORKER") and not os.environ.get("LONGCTX_TEST_CACHE"):
        # pytest-xdist's workers share the converted SmolLM2 and the tokenizer (each written whole, then renamed
        # into place), not the score and data caches, which tests expect to start empty
        shared = tmp_path_factory.getbasetemp().parent / "longctx-shared"
        for kind in ("models", "tokenizers"):
            (shared / kind).mkdir(parents=True, exist_ok=True)
            (Path(cache) / kind).symlink_to(shared / kind, target_is_directory=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LONGCTX_CACHE", cache)
        # the gates run inside the tests must not write into a real CI job's step summary
        patch.delenv("GITHUB_STEP_SUMMARY", raising=False)
        yield cache


@pytest.fixture(scope="session")
def qwen_tokenizer(_private_cache):
    from pytest_longctx.data.qwen import qwen35_tokenizer

    return qwen35_tokenizer()


@pytest.fixture(scope="session")
def rows(qwen_tokenizer):
    return build_rows(qwen_tokenizer, lengths=("2k", "8k"))


@pytest.fixture(scope="session")
def data_dir(rows, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bench")
    for (config, split), split_rows in rows.items():
        write_split(folder, config, split, split_rows)
    return folder


@pytest.fixture(scope="session")
def qwen_model(rows, qwen_tokenizer):
    return trained_qwen3(training_sequences(rows, qwen_tokenizer), len(qwen_tokenizer))


@pytest.fixture(scope="session")
def bpe_tokenizer(rows):
    """A small byte-level BPE tokenizer trained on the test texts: a model family whose
    tokenizer is not the benchmark's, scored in the text mode."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = [r[k] for split in rows.values() for r in split for k in ("text", "text_without_rule", "text_with_rule") if k in r]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    backend.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend)


@pytest.fixture(scope="session")
def bpe_model(rows, bpe_tokenizer):
    return trained_qwen3(training_sequences(rows, bpe_tokenizer), len(bpe_tokenizer))


@pytest.fixture(scope="session")
def sessions(qwen_tokenizer):
    """The first 96 builtin faithfulness sessions (standard and low-surprisal), as records."""
    from pytest_longctx.data.builtin.faithfulness import build_faithfulness
    from pytest_longctx.data.schema import parse_item

    return [parse_item("faithfulness", row, f"row {n}") for n, row in enumerate(build_faithfulness(seed=0, limit=96))]


@pytest.fixture(scope="session")
def reader(qwen_tokenizer):
    """What compressions are measured with when no model reads: the Qwen3.5 tokenizer."""
    from pytest_longctx.compress.evaluate import Reader

    return Reader.of(None, None)


@pytest.fixture(scope="module")
def gate_models(qwen_model, qwen_tokenizer, tmp_path_factory) -> dict[str, str]:
    """The reference model and a degraded copy (noise on every weight), saved as folders."""
    return {name: str(save_model(tmp_path_factory.mktemp(name), model, qwen_tokenizer))
            for name, model in (("reference", qwen_model), ("degraded", degraded_model(qwen_model)))}


@pytest.fixture(scope="module")
def gate_baseline(gate_models, data_dir, tmp_path_factory) -> Path:
    """The reference's baseline, made once the way the README says."""
    path = tmp_path_factory.mktemp("baselines") / "reference.json.gz"
    result = run_pytest(tmp_path_factory.mktemp("update"), "--longctx-model", gate_models["reference"], "--longctx-data",
                        str(data_dir), "--longctx-lengths", "2k", "--longctx-baseline", str(path), "--longctx-update-baseline")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"wrote baseline {path}" in result.stdout
    return path


@pytest.fixture(scope="module")
def every_kind(rows, gate_models, tmp_path_factory) -> tuple[Path, Path]:
    """(the test data with agent sessions beside it, every set kind at 2k; the reference model's baseline of it)."""
    folder = tmp_path_factory.mktemp("every-kind")
    for (config, split), split_rows in rows.items():
        write_split(folder, config, split, split_rows)
    write_split(folder, "faithfulness", "train", [session(n) for n in range(3)], fmt="jsonl")
    baseline = folder / "reference.json.gz"
    result = run_pytest(tmp_path_factory.mktemp("update"), "--longctx-model", gate_models["reference"], "--longctx-data",
                        str(folder), "--longctx-lengths", "2k", "--longctx-baseline", str(baseline), "--longctx-update-baseline")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return folder, baseline


@pytest.fixture(scope="session")
def gguf_vocab() -> int:
    """The size of SmolLM2's vocabulary, which the tiny GGUF files take with its tokenizer."""
    from pytest_longctx.backends.aliases import smollm2_gguf
    from pytest_longctx.backends.llama_cpp.backend import LlamaCppBackend

    return len(LlamaCppBackend.load(smollm2_gguf()).tokenizer)


@pytest.fixture(scope="module")
def planted_gguf(gguf_vocab, tmp_path_factory) -> tuple[Path, Path]:
    """The planted GGUF pair (kit.gguf.planted_pair): layers 1 and 3 damaged and stored as Q8_0 in the candidate."""
    from kit.gguf import planted_pair

    return planted_pair(tmp_path_factory.mktemp("gguf"), gguf_vocab)


@pytest.fixture(scope="module")
def tiny_loaded(qwen_tokenizer):
    """A tiny random qwen3 model as a loaded backend, to hand to runs in this process (what such a test checks is what
    a run says or writes, not how a model loads): ``(backend, tokenizer)``, as ``load_backend`` returns."""
    from kit.models import tiny_qwen3

    from pytest_longctx.backends.hf import TransformersBackend

    return TransformersBackend(tiny_qwen3(len(qwen_tokenizer)), qwen_tokenizer), qwen_tokenizer


@pytest.fixture(scope="module")
def tiny_data(qwen_tokenizer, tmp_path_factory) -> Path:
    """facts at 1k: 2 items."""
    folder = tmp_path_factory.mktemp("tiny-data")
    write_split(folder, "facts", "1k", build_rows(qwen_tokenizer, ("1k",))[("facts", "1k")])
    return folder


@pytest.fixture(scope="module")
def tiny_baseline(tiny_loaded, tiny_data, tmp_path_factory) -> Path:
    """The tiny model's own baseline over ``tiny_data`` (``longctx score --save_scores``): gated against it, it passes."""
    return saved_scores(tiny_loaded, tiny_data, tmp_path_factory.mktemp("tiny-baseline") / "b.json.gz")
