"""A model larger than one device: the transformers backend loaded with a device map
(``--backend-option device-map=auto``, ``max-memory=…``, ``offload-folder=…``) reads what the
model on one device reads. On the CPU the split is forced by a memory budget that fits only
part of the layers: the rest are offloaded to disk, and accelerate's hooks move every
weight in and out, as they move activations between GPUs."""
from __future__ import annotations

import numpy as np
import pytest
from kit.models import save_model, tiny_qwen3
from kit.needs import needs

from pytest_longctx.backends import load_backend
from pytest_longctx.backends.hf import TransformersBackend, loading_options
from pytest_longctx.errors import LongctxError

pytestmark = needs("accelerate", install="pip install accelerate")

VOCAB = 4096  # the embedding and the LM head take 512 KB each in float32, a layer about 40 KB


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> str:
    return str(save_model(tmp_path_factory.mktemp("tiny"), tiny_qwen3(VOCAB, layers=4)))


def reads(backend):
    ids = np.random.default_rng(0).integers(0, VOCAB, 500).tolist()
    positions = list(range(0, 499, 7))
    session = backend.session()
    first = session.advance(ids[:200], [p for p in positions if p < 200], [[ids[p + 1], 3] for p in positions if p < 200], top_k=4)
    rest = session.advance(ids[200:], [p - 200 for p in positions if p >= 200], [[ids[p + 1], 3] for p in positions if p >= 200], top_k=4)
    return first.top1 + rest.top1, np.array(first.logprobs + rest.logprobs), [t for r in (first, rest) for t in r.top]


def test_a_model_split_by_a_device_map_reads_what_it_reads_on_one_device(saved, tmp_path):
    plain = TransformersBackend.load(saved, dtype="float32", device="cpu")
    split, _ = load_backend(saved, "hf", "float32", "auto",
                            options=["device-map=auto", "max-memory=cpu:1100KB", f"offload-folder={tmp_path}"])
    assert set(split.model.hf_device_map.values()) == {"cpu", "disk"}  # the hooks' path: part of the layers on disk
    top1, logprobs, top = reads(split)
    want_top1, want_logprobs, want_top = reads(plain)
    assert top1 == want_top1
    assert np.max(np.abs(logprobs - want_logprobs)) <= 1e-6
    assert [ids for ids, _ in top] == [ids for ids, _ in want_top]
    assert np.max(np.abs(np.array([v for _, v in top]) - [v for _, v in want_top])) <= 1e-6
    # the same bits wherever they lie: the same weights fingerprint, placed elsewhere
    assert split.weights_fingerprint() == plain.weights_fingerprint()
    assert split.describe()["device"] == "cpu,disk" and plain.describe()["device"] == "cpu"


def test_a_device_map_that_fits_one_device_loads_there(saved):
    backend, _ = load_backend(saved, "hf", "float32", "auto", options=["device-map=auto"])
    assert {p.device.type for p in backend.model.parameters()} == {"cpu"}


def test_the_loading_options_read_as_accelerate_takes_them(tmp_path):
    assert loading_options({}) == {}
    assert loading_options({"device-map": "auto", "max-memory": "0:10GiB, 1:20GiB,cpu:30GiB"}) == {
        "device_map": "auto", "max_memory": {0: "10GiB", 1: "20GiB", "cpu": "30GiB"}}
    assert loading_options({"device-map": "balanced_low_0", "offload-folder": str(tmp_path)}) == {
        "device_map": "balanced_low_0", "offload_folder": str(tmp_path)}


@pytest.mark.parametrize(("options", "message"), [
    ({"device-map": "everywhere"}, "--backend-option device-map=everywhere: expected one of auto, balanced, balanced_low_0, sequential"),
    ({"max-memory": "0:10GiB"}, "--backend-option max-memory=0:10GiB: needs device-map=…"),
    ({"device-map": "auto", "max-memory": "gpu0=10GiB"}, "--backend-option max-memory=gpu0=10GiB: expected DEVICE:SIZE"),
    ({"device-map": "auto", "max-memory": "0:lots"}, "--backend-option max-memory=0:lots: expected DEVICE:SIZE"),
    ({"gpu-layers": "3"}, "--backend-option gpu-layers=3: the transformers backend has no option 'gpu-layers'"),
])
def test_a_bad_loading_option_is_one_line(options, message):
    with pytest.raises(LongctxError) as caught:
        loading_options(options)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_device_map_with_an_explicit_device_is_refused(saved):
    with pytest.raises(LongctxError, match="--device cpu with --backend-option device-map=auto: choose one"):
        load_backend(saved, "hf", "float32", "cpu", options=["device-map=auto"])
