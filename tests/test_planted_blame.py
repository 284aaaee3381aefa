"""The planted-damage study (benchmarks/planted_blame.py): each variant's damage sits where it
is said to, and the study's check says MISSED when blame names other parts."""
from __future__ import annotations

from kit.models import tiny_llama
from kit.needs import needs

pytestmark = needs("torch", "transformers", install='pip install -e ".[hf]"')


def planted_llama():
    """A tiny llama deep enough for the layers the study damages (7, 12, 21), its LM head tied to the embeddings."""
    return tiny_llama(64, layers=22, heads=2, kv_heads=1, context=2048)


def weights(model) -> dict:
    """A copy of every tensor of ``model``'s state dict."""
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def test_int2_sits_in_layers_7_and_21_and_int8_everywhere_else():
    import torch

    from planted_blame import PLANTED
    from variants import rounded

    model = planted_llama()
    before = weights(model)
    PLANTED[0].damage(model)
    after = weights(model)
    for name, weight in before.items():
        if "layers." in name and name.endswith("proj.weight"):
            hard = name.startswith(("model.layers.7.", "model.layers.21."))
            expected = rounded(weight, 2, 64) if hard else rounded(weight, 8, None)
            assert torch.equal(after[name], expected), name
            assert len(torch.unique(after[name][0, :64])) <= (4 if hard else 256)
        else:  # embeddings (tied head) and norms: untouched
            assert torch.equal(after[name], weight), name


def test_the_attention_variant_changes_layer_12s_attention_projections_only():
    import torch

    from planted_blame import ATTENTION, PLANTED
    from variants import rounded

    model = planted_llama()
    before = weights(model)
    PLANTED[1].damage(model)
    after = weights(model)
    assert [n for n in before if not torch.equal(before[n], after[n])] == list(ATTENTION)
    assert all(torch.equal(after[n], rounded(before[n], 2, 64)) for n in ATTENTION)


def test_the_check_says_missed_when_other_parts_are_blamed():
    from planted_blame import check

    def part(name, restore, damage):
        return {"part": name, "shares": {"row": {"restore_far": restore, "damage_far": damage}}}

    found = {"passed": False, "parts": [part("layer.3", 0.6, 0.5), part("layer.7", 0.3, 0.4), part("layer.21", 0.2, 0.1)],
             "fix_set": {"parts": ["layer.3", "layer.7"], "fixed": True}, "verification": {"passed": True}}
    claims = check(found, frozenset({"layer.7", "layer.21"}))
    assert [holds for _, holds, _ in claims] == [False, False, False]
    assert "layer.21 #3" in claims[0][2]
    found["parts"][0] = part("layer.3", 0.1, 0.0)
    found["fix_set"]["parts"] = ["layer.7", "layer.21"]
    assert [holds for _, holds, _ in check(found, frozenset({"layer.7", "layer.21"}))] == [True, True, True]
    assert check({"passed": True}, frozenset({"layer.7"}))[0][1] is False
