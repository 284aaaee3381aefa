"""One model's residual stream at its decoder layer boundaries, recorded while it scores, from which
blame starts a transformers hybrid whose first layers compute as that model's do (``Boundaries``), and
whether a model's layers allow it (``reusable``)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator


def reusable(model: Any) -> bool:
    """Whether blame can start ``model``'s hybrids from a layer boundary: a decoder with ``layers`` and
    ``norm`` whose every layer attends fully (a plain KV cache, whose length a stand-in can keep)."""
    decoder = getattr(model, "get_decoder", lambda: None)()
    kinds = set(getattr(model.config.get_text_config(), "layer_types", None) or ["full_attention"])
    return decoder is not None and hasattr(decoder, "layers") and hasattr(decoder, "norm") and kinds == {"full_attention"}


class Boundaries:
    """One model's residual stream at layer boundaries, per forward call of one scoring: boundary j is
    the input of decoder layer j (the number of layers: the input of the final norm), kept at every
    ``every``-th layer and at the end. ``recording()`` keeps them while the model scores; ``starting(b)``
    runs the model from boundary b on, call by call in the recorded order (the same items, the same
    engine): layers 0..b-1 are stand-ins that keep their KV cache's length with zero-stride views
    (no memory) and return the recorded stream. Counts the token-layers skipped."""

    def __init__(self, model: Any, every: int = 1):
        decoder = model.get_decoder()
        self.model, self.layers, self.norm = model, decoder.layers, decoder.norm
        count = len(self.layers)
        self.kept = sorted(set(range(every, count, every)) | {count})
        self.calls: list[dict[int, Any]] = []
        self.skipped = 0  # token-layers handed over instead of computed

    def start(self, layer: int) -> int:
        """The boundary a hybrid whose first changed layer is ``layer`` starts from (0: none kept below)."""
        return max((b for b in self.kept if b <= layer), default=0) if self.calls else 0

    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for call in self.calls for t in call.values())

    @contextmanager
    def recording(self) -> Iterator[None]:
        self.calls = []

        def enter(module: Any, args: tuple, kwargs: dict) -> None:
            self.calls.append({})

        def keep(boundary: int) -> Any:
            def hook(module: Any, args: tuple, kwargs: dict) -> None:
                self.calls[-1][boundary] = (args[0] if args else kwargs["hidden_states"]).detach().clone()
            return hook

        hooks = [self.model.register_forward_pre_hook(enter, with_kwargs=True)]
        hooks += [(self.layers[b] if b < len(self.layers) else self.norm).register_forward_pre_hook(keep(b), with_kwargs=True)
                  for b in self.kept]
        try:
            yield
        finally:
            for hook in hooks:
                hook.remove()

    @contextmanager
    def starting(self, boundary: int, model: Any = None) -> Iterator[None]:
        """Run ``model`` (default: the one recorded; another of the same architecture whose first ``boundary``
        layers compute as the recorded one's do) from ``boundary`` on."""
        if boundary == 0:
            yield
            return
        import torch

        target = self.model if model is None else model
        layers = target.get_decoder().layers
        calls = iter(self.calls)
        now: dict[str, Any] = {}
        count = len(layers)

        def enter(module: Any, args: tuple, kwargs: dict) -> None:
            now["stream"] = next(calls)[boundary]

        owner = self

        class StandIn(torch.nn.Module):  # no parameters of its own: the model's fingerprint and parts stay as they are
            def __init__(self, index: int):
                super().__init__()
                self.index = index

            def forward(self, hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
                stream = now["stream"]
                if hidden_states.shape[:2] != stream.shape[:2]:
                    raise RuntimeError(f"blame: a hybrid read {hidden_states.shape[1]} tokens where the recorded call "
                                       f"read {stream.shape[1]}: not the scoring its boundaries were recorded on")
                cache = kwargs.get("cache", kwargs.get("past_key_values"))
                if cache is not None:
                    layer = cache.layers[self.index]
                    past = layer.get_seq_length() if getattr(layer, "is_initialized", False) else 0
                    config = owner.model.config.get_text_config()
                    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
                    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
                    empty = torch.zeros((), dtype=stream.dtype, device=stream.device).expand(
                        stream.shape[0], heads, past + stream.shape[1], dim)
                    layer.keys, layer.values = empty, empty
                    layer.dtype, layer.device, layer.is_initialized = stream.dtype, stream.device, True
                owner.skipped += stream.shape[1]
                return stream

        saved = [layers[j] for j in range(min(boundary, count))]
        hooks = [target.register_forward_pre_hook(enter, with_kwargs=True)]
        for j in range(len(saved)):
            layers[j] = StandIn(j)
        try:
            yield
        finally:
            for j, layer in enumerate(saved):
                layers[j] = layer
            for hook in hooks:
                hook.remove()
