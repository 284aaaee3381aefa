"""Models and backends that cannot give real log-probabilities, and model folders that would
run their own code: each is one clear line, and nothing untrusted runs (issue 21)."""
from __future__ import annotations

import copy
import io
import json
import math
import os
from pathlib import Path

import pytest
from kit.items import write_split
from kit.models import save_model, tiny_qwen3
from kit.needs import needs

from pytest_longctx.backends import load_backend
from pytest_longctx.backends.base import ReadResult
from pytest_longctx.backends.hf import TransformersBackend
from pytest_longctx.cli import main
from pytest_longctx.data.load import load_dataset
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.run_options import read_options
from pytest_longctx.options.table import PYTEST, taken_by
from pytest_longctx.scoring import engine
from pytest_longctx.scoring.modes import plan_reads

pytestmark = needs("transformers", install='pip install -e ".[hf]"')

VOCAB = 100  # far fewer ids than the Qwen3.5 ids the test data stores


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = [line for line in capsys.readouterr().err.strip().splitlines() if line.startswith("longctx: error")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def small_folder(tmp_path_factory) -> str:
    """A tiny model of VOCAB ids, saved without tokenizer files."""
    return str(save_model(tmp_path_factory.mktemp("small"), tiny_qwen3(VOCAB)))


@pytest.fixture(scope="module")
def custom_code(small_folder, tmp_path_factory):
    """(folder, marker): a model folder whose config names its own Python code (auto_map),
    which writes ``marker`` when it is imported."""
    import shutil

    folder = tmp_path_factory.mktemp("custom") / "custom_model"
    shutil.copytree(small_folder, folder)
    marker = folder.parent / "RAN"
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="custom_qwen3", auto_map={"AutoConfig": "modeling_custom.CustomConfig",
                                                       "AutoModelForCausalLM": "modeling_custom.CustomModel"})
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "modeling_custom.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
        "from transformers import Qwen3Config, Qwen3ForCausalLM\n"
        "class CustomConfig(Qwen3Config):\n    model_type = 'custom_qwen3'\n"
        "class CustomModel(Qwen3ForCausalLM):\n    config_class = CustomConfig\n")
    return str(folder), marker


# --------------------------------------------------------------- 1. untrusted code


def test_a_model_with_its_own_code_is_refused_and_nothing_is_asked_or_run(custom_code, data_dir, monkeypatch, capsys):
    folder, marker = custom_code
    stdin = io.StringIO("y\ny\ny\n")  # what `echo y | longctx score` gives
    monkeypatch.setattr("sys.stdin", stdin)
    code = main(["score", "--model", folder, "--data", str(data_dir), "--sets", "facts", "--lengths", "2k", "--quiet"])
    line = error_line(capsys)
    assert code == 2 and not marker.exists()
    assert stdin.tell() == 0, "something read stdin"
    assert f"--model {folder}: the model needs its own Python code" in line
    assert "--longctx-trust-remote-code (longctx score: --trust-remote-code)" in line


def test_the_plugin_refuses_it_too(custom_code, data_dir, pytester):
    folder, marker = custom_code
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", f"--longctx-model={folder}", f"--longctx-data={data_dir}", "--longctx-sets=facts",
        "--longctx-lengths=2k", "--longctx-limit=1", "--longctx-update-baseline",
        f"--longctx-baseline={pytester.path / 'b.json.gz'}")
    assert not marker.exists()
    assert "the model needs its own Python code" in result.stdout.str() and "--longctx-trust-remote-code" in result.stdout.str()


def test_trust_remote_code_reaches_transformers_only_when_asked(small_folder, monkeypatch):
    """The option is passed down as asked, and every load says it explicitly (so nothing prompts)."""
    import transformers

    seen = []

    def record(*args, **kwargs):
        seen.append(kwargs.get("trust_remote_code", "not given"))
        raise ValueError("stop here")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", record)
    for trust in (False, True):
        with pytest.raises(LongctxError):
            load_backend(small_folder, "hf", trust_remote_code=trust)
    assert seen == [False, True]


