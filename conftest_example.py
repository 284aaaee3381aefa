"""Wiring pytest-longctx into your own tests: an example conftest.py.

Copy the parts you need into the conftest.py at the root of your repository: the
generated tests are collected at the root of the test tree (``longctx::...``), so only
fixtures defined there reach them. Run as usual:

    pytest --longctx-model my-org/my-model --longctx-baseline baselines/my-model.json.gz
"""
from __future__ import annotations

import pytest


def quantize_int8_(model) -> None:
    """Round every linear weight to 8 bits per output channel, in place (a stand-in for
    whatever your compression toolkit does to the model object)."""
    import torch

    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                weight = module.weight
                scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127
                weight.copy_(torch.round(weight / scale).clamp(-127, 127) * scale)


@pytest.fixture(scope="session")
def longctx_backend(longctx_run):
    """Hand the gate a model object you loaded (and compressed) yourself, instead of an id.

    The generated tests score whatever this fixture returns: anything with
    ``read(ids, positions, tokens)``; the transformers backend wraps a loaded model.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pytest_longctx.backends.aliases import resolve_model
    from pytest_longctx.backends.hf import TransformersBackend

    name = longctx_run.options.model  # --longctx-model as given (getoption("longctx_model") is a list: it repeats)
    path = resolve_model(name)  # aliases such as smollm2-135m; ids and folders unchanged
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    quantize_int8_(model)
    return TransformersBackend(model, tokenizer, name=f"{name} (int8 weights)")


# A custom threshold, in any test module (e.g. tests/test_longctx_custom.py): the scored
# results are a fixture too. ``rows`` are the model's headline rows, ``baseline_rows``
# the baseline's, ``sets`` every metric, ``verdicts`` the gate's checks.
def test_distant_tool_calls_stay_above_half(longctx_results):
    rows = {name: value for name, value in longctx_results.rows.items() if name.startswith("Distant tool calls")}
    if not rows:
        pytest.skip("tool_calls is not selected")
    for name, value in rows.items():
        assert value is not None and value >= 0.5, f"{name}: {value}"