def made(model, dtype, device):
    return LogitsBackend()


def test_the_options_carry_it_and_a_factory_that_cannot_take_it_says_so():
    defaults = {option.plugin_dest: None for option in taken_by(PYTEST)}
    options = read_options(lambda dest: True if dest == "longctx_trust_remote_code" else defaults[dest], lambda _: None, "-")
    assert options.trust_remote_code is True
    assert read_options(defaults.get, lambda _: None, "-").trust_remote_code is False
    with pytest.raises(LongctxError, match="runs no model code of its own, so --trust-remote-code does not apply"):
        load_backend("x", f"{__name__}:made", trust_remote_code=True)


@pytest.fixture(scope="module")
def builtin_type_own_code(custom_code, tmp_path_factory):
    """(folder, marker): the custom_code folder, its config naming its own code (auto_map) under a
    model_type transformers has built in (qwen3), which transformers would load without a word."""
    import shutil

    folder = tmp_path_factory.mktemp("builtin-type") / "own_code"
    shutil.copytree(custom_code[0], folder)
    marker = folder.parent / "RAN"
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "qwen3"
    (folder / "config.json").write_text(json.dumps(config))
    code = (folder / "modeling_custom.py").read_text().replace(str(custom_code[1]), str(marker))
    (folder / "modeling_custom.py").write_text(code)
    return str(folder), marker


def test_own_code_under_a_model_type_transformers_knows_is_refused_too(builtin_type_own_code, data_dir, capsys):
    """docs/backends.md: a model whose config names its own code is refused, whatever its model_type;
    scored with the built-in class instead, the gate would judge another model than the one shipped."""
    folder, marker = builtin_type_own_code
    code = main(["score", "--model", folder, "--data", str(data_dir), "--sets", "facts", "--lengths", "2k", "--quiet"])
    line = error_line(capsys)
    assert code == 2 and not marker.exists()
    assert f"--model {folder}: the model needs its own Python code (auto_map in its config)" in line
    assert "--longctx-trust-remote-code (longctx score: --trust-remote-code)" in line
    assert "model_type 'qwen3' is also built into transformers" in line


def test_with_trust_remote_code_that_model_runs_its_own_code(builtin_type_own_code):
    folder, marker = builtin_type_own_code
    backend, _ = load_backend(folder, "hf", trust_remote_code=True)
    assert marker.exists() and type(backend.model).__name__ == "CustomModel"


@needs("llmlingua", install='pip install -e ".[llmlingua]"')
def test_the_llmlingua_adapter_does_not_run_a_models_code(custom_code):
    from pytest_longctx.compress.adapters import llmlingua

    folder, marker = custom_code
    found = llmlingua._load(folder, "cpu")  # LLMLingua's own default would run it unasked
    assert isinstance(found, RuntimeError) and "needs its own Python code" in str(found)
    assert not marker.exists()


def offload_error(folder: str, offload: Path) -> str:
    """The line loading ``folder`` gives with its layers pushed to disk, into ``offload``."""
    with pytest.raises(LongctxError) as exc:
        load_backend(folder, "hf", "float32", "auto",
                     options=["device-map=auto", "max-memory=cpu:20KB", f"offload-folder={offload}"])
    return str(exc.value)


@needs("accelerate", install='pip install -e ".[hf]"')
def test_an_offload_folder_inside_a_file_names_the_option(small_folder, tmp_path):
    """Not a raw OSError under "cannot load it" with an offline hint: the option, and what is wrong with it."""
    (tmp_path / "a-file").write_text("")
    offload = tmp_path / "a-file" / "offload"
    message = offload_error(small_folder, offload)
    assert message.startswith(f"--backend-option offload-folder={offload}: not a folder this process can write (")
    assert "offline" not in message and "cannot load it" not in message and "\n" not in message


@needs("accelerate", install='pip install -e ".[hf]"')
@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into a folder of mode 0500")
def test_an_offload_folder_without_write_permission_names_the_option(small_folder, tmp_path):
    offload = tmp_path / "read-only"
    offload.mkdir(mode=0o500)
    message = offload_error(small_folder, offload)
    assert message.startswith(f"--backend-option offload-folder={offload}: not a folder this process can write (")
    assert "Permission denied" in message and "offline" not in message


# --------------------------------------------------------------- 2. log-probabilities above 0


class LogitsBackend:
    """Returns raw logits (+5.0) where log-probabilities belong."""

    tokenizer = None

    def read(self, ids, positions, tokens):
        return ReadResult([0] * len(positions), [[5.0] * len(t) for t in tokens])


class TopLogitsBackend:
    """Real log-probabilities for the tokens asked for, logits among its top-k."""

    tokenizer = None

    def read(self, ids, positions, tokens, top_k=0):
        top = [([0, 1], [3.0, 2.0]) for _ in positions] if top_k else None
        return ReadResult([0] * len(positions), [[-1.0] * len(t) for t in tokens], top)


class Session:
    def __init__(self, values):
        self.values = values

    def advance(self, ids, positions, tokens, top_k=0):
        return ReadResult([0] * len(positions), [[self.values] * len(t) for t in tokens])

    def snapshot(self):
        return None

    def restore(self, snapshot, last=False):
        pass


class SessionBackend:
    """Read through sessions (the prefix tree), answering ``values`` everywhere."""

    tokenizer = None

    def __init__(self, values):
        self.values = values

    def read(self, ids, positions, tokens):
        return self.session().advance(ids, positions, tokens)

    def session(self):
        return Session(self.values)


@pytest.fixture(scope="module")
def facts_plans(data_dir):
    return plan_reads(load_dataset(data_dir, sets=["facts"], lengths=["2k"]), "ids")


@pytest.mark.parametrize("backend, where", [
    (LogitsBackend(), "LogitsBackend: read()"),
    (SessionBackend(5.0), "SessionBackend: session().advance()"),
    (TopLogitsBackend(), "TopLogitsBackend: read()"),
])
def test_log_probabilities_above_zero_are_refused(backend, where, facts_plans):
    with pytest.raises(LongctxError) as exc:
        engine.run(backend, facts_plans, top_k=2)
    message = str(exc.value)
    assert "\n" not in message and f"backend {where} returned" in message
    assert "item facts/2k/f0" in message and "at read position" in message
    assert "log-probabilities must be <= 0" in message and "logits" in message
    if isinstance(backend, TopLogitsBackend):
        assert "returned 3 as the log-probability of token 0" in message and "top-k" in message


def test_zero_a_hair_above_it_and_nan_pass(facts_plans):
    """Rounding a hair above 0 is no error; NaN is left to the candidate's checks, as before."""
    for value in (0.0, 5e-5, math.nan, -math.inf):
        scores = engine.run(SessionBackend(value), facts_plans)
        first = scores[0][0][0].logprob
        assert first == value or (math.isnan(value) and math.isnan(first))


def test_the_cli_says_it_in_one_line(data_dir, capsys, tmp_path):
    out = tmp_path / "r.json"
    code = main(["score", "--model", "x", "--backend", f"{__name__}:made", "--data", str(data_dir), "--sets", "facts",
                 "--lengths", "2k", "--quiet", "--out", str(out)])
    assert code == 2 and "log-probabilities must be <= 0" in error_line(capsys) and not out.exists()


# --------------------------------------------------------------- 3. vocabulary


class Counting(TransformersBackend):
    calls = 0

    def session(self):
        Counting.calls += 1
        return super().session()


def test_ids_beyond_the_models_vocabulary_are_one_line_before_any_forward_pass(facts_plans):
    backend = Counting(tiny_qwen3(VOCAB))
    with pytest.raises(LongctxError) as exc:
        engine.run(backend, facts_plans)
    assert backend.vocab_size == VOCAB
    first = facts_plans[0]  # f0: its one text, fed up to its last read, and the tokens read there
    last = max(read.pos for target in first.every for read in target.reads)
    largest = int(first.sequences[0][: last + 1].max())
    message = str(exc.value)
    assert message.startswith(f"item facts/2k/f0 needs token id {largest}, beyond the model's vocabulary of {VOCAB} tokens")
    assert "text mode" in message and Counting.calls == 0


def test_a_text_mode_tokenizer_beyond_the_models_vocabulary_names_the_tokenizer(small_folder, qwen_tokenizer, data_dir,
                                                                                  tmp_path, capsys):
    """In text mode the ids are the tokenizer's own: the line must not say to use text mode."""
    import shutil

    folder = tmp_path / "cut-vocabulary"
    shutil.copytree(small_folder, folder)
    qwen_tokenizer.save_pretrained(folder)  # ids far beyond the model's VOCAB rows
    assert main(["score", "--model", str(folder), "--mode", "text", "--data", str(data_dir), "--sets", "facts",
                 "--lengths", "2k", "--quiet", "--cache-dir", "off"]) == 2
    line = error_line(capsys)
    assert f"beyond the model's vocabulary of {VOCAB} tokens: the text mode's tokenizer makes ids the model has no " in line
    assert "load the model with the tokenizer it was trained with" in line and "score such a model in text mode" not in line


# --------------------------------------------------------------- 4. dtype


def test_a_dtype_the_backend_cannot_load_is_not_blamed_on_the_weights(small_folder, data_dir, capsys):
    code = main(["score", "--model", small_folder, "--dtype", "int8", "--data", str(data_dir), "--sets", "facts",
                 "--lengths", "2k", "--quiet"])
    line = error_line(capsys)
    assert code == 2 and "damaged" not in line
    assert "--dtype: expected one of auto, float32, bfloat16, float16 (given 'int8')" in line
    with pytest.raises(LongctxError, match="--dtype int8: the transformers backend loads weights as one of auto, float32"):
        load_backend(small_folder, dtype="int8")


def test_weights_files_that_leave_tensors_unfilled_are_refused_not_read_at_random(small_folder, data_dir, tmp_path, capsys):
    """transformers loads a model whose weights files lack some of its tensors with those tensors random and only
    logs it (a quantization library that did not take a layer format leaves the same holes): the gate would judge a
    model nobody made. One line naming the tensors, before any forward pass."""
    import shutil

    from safetensors.numpy import load_file, save_file

    holed = tmp_path / "holed"
    shutil.copytree(small_folder, holed)
    tensors = load_file(holed / "model.safetensors")
    dropped = sorted(name for name in tensors if ".layers.1.mlp." in name)
    save_file({k: v for k, v in tensors.items() if k not in dropped}, holed / "model.safetensors", metadata={"format": "pt"})
    code = main(["score", "--model", str(holed), "--data", str(data_dir), "--sets", "facts", "--lengths", "2k", "--quiet"])
    line = error_line(capsys)
    assert code == 2 and len(dropped) == 3
    assert (f"--model {holed}: {holed}/model.safetensors lacks {', '.join(dropped)}, which the other layers hold: the file "
            "is incomplete (cut short, or tensors deleted from it); loaded, they would hold random values and the gate would "
            "judge a model nobody made: re-download or re-save the model") in line
    TransformersBackend.load(small_folder, dtype="float32", device="cpu")  # the whole folder loads


def test_a_local_folder_that_does_not_load_gets_no_hint_about_hub_ids(small_folder, tmp_path):
    """The offline hint (only local folders and cached models load) is for a hub id; a local folder's line says
    what is wrong with it alone."""
    import shutil

    folder = tmp_path / "unknown-type"
    shutil.copytree(small_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "frobnicated"}))
    with pytest.raises(LongctxError) as exc:
        load_backend(str(folder), "hf", "float32", "cpu")
    assert str(exc.value).startswith(f"--model {folder}: cannot load it: ")
    assert "frobnicated" in str(exc.value) and "offline" not in str(exc.value) and "Hugging Face cache" not in str(exc.value)


def test_a_hub_id_that_does_not_load_offline_gets_the_offline_hint(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # read once, on import: no connection is tried
    with pytest.raises(LongctxError) as exc:  # said before anything loads
        load_backend("nobody-here/no-such-model", "hf", "float32", "cpu")
    assert str(exc.value) == ("--model nobody-here/no-such-model: HF_HUB_OFFLINE=1 (offline), and the Hugging Face cache "
                              "does not hold this model; download it where there is a network (or unset the variable), or "
                              "give its local folder")
    from pytest_longctx.backends.hf import load_pretrained

    with pytest.raises(LongctxError) as exc:  # and where the loader meets it (no network, the variable unset)
        load_pretrained("nobody-here/no-such-model", dtype="float32", device="cpu")
    assert str(exc.value).startswith("--model nobody-here/no-such-model: cannot load it: ")
    assert str(exc.value).endswith(" (offline: only local folders, .gguf files and models already in the Hugging Face cache "
                                   "load)")


def test_a_folder_whose_model_sits_one_level_down_names_that_folder(small_folder, data_dir, tmp_path, capsys):
    """auto-round's quantize_and_save writes its checkpoint into a folder named for the model inside the one given (with
    the tokenizer beside it when saved there): pointed at the outer folder, transformers said only that a config.json
    lacks a model_type."""
    import shutil

    inner = tmp_path / "out" / "model-w4g32"
    shutil.copytree(small_folder, inner)
    (tmp_path / "out" / "tokenizer_config.json").write_text("{}")
    code = main(["score", "--model", str(tmp_path / "out"), "--data", str(data_dir), "--sets", "facts", "--lengths", "2k",
                 "--quiet"])
    assert code == 2
    assert error_line(capsys) == (f"longctx: error: --model {tmp_path / 'out'}: no config.json in this folder; {inner} holds a "
                                  "model: give that folder as the model")


# --------------------------------------------------------------- 5. no tokenizer files


def test_a_folder_without_tokenizer_files_is_one_line_not_an_empty_baseline(small_folder, data_dir, tmp_path, capsys):
    saved = tmp_path / "b.json.gz"
    args = ["--model", small_folder, "--data", str(data_dir), "--sets", "facts", "--lengths", "2k", "--quiet",
            "--save-scores", str(saved)]
    assert main(["score", "--mode", "text", *args]) == 2
    line = error_line(capsys)
    assert f"--mode text: {small_folder} has no tokenizer files (tokenizer.json / tokenizer_config.json" in line
    assert "use --mode ids" in line
    # auto: without a tokenizer it is the ids mode, which this vocabulary cannot take
    assert main(["score", *args]) == 2
    assert f"beyond the model's vocabulary of {VOCAB} tokens" in error_line(capsys)
    assert not saved.exists()


# --------------------------------------------------------------- 6. spans that do not hold their text


@pytest.mark.parametrize("config, change, field", [
    ("facts", lambda item: item["targets"][1].update(answer=" 00000."), "targets[1], field 'answer_char'"),
    ("facts", lambda item: item["targets"][0].update(fact_char=[item["targets"][0]["fact_char"][0] + 1,
                                                                item["targets"][0]["fact_char"][1] + 1]),
     "targets[0], field 'fact_char'"),
])
def test_a_span_that_does_not_hold_its_text_is_refused_on_load(rows, tmp_path, config, change, field):
    items = copy.deepcopy(rows[(config, "2k")])
    change(items[1])
    path = write_split(tmp_path, config, "2k", items)
    with pytest.raises(LongctxError) as exc:
        load_dataset(tmp_path)
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith(f"{path}, row 1 (id {items[1]['id']}), {field}: span [")
    assert "fix the span or the" in message
